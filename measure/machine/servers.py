"""A server process of ours on loopback: started with its output in a log, waited for until a URL answers, stopped.
One way for every command that starts one (tune's llama-server candidates, server-vs-engine's `--serve`)."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path


class ServerStartError(Exception):
    """The server exited before it answered, or did not answer in time: one line saying why (its log named)."""


def start_server(cmd: Sequence[str], ready_url: str, log_path: Path, ready_s: float, name: str,
                 started: Callable[[subprocess.Popen[bytes]], None] | None = None) -> subprocess.Popen[bytes]:
    """Run `cmd`, its output in `log_path`, until GET `ready_url` answers 200. `started` gets the process as soon
    as it runs (a caller that stops what it started). ServerStartError where it exits first (its log's last line
    the reason) or does not answer within `ready_s` (then it is stopped)."""
    from engines import http_sync

    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT)
    if started is not None:
        started(proc)
    end = time.monotonic() + ready_s
    while True:
        if proc.poll() is not None:
            tail = [x for x in log_path.read_text(errors="replace").splitlines() if x.strip()][-1:]
            raise ServerStartError(f"{name} exited with {proc.returncode} before it answered"
                                   + (f": {tail[0][:200]}" if tail else "") + f" (log: {log_path})")
        try:
            if http_sync.get(ready_url, 2).status_code == 200:
                return proc
        except http_sync.HTTPError:
            pass
        if time.monotonic() > end:
            stop_server(proc)
            raise ServerStartError(f"{name} did not answer within {ready_s:.0f} s (log: {log_path})")
        time.sleep(0.25)


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server that still runs; kill it where it has not ended 15 s later."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
