"""Pure parts with no threads of their own: records, metrics, units, workload, probes, guard, recorder."""
