"""The recorder: JSONL, one line per finished or failed request, written and fsynced as each ends.

The first line is a header (``"kind": "header"``) with the run's environment; later lines carry a
``kind`` of ``request`` (DESIGN section 3), ``event`` or ``sample``. A reader skips a cut last line,
so a run killed with SIGKILL leaves a file that parses and holds every request that had finished.
"""
from __future__ import annotations

import json
import os
import threading
import warnings
from pathlib import Path

from measure.core.records import RequestRecord


class Recorder:
    """Appends one JSON line per call, whole or not at all: a line the disk could not take (full, gone) is cut
    back off the file, the failure is kept in `failed` and said once through `on_error`, and later lines are
    dropped, so every line in the file parses and the run itself goes on."""

    def __init__(self, path: str | os.PathLike, header: dict, fsync: bool = True, on_error=None):
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
        self.write(dict(header, kind="header"))

    def write(self, obj: dict) -> None:
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
                if self._fsync:
                    os.fsync(self._fd)
                self._size += len(data)
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

    def record(self, rec: RequestRecord) -> None:
        self.write(rec.to_dict())

    def event(self, t_ns: int, text: str, **extra) -> None:
        self.write(dict(extra, kind="event", t_ns=t_ns, text=text))

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                try:
                    os.close(self._fd)
                except OSError:
                    pass
                self._fd = -1


def read_jsonl(path: str | os.PathLike) -> tuple[list[dict], list[RequestRecord], list[dict]]:
    """(headers, request records, other lines) of a recording; a cut last line is skipped with a warning."""
    headers, records, other = [], [], []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
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
        kind = obj.get("kind", "request")
        if kind == "header":
            headers.append(obj)
        elif kind == "request":
            records.append(RequestRecord.from_dict(obj))
        else:
            other.append(obj)
    return headers, records, other
