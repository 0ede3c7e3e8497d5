"""A bench's control: the cell and its summary, sweep, knee, runs and report, compare, server-vs-engine and the
bench's client actors on a Ray cluster (docs/design/shape.md). Imports nothing of measure.control.live.controller (an import-linter
contract)."""
