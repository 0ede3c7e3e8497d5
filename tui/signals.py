"""Signals for the dashboard, replay and bench: SIGINT (Ctrl-C as a signal, e.g. `kill -INT`), SIGTERM and
SIGHUP (the terminal closed) end the program the way `q` does; once the cleanup runs, further ones are
ignored so a second Ctrl-C cannot cut it half-way (workers mid-stop, a summary or recording unwritten)."""
from __future__ import annotations

import errno
import os
import signal
import threading
from collections.abc import Callable

NAMES = ("SIGINT", "SIGTERM", "SIGHUP")


def hold() -> None:
    """Ignore SIGINT, SIGTERM and SIGHUP from now on: the process is already ending."""
    for name in NAMES:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


def terminal_gone(fd: int = 1) -> bool:
    """Whether the terminal on `fd` hung up under the program without a SIGHUP reaching it (a parent kept the
    session, as `make run` does: the kernel signals the session's leader, make, not the dashboard): its process
    group can no longer be asked (EIO, as its writes). Not a terminal at all (a pipe, a headless test): False."""
    try:
        os.tcgetpgrp(fd)
    except OSError as exc:
        return exc.errno in (errno.EIO, errno.ENXIO)
    return False


EXIT_WAIT_S = 5.0  # after an exit began (`q`, a signal), how long the app has to end before the watchdog ends it


class Cleanup:
    """The run's cleanup (stop every worker, close the recording), done once whoever asks first: the app's own
    exit, or the watchdog when the app cannot end. `arm` starts the watchdog (once): where the app has not ended
    EXIT_WAIT_S later — the terminal is gone (a closed window, a killed tmux session): Textual's writer thread can
    no longer write, its queue fills and the app waits on it for ever while its input thread spins on the closed
    terminal — it runs the cleanup itself and ends the process (exit status 128 + the signal, or 1)."""

    def __init__(self, close: Callable[[], None] | None):
        self._close, self._lock, self._done = close, threading.Lock(), False
        self.ended = threading.Event()  # set once the caller's own cleanup has run (finish): the watchdog stands down
        self._armed = False

    def __call__(self) -> None:
        with self._lock:
            if self._done or self._close is None:
                return
            self._done = True
            self._close()

    def finish(self) -> None:
        """The caller's own end: the cleanup (unless the watchdog ran it), then the watchdog stood down."""
        self()
        self.ended.set()

    def arm(self, status: int = 1) -> None:
        if self._armed or self._close is None:
            return
        self._armed = True

        def watchdog() -> None:
            if self.ended.wait(EXIT_WAIT_S):
                return
            self()  # (not hold(): signal handlers are set from the main thread only; a further signal re-arms nothing)
            if not self.ended.wait(EXIT_WAIT_S):  # the caller's cleanup ran and it is ending: let it
                os._exit(status)

        threading.Thread(target=watchdog, name="exit-watchdog", daemon=True).start()


def quit_on_signals(app, close: Callable[[], None] | None = None) -> Cleanup:
    """SIGINT, SIGTERM and SIGHUP ask the Textual `app` to exit as `q` does (its caller then stops every worker
    and closes the recording, after `hold()`, by the Cleanup returned: its `finish`); each arms the
    Cleanup's watchdog first, so that an app that cannot end is ended (Cleanup.arm). The app arms it too on any
    exit of its own (tui/app.InferenceTop.exit)."""
    cleanup = Cleanup(close)
    app.cleanup = cleanup

    def handler(signum, frame):
        cleanup.arm(128 + signum)
        try:
            app.call_later(app.exit)
        except Exception:  # noqa: BLE001 - an app already closing its loop: the watchdog ends it
            pass

    for name in NAMES:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), handler)
    return cleanup
