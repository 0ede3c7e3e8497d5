"""The measurement core: fleet, workload, metrics, probes, recorder. Never imports textual."""
