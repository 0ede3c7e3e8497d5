"""Load sources: everything that turns requests into token timestamps, behind `base.LoadSource`."""
