"""The measurement core of inference-top. Never imports textual.

Three layers, each importing only the ones below it (import-linter's layers contract in pyproject.toml):
  control/  what drives a load and reads it back: the live controller (statistics, admission, the wall,
            snapshots, export), replay, the headless sweep, reports, and the run plan made from arguments
  sources/  load sources behind one protocol: the process fleet (+ its worker), HTTP streams, simulated
  core/     pure parts: records, metrics, workload and arrivals, probes, the memory guard, the recorder
"""
