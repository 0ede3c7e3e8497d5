"""Machine I/O (docs/design/shape.md): what reads or drives this machine — probes, the ceilings probe, the power
meter, the environment, the recorder's file, the clock check, the host's tools — beside measure.core, which stays
pure."""
