"""The recorder: JSONL, one line per finished or failed request, written as each ends.

The first line is a header (``"kind": "header"``) with the run's environment; later lines carry a
``kind`` of ``request`` (docs/design.md §3), ``event`` or ``sample``. A reader skips a cut last line,
so a run killed with SIGKILL leaves a file that parses and holds every request that had finished.

Each line goes to the file (the kernel) as it is written: a process that exits, is stopped by SIGTERM or killed
by SIGKILL loses none. fsync, which only matters when the machine itself stops (a power loss, a kernel crash),
runs at most once a second (a timer syncs what was written since) and at close: such a stop can lose the lines
of the last second or so, never part of a line in the middle of the file.
"""
from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from measure.core.lines import RunHeader, check_line, event_line, request_of
from measure.core.records import RequestRecord

FSYNC_EVERY_S = 1.0  # the most often the file is synced to the disk


class Recorder:
    """Appends one JSON line per call, whole or not at all: a line the disk could not take (full, gone) is cut
    back off the file, the failure is kept in `failed` and said once through `on_error`, and later lines are
    dropped, so every line in the file parses and the run itself goes on."""

    def __init__(self, path: str | os.PathLike[str], header: dict[str, Any], fsync: bool = True,
                 on_error: Callable[[str], None] | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # readable by its owner only: records and recordings can name prompts and servers
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = os.fstat(self._fd).st_size
        self._fsync = fsync
        self._lock = threading.Lock()
        self.on_error = on_error
        self.failed: str | None = None
        self.lost = 0  # lines not written after a failure
        self._synced = -FSYNC_EVERY_S  # monotonic time of the last fsync
        self._dirty = False  # lines written since it
        self._timer: threading.Timer | None = None
        self.write(RunHeader.of(header).to_line())

    def write(self, obj: dict[str, Any]) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock:
            if self._fd < 0:
                return
            if self.failed:
                self.lost += 1
                return
            try:
                view = memoryview(data)
                while view:
                    n = os.write(self._fd, view)
                    view = view[n:]
                self._size += len(data)
                if self._fsync:
                    self._sync_soon()
            except OSError as exc:
                self.failed = f"cannot write {self.path}: {exc.strerror or exc}"
                self.lost += 1
                try:
                    os.ftruncate(self._fd, self._size)  # no half line left behind
                except OSError:
                    pass
                notify = self.on_error
            else:
                return
        if notify:
            notify(self.failed)

    def _sync_soon(self) -> None:
        """fsync now if the last was a second ago or more, else once that second is up (the lock is held)."""
        wait = self._synced + FSYNC_EVERY_S - time.monotonic()
        if wait <= 0:
            os.fsync(self._fd)
            self._synced, self._dirty = time.monotonic(), False
            return
        self._dirty = True
        if self._timer is None:
            self._timer = threading.Timer(wait, self._sync_due)
            self._timer.daemon = True
            self._timer.start()

    def _sync_due(self) -> None:
        with self._lock:
            self._timer = None
            if self._fd < 0 or not self._dirty or self.failed:
                return
            try:
                os.fsync(self._fd)
            except OSError as exc:
                self.failed = f"cannot write {self.path}: {exc.strerror or exc}"
                notify = self.on_error
            else:
                self._synced, self._dirty = time.monotonic(), False
                return
        if notify:
            notify(self.failed)

    def record(self, rec: RequestRecord) -> None:
        self.write(rec.to_dict())

    def event(self, t_ns: int, text: str, **extra: Any) -> None:
        self.write(event_line(t_ns, text, extra))

    def close(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._fd >= 0:
                try:
                    if self._dirty and not self.failed:
                        os.fsync(self._fd)
                    os.close(self._fd)
                except OSError:
                    pass
                self._fd = -1


def read_jsonl(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[RequestRecord], list[dict[str, Any]]]:
    """(headers, request records, other lines) of a recording; a cut last line is skipped with a warning."""
    headers, records, other = [], [], []
    try:
        lines = Path(path).read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (byte {exc.start}): not an inference-top recording") from None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                warnings.warn(f"{path}: last line is cut (the run was killed while writing); skipped", stacklevel=2)
                continue
            raise ValueError(f"{path}:{i + 1} is not JSON") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{i + 1} is not a JSON object")
        where = f"{path}:{i + 1}"
        kind = check_line(obj, where)  # LineError (a ValueError) naming the field
        if kind == "header":
            headers.append(obj)
        elif kind == "request":
            records.append(request_of(obj, where))
        else:
            other.append(obj)
    return headers, records, other

