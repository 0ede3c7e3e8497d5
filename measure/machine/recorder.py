"""The recorder: JSONL, one line per finished or failed request, written as each ends.

The first line is a header (``"kind": "header"``) with the run's environment; later lines carry a
``kind`` of ``request`` (docs/design/record.md), ``event`` or ``sample``. A reader skips a cut last line,
so a run killed with SIGKILL leaves a file that parses and holds every request that had finished.

A line is serialised and written by the recorder's own writer thread, never by the caller: `record` and `write`
put the record (or the dict) on a queue and return, so the thread that dispatches the next request (the fleet's
I/O thread, the HTTP source's event loop, the live controller) does not spend the ~40 µs of a 256-token record's
JSON, nor wait on the fsync lock. The writer takes the lines that come within BATCH_S (50 ms) of the first in one
wake and hands them to the file (the kernel) together: a process that exits (atexit drains every open recorder),
is stopped by SIGTERM or calls `flush` or `close` (which end the gathering at once) loses none; one killed by
SIGKILL can lose the lines still queued at that instant, those of the last 50 ms or so. `flush` waits until
every line handed over so far is in the file; `close` drains the queue, then syncs and closes. fsync, which only
matters when the machine itself stops (a power loss, a kernel crash), runs at most once a second (a timer syncs
what was written since) and at close: such a stop can lose the lines of the last second or so, never part of a
line in the middle of the file.
"""
from __future__ import annotations

import atexit
import json
import os
import queue
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from measure.core.lines import Line, Lines, RunHeader, as_line, event_line, grouped, line_of
from measure.core.records import RequestRecord

FSYNC_EVERY_S = 1.0  # the most often the file is synced to the disk
BATCH_S = 0.05  # the writer takes the lines that came within this long of the first in one wake (flush, close: at once)

_OPEN: weakref.WeakSet[Recorder] = weakref.WeakSet()


@atexit.register
def _drain_open_recorders() -> None:
    """A program that ends without closing its recorder still writes every line it handed over."""
    for r in list(_OPEN):
        r.close()


class _Flush:
    """A marker on the writer's queue: set once every line before it is written."""

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = object()  # the last item on the queue: the writer ends


