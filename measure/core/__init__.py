"""The pure core (docs/design/shape.md): records, units, datasets and arrivals, the workload, metrics, the guard
and the roofline, as a tree (pyproject.toml's contracts); no threads, processes, sockets or machine readings
(measure/machine)."""
