"""What drives a load source and reads it back: live controller, replay, sweep, report, run plan."""
