"""The live dashboard's control: the controller, its steps, statistics, snapshot, wall and admission, the replay,
--peer and --prometheus (docs/design.md §1). Imports nothing of measure.control.bench (an import-linter contract)."""
