"""One way to start, talk to and stop a child process, for both kinds there are: a fleet's engine workers
(sources/worker.py) and an HTTP pool's client processes (sources/http_pool.py), docs/design/client-processes.md.

A child is a fresh interpreter (`python -m measure.sources.child`), not multiprocessing's spawn, which re-runs
the caller's main script in every child (a Ray worker's, a benchmark's). It inherits two things: its pipe, a
socket pair's end (a multiprocessing Connection: pickled messages/messages.py), and the write end of a pipe it
holds until it exits, whose read end here (`sentinel`) turns readable then, for a selector. It is handed the
parent's sys.path, then the function to run and its arguments: `target(conn, *args)`. Its face is
multiprocessing.Process's: pid, sentinel, is_alive, exitcode, join, terminate, kill. POSIX only (inherited
file descriptors), as the fleet and the pool always were.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Child:
    """A child process running `target(conn, *args)`; `conn` is the parent's end of its pipe."""

    def __init__(self, target: Callable[..., None], args: tuple[Any, ...], name: str):
        self.name = name
        here, there = socket.socketpair()
        death_r, death_w = os.pipe()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-m", "measure.sources.child", str(there.fileno()), str(death_w), name],
                pass_fds=(there.fileno(), death_w), env=env, stdin=subprocess.DEVNULL)
        except OSError:
            os.close(death_r)
            here.close()
            raise
        finally:
            there.close()
            os.close(death_w)
        self.pid = self._popen.pid
        self.sentinel = death_r
        weakref.finalize(self, os.close, death_r)  # as multiprocessing closes its sentinel
        self.conn: Connection[Any, Any] = Connection(here.detach())
        self.conn.send(list(sys.path))  # first, so that the target and its arguments unpickle there
        self.conn.send((target, args))

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    @property
    def exitcode(self) -> int | None:
        """None while it runs; −N: ended by signal N."""
        return self._popen.poll()

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def terminate(self) -> None:
        if self.is_alive():
            self._popen.terminate()

    def kill(self) -> None:
        if self.is_alive():
            self._popen.kill()


def stop_all(children: Iterable[Child], grace: float) -> None:
    """Wait up to `grace` seconds in all for children already asked to leave, then SIGTERM those left, then
    SIGKILL: never leaves one behind. Their pipes stay open (the caller's reader may still drain them)."""
    kids = list(children)
    deadline = time.monotonic() + grace
    for c in kids:
        c.join(max(0.0, deadline - time.monotonic()))
    for c in kids:
        c.terminate()
    for c in kids:
        c.join(0.5)
        if c.is_alive():
            c.kill()
            c.join(0.5)


def _main(argv: list[str]) -> None:
    conn: Connection[Any, Any] = Connection(int(argv[0]))
    death = int(argv[1])  # held open until this process ends: the parent's sentinel
    os.set_inheritable(death, False)  # …and only by this one, not by what it starts
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group; the parent decides
    sys.path[:] = conn.recv()
    target, args = conn.recv()
    target(conn, *args)


if __name__ == "__main__":
    _main(sys.argv[1:])
