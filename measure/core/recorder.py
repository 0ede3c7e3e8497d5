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
    def __init__(self, path: str | os.PathLike, header: dict, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # readable by its owner only: records and recordings can name prompts and servers
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._fh = os.fdopen(fd, "a", encoding="utf-8")
        self._fsync = fsync
        self._lock = threading.Lock()
        self.write(dict(header, kind="header"))

    def write(self, obj: dict) -> None:
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self._lock:
            if self._fh.closed:
                return
            self._fh.write(line)
            self._fh.flush()
            if self._fsync:
                os.fsync(self._fh.fileno())

    def record(self, rec: RequestRecord) -> None:
        self.write(rec.to_dict())

    def event(self, t_ns: int, text: str, **extra) -> None:
        self.write(dict(extra, kind="event", t_ns=t_ns, text=text))

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()


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