class Recorder:
    """Appends one JSON line per call, whole or not at all: a line the disk could not take (full, gone) is cut
    back off the file, the failure is kept in `failed` and said once through `on_error` (on the writer thread),
    and later lines are dropped, so every line in the file parses and the run itself goes on. A line that cannot
    be serialised is said through `on_error` too and counted in `lost`; the lines after it are written."""

    def __init__(self, path: str | os.PathLike[str], header: Mapping[str, object], fsync: bool = True,
                 on_error: Callable[[str], None] | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # readable by its owner only: records and recordings can name prompts and servers
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = os.fstat(self._fd).st_size
        self._fsync = fsync
        self._lock = threading.Lock()  # the file: the writer's writes, the fsync timer, close
        self.on_error = on_error
        self.failed: str | None = None
        self.lost = 0  # lines not written after a failure
        self._synced = -FSYNC_EVERY_S  # monotonic time of the last fsync
        self._dirty = False  # lines written since it
        self._timer: threading.Timer | None = None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closing = False
        self._hurry = threading.Event()  # flush and close: the writer stops gathering a batch
        self._put_lock = threading.Lock()  # close's last item goes after every line put before it
        self._write_line(RunHeader.of(header).to_line())  # the header at once: the file is a recording from here
        self.writer_ident: int | None = None  # the writer thread's id (a test asks that no hot thread writes)
        self._writer = threading.Thread(target=self._drain, name="recorder-writer", daemon=True)
        self._writer.start()
        _OPEN.add(self)

    # ---- any thread: hand a line over ------------------------------------------------------------
    def write(self, obj: dict[str, object]) -> None:
        self._put(obj)

    def record(self, rec: RequestRecord) -> None:
        """The record, serialised on the writer thread (to_dict, then JSON): a record is final when it is handed
        over (every source makes it as its request ends; one changed later, e.g. moved onto another clock, is a
        new record: records.shifted)."""
        self._put(rec)

    def event(self, t_ns: int, text: str, **extra: Any) -> None:
        self._put(event_line(t_ns, text, extra))

    def _put(self, item: Any) -> None:
        with self._put_lock:
            if not self._closing:
                self._queue.put(item)

    def flush(self, timeout: float | None = None) -> bool:
        """Until every line handed over before this call is in the file (the kernel's); False past `timeout`."""
        mark = _Flush()
        with self._put_lock:
            closing = self._closing
            if not closing:
                self._queue.put(mark)
                self._hurry.set()
        if closing:  # close drains the queue: flushed when the writer has ended
            self._writer.join(timeout)
            return not self._writer.is_alive()
        return mark.done.wait(timeout)

    def close(self) -> None:
        """Every line handed over written, then synced and closed. Idempotent."""
        with self._put_lock:
            first = not self._closing
            self._closing = True
            if first:
                self._queue.put(_STOP)
                self._hurry.set()
        _OPEN.discard(self)
        if self._writer is not threading.current_thread():
            self._writer.join()
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

    # ---- the writer thread ------------------------------------------------------------------------
    def _drain(self) -> None:
        self.writer_ident = threading.get_ident()
        while True:
            first = self._queue.get()
            if first is not _STOP and not isinstance(first, _Flush):
                # let the lines of a burst gather: one wake of this thread and one hand-over of the GIL per batch,
                # not per line (at 64 streams, a wake per record cost the event loop ≈ 0.3 % of its tok/s, most of
                # it at the instants many requests end together: docs/design/client-processes.md)
                self._hurry.wait(BATCH_S)
                self._hurry.clear()  # (a flush's mark was put before its set: this batch takes it)
            batch = [first]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if not self._write_batch(batch):
                return

    def _write_batch(self, batch: list[Any]) -> bool:
        """The batch's lines, in order, each whole or not at all; flush marks set once the lines before them are
        written. False at the stop mark (the lines before it written)."""
        lines: list[bytes] = []
        for item in batch:
            if item is _STOP or isinstance(item, _Flush):
                if lines:
                    self._append(b"".join(lines), len(lines))
                    lines = []
                if not isinstance(item, _Flush):
                    return False
                item.done.set()
                continue
            try:
                lines.append(_line(item.to_dict() if isinstance(item, RequestRecord) else item))
            except (TypeError, ValueError) as exc:  # not JSON (a caller's bug): said, counted, the rest written
                self.lost += 1
                self._say(f"cannot serialise a line for {self.path}: {exc}")
        if lines:
            self._append(b"".join(lines), len(lines))
        return True

    def _say(self, text: str) -> None:
        """on_error, whose own failure does not end the writer (the lines after it are still written)."""
        try:
            if self.on_error:
                self.on_error(text)
        except Exception:  # noqa: BLE001 - the caller's callback; the recording goes on
            pass

    def _write_line(self, obj: dict[str, object]) -> None:
        self._append(_line(obj))

    def _append(self, data: bytes, n_lines: int = 1) -> None:
        """`n_lines` whole lines, written or cut back off the file together."""
        with self._lock:
            if self._fd < 0:
                return
            if self.failed:
                self.lost += n_lines
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
                why = self.failed = f"cannot write {self.path}: {exc.strerror or exc}"
                self.lost += n_lines
                try:
                    os.ftruncate(self._fd, self._size)  # no half line left behind
                except OSError:
                    pass
            else:
                return
        self._say(why)

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
                why = self.failed = f"cannot write {self.path}: {exc.strerror or exc}"
            else:
                self._synced, self._dirty = time.monotonic(), False
                return
        self._say(why)


def _line(obj: dict[str, object]) -> bytes:
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode("utf-8")


def read_lines(path: str | os.PathLike[str]) -> list[Line]:
    """Every line of a recording or records file as its dataclass (lines.py), in the file's order; a cut last line
    is skipped with a warning. ValueError (LineError naming the field) for a line inference-top did not write."""
    out: list[Line] = []
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
                warnings.warn(f"{path}: last line is cut (the run was killed while writing); skipped", stacklevel=3)
                continue
            raise ValueError(f"{path}:{i + 1} is not JSON") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{i + 1} is not a JSON object")
        out.append(line_of(obj, f"{path}:{i + 1}"))  # LineError (a ValueError) naming the field
    return out


def read_header(path: str | os.PathLike[str]) -> RunHeader | None:
    """A records file's header alone (its first line, checked); None where the file starts with another line."""
    with Path(path).open("rb") as f:
        first = f.readline()
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        raise ValueError(f"{path}:1 is not JSON") from None
    if not isinstance(obj, dict) or obj.get("kind") != "header":
        return None
    return RunHeader.of(obj, f"{path}:1")


def read_jsonl(path: str | os.PathLike[str]) -> Lines:
    """(headers, request records, other lines) of a recording, each its dataclass (lines.py)."""
    return grouped(read_lines(path))


def encoded(line: Line) -> bytes:
    """A line as the recorder writes it: read_lines' lines written again are the file's bytes."""
    return _line(as_line(line))
