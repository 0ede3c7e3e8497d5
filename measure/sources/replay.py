"""A recorded dashboard session as a load source: the recording's token timestamps and records come back
as events, and its system samples and process readings come back as probe readings, on a replay clock
that the replay controller (control/live/replay.py) moves."""
from __future__ import annotations

import bisect
import os
import queue
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from measure.core.lines import EventLine, RunHeader, Sample
from measure.core.readings import SystemSample
from measure.machine.model_choice import engine_label
from measure.machine.recorder import read_jsonl
from measure.core.records import Mode, RequestRecord, RunMeta
from measure.core.units import NS
from measure.core.workload import Load
from measure.sources.base import Capabilities, Event, Finished, Started, Tokens, WorkerInfo


class RecordingError(ValueError):
    """A file that is not a recording a replay can use: one line saying why."""


@dataclass
class Recording:
    header: RunHeader
    records: list[RequestRecord]
    samples: list[Sample]
    events: list[EventLine]
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Recording:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                lines = read_jsonl(path)
        except (OSError, ValueError) as exc:
            raise RecordingError(f"cannot read {path}: {exc}") from None
        samples = sorted(lines.samples, key=lambda o: o.t_ns)
        events = sorted(lines.events, key=lambda o: o.t_ns)
        if not lines.headers:
            raise RecordingError(f"{path} has no header line: not an inference-top recording")
        if not samples:
            raise RecordingError(f"{path} has no system samples: record a dashboard session with --record "
                                 "(a bench output is for `inference-top report`)")
        for s in samples:
            _check_sample(path, s)
        return cls(lines.headers[0], lines.records, samples, events, [str(w.message) for w in caught])  # checked

    @property
    def t0_ns(self) -> int:
        s = self.samples[0]
        return s.t_ns - int(s.t * NS)

    @property
    def end_ns(self) -> int:
        return self.samples[-1].t_ns

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.t0_ns) / NS


def _check_sample(path: str | os.PathLike[str], s: Sample) -> None:
    """A sample the replay can draw: its system reading and workers as the dashboard wrote them (the line's own
    fields were checked as it was read: lines.Sample)."""
    try:
        SystemSample(**s.system)
        for w in s.workers:
            WorkerInfo(**w)
    except TypeError:
        raise RecordingError(f"{path}: the sample at t_ns {s.t_ns} is not one the dashboard wrote (its system "
                             "reading or a worker has a field missing or one it does not know)") from None


def _done_ns(r: RequestRecord) -> int:
    """The end of a record the replay kept (those with a t_done_ns)."""
    assert r.t_done_ns is not None
    return r.t_done_ns


class ReplaySource:
    """The LoadSource of a recording. It runs nothing: `feed(lo, hi)` puts what happened in (lo, hi] on
    `events`, and `current` is the recorded sample of the moment (workers, system, processes)."""

    def __init__(self, rec: Recording):
        h = rec.header
        first = rec.samples[0]
        self.rec = rec
        self.meta = RunMeta(engine=engine_label(h.engine), model=h.model or "?", model_bytes=h.model_bytes or 0,
                            mode=first.mode, b=first.b, simulated=h.simulated)
        self.run_id = h.run_id or "replay"
        self.events: queue.Queue[Event] = queue.Queue()
        self.mode = self.meta.mode
        self.target_k = first.k
        self.b = self.meta.b
        self.rep = 0
        self.oom_killed: list[tuple[int, int, str]] = []  # nothing here runs under this machine's OOM killer
        self.current: Sample = first
        toks = sorted(((t, r.worker, r.request_id) for r in rec.records for t in r.token_ns), key=lambda x: x[0])
        self._tok, self._tok_t = toks, [t[0] for t in toks]
        self._recs = sorted((r for r in rec.records if r.t_done_ns), key=_done_ns)
        self._starts = sorted((r.t_started_ns, r.worker, r.request_id) for r in rec.records if r.t_started_ns)
        self._starts_t = [s[0] for s in self._starts]
        self._recs_t = [_done_ns(r) for r in self._recs]

    def capabilities(self) -> Capabilities:
        return Capabilities(engine=self.meta.engine, weight_bytes=self.meta.model_bytes, modes=(self.mode,),
                            scales_k=False, local=False, batch_capacity=self.b, server_view=False,
                            simulated=self.meta.simulated, endpoint=self.rec.header.url, finite_loads=False)

    def feed(self, lo_ns: int, hi_ns: int) -> None:
        """Requests begun, token batches and finished records with times in (lo, hi], as the live source
        sent them."""
        for t, wid, rid in self._starts[bisect.bisect_right(self._starts_t, lo_ns):
                                        bisect.bisect_right(self._starts_t, hi_ns)]:
            self.events.put(Started(wid, rid, t))
        i, j = bisect.bisect_right(self._tok_t, lo_ns), bisect.bisect_right(self._tok_t, hi_ns)
        by: dict[tuple[int | None, int], list[int]] = {}
        for t, wid, rid in self._tok[i:j]:
            by.setdefault((wid, rid), []).append(t)
        for (wid, rid), ts in by.items():
            self.events.put(Tokens(wid, rid, ts))
        for r in self._recs[bisect.bisect_right(self._recs_t, lo_ns):bisect.bisect_right(self._recs_t, hi_ns)]:
            self.events.put(Finished(r))

    # probes: the recorded readings of the moment
    def sample(self) -> SystemSample:
        return SystemSample(**self.current.system)

    def processes(self, pids: Iterable[int | None]) -> dict[int, tuple[int, float]]:
        return {int(p): (int(v[0]), float(v[1])) for p, v in self.current.procs.items()}

    def ours_cpu(self) -> float | None:
        return self.current.ours_cpu

    def workers(self) -> list[WorkerInfo]:
        return [WorkerInfo(**w) for w in self.current.workers]

    def server_view(self) -> dict[str, Any] | None:
        return None

    # a replay runs no engine: what would change the load does nothing
    def start(self, wait_ready: bool = False, timeout: float = 0) -> None:
        pass

    def wait_ready(self, timeout: float = 0) -> None:
        pass

    def scale_to(self, k: int) -> None:
        pass

    def set_batch(self, mode: Mode, b: int, b_cap: int | None = None, seq_ctx: int | None = None) -> None:
        pass

    def set_load(self, load: Load | None) -> None:
        pass

    def set_users(self, users: int | None) -> None:
        pass

    def pause(self, paused: bool = True) -> None:
        pass

    def close(self, grace: float = 0) -> None:
        pass


class RecordedProcesses:
    """The process probe of a replay: what the recording saw of each worker."""

    def __init__(self, source: ReplaySource):
        self.source = source

    def sample(self, pids: Iterable[int | None]) -> dict[int, tuple[int, float]]:
        return self.source.processes(pids)

    def ours(self) -> float | None:
        return self.source.ours_cpu()
