"""What drives a load source and reads it back: live/ (the dashboard's controller, replay, --peer, --prometheus)
and bench/ (cell, sweep, knee, runs, report, compare, the Ray clients), which never import each other; the run plan
(plan.py), its builder (builder.py) and its wiring (wiring.py); tune."""
