"""The live dashboard's control: the controller, its steps, statistics, snapshot, wall and admission, the replay,
--peer and --prometheus (docs/design/shape.md). Imports nothing of measure.control.bench (an import-linter contract)."""
