"""Signals for the dashboard, replay and bench: SIGINT (Ctrl-C as a signal, e.g. `kill -INT`), SIGTERM and
SIGHUP (the terminal closed) end the program the way `q` does; once the cleanup runs, further ones are
ignored so a second Ctrl-C cannot cut it half-way (workers mid-stop, a summary or recording unwritten)."""
from __future__ import annotations

import signal

NAMES = ("SIGINT", "SIGTERM", "SIGHUP")


def hold() -> None:
    """Ignore SIGINT, SIGTERM and SIGHUP from now on: the process is already ending."""
    for name in NAMES:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


def quit_on_signals(app) -> None:
    """SIGINT, SIGTERM and SIGHUP ask the Textual `app` to exit as `q` does (its caller then stops every worker
    and closes the recording, after `hold()`)."""
    def handler(signum, frame):
        app.call_later(app.exit)

    for name in NAMES:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), handler)
