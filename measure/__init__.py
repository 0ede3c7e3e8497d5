"""The measurement core of inference-top. Never imports textual.

Four layers, each importing only the ones below it (import-linter's layers contract in pyproject.toml):
  control/  what drives a load and reads it back: the live controller (live/: statistics, admission, the wall,
            snapshots, export, replay), a bench's sweep, knee and compare (bench/), tune (tune/), reports, and
            the run plan made from arguments (plan, its builder, its wiring)
  sources/  load sources behind one protocol: the process fleet (+ its worker), HTTP streams, Ray clients,
            simulated, replayed traces
  machine/  this machine's I/O: probes and ceilings, residency, the recorder, model files, servers, power, Ray
  core/     pure parts, no file read: records, metrics, workloads and arrivals, the work model, the roofline and
            the kernel path, the memory guard and sizing
"""
