"""Replay a recorded session (`inference-top --record FILE`) through the same controller the live
dashboard uses: the recording's token timestamps, records, system samples and events are fed back on
a replay clock, and the controller recomputes every figure from them, as it did live."""
from __future__ import annotations

import bisect
import queue
import threading
import time
import warnings
from dataclasses import dataclass, field

from bench.fleet import RunMeta, WorkerInfo
from bench.live import LiveController, LiveSettings
from bench.probes import SystemSample
from bench.recorder import read_jsonl
from bench.session import engine_label
from presets import Workload

NS = 1_000_000_000


class RecordingError(ValueError):
    """A file that is not a recording a replay can use: one line saying why."""


@dataclass
class Recording:
    header: dict
    records: list
    samples: list[dict]
    events: list[dict]
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path) -> "Recording":
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                headers, records, other = read_jsonl(path)
        except (OSError, ValueError) as exc:
            raise RecordingError(f"cannot read {path}: {exc}") from None
        samples = sorted((o for o in other if o.get("kind") == "sample"), key=lambda o: o["t_ns"])
        events = sorted((o for o in other if o.get("kind") == "event"), key=lambda o: o["t_ns"])
        if not headers:
            raise RecordingError(f"{path} has no header line: not an inference-top recording")
        if not samples:
            raise RecordingError(f"{path} has no system samples: record a dashboard session with --record "
                                 "(a bench output is for `inference-top report`)")
        return cls(headers[0], records, samples, events, [str(w.message) for w in caught])

    @property
    def t0_ns(self) -> int:
        s = self.samples[0]
        return s["t_ns"] - int(s.get("t", 0.0) * NS)

    @property
    def duration_s(self) -> float:
        return (self.samples[-1]["t_ns"] - self.t0_ns) / NS


class _ReplayFleet:
    """The little of a fleet the controller asks of: meta, K/B/mode, events and the workers table."""

    def __init__(self, rec: Recording):
        h = rec.header
        self.meta = RunMeta(engine=engine_label(h.get("engine", "?")),
                            model=h.get("model", "?"), model_bytes=int(h.get("model_bytes", 0)),
                            mode=rec.samples[0].get("mode", "instances"), b=rec.samples[0].get("b", 1),
                            simulated=bool(h.get("simulated")))
        self.target_k = rec.samples[0].get("k", 1)
        self.mode = self.meta.mode
        self.b = self.meta.b
        self.b_cap = self.b
        self.events: queue.Queue = queue.Queue()
        self.current: dict = rec.samples[0]

    def workers(self) -> list[WorkerInfo]:
        return [WorkerInfo(**w) for w in self.current.get("workers", [])]

    def start(self, wait_ready: bool = False, timeout: float = 0) -> None:
        pass

    def set_load(self, *a, **k) -> None:
        pass

    def set_users(self, *a) -> None:
        pass

    def close(self, grace: float = 0) -> None:
        pass


class ReplayController(LiveController):
    """A LiveController whose fleet, probes and clock come from a recording."""

    def __init__(self, rec: Recording, speed: float = 1.0):
        self.rec = rec
        h = rec.header
        s = LiveSettings(**{k: v for k, v in h.get("settings", {}).items() if k in LiveSettings.__dataclass_fields__})
        s.chip = h.get("chip", s.chip)
        s.bandwidth_gbps = h.get("bandwidth_gbps", s.bandwidth_gbps)
        self.now_ns = rec.t0_ns
        fleet = _ReplayFleet(rec)
        super().__init__(fleet, Workload("replay", ""), s, sys_probe=self, clock=lambda: self.now_ns)
        self.t0 = rec.t0_ns
        self._procs.sample = lambda pids: {int(p): tuple(v) for p, v in fleet.current.get("procs", {}).items()}
        toks = sorted((t, r.worker, r.request_id) for r in rec.records for t in r.token_ns)
        self._tok = toks
        self._tok_t = [t[0] for t in toks]
        self._recs = sorted((r for r in rec.records if r.t_done_ns), key=lambda r: r.t_done_ns)
        self._recs_t = [r.t_done_ns for r in self._recs]
        self._ev_t = [e["t_ns"] for e in rec.events]
        self._sample_t = [s["t_ns"] for s in rec.samples]
        self._fed_ns = rec.t0_ns - 1  # everything up to here has been fed
        self.speed = speed
        self.replay_paused = False
        self._lock2 = threading.Lock()
        self._anchor = (time.monotonic(), rec.t0_ns)  # wall time ↔ recorded time
        self._stop2 = threading.Event()

    # the system probe: the recorded sample of the moment
    def sample(self) -> SystemSample:
        return SystemSample(**self.fleet.current["system"])

    def state(self, workers) -> str:
        return self.fleet.current.get("state", "steady")

    def _check_wall(self, *a) -> None:
        pass  # the recording's WALL is in its samples and log; nothing to brake in a replay

    def _feed(self, upto: int) -> None:
        lo = self._fed_ns
        i, j = bisect.bisect_right(self._tok_t, lo), bisect.bisect_right(self._tok_t, upto)
        by: dict = {}
        for t, wid, rid in self._tok[i:j]:
            by.setdefault((wid, rid), []).append(t)
        for (wid, rid), ts in by.items():
            self.fleet.events.put(("tokens", wid, rid, ts))
        for r in self._recs[bisect.bisect_right(self._recs_t, lo):bisect.bisect_right(self._recs_t, upto)]:
            self.fleet.events.put(("record", r))
        for e in self.rec.events[bisect.bisect_right(self._ev_t, lo):bisect.bisect_right(self._ev_t, upto)]:
            self.now_ns = e["t_ns"]
            if e.get("type") == "marker":
                self.mark(e["text"])
            else:
                self.log(e.get("level", "info"), e["text"])
        self._fed_ns = upto

    def advance_to(self, t_ns: int) -> None:
        """Feed and tick at every recorded sample time up to t_ns, as the live sampler did."""
        with self._lock2:
            start = bisect.bisect_right(self._sample_t, self._fed_ns)
            for s in self.rec.samples[start:bisect.bisect_right(self._sample_t, t_ns)]:
                self._feed(s["t_ns"])
                self.now_ns = s["t_ns"]
                self.fleet.current = s
                self.fleet.target_k = self.k = s.get("k", self.k)
                self.b, self.mode, self.paused = s.get("b", self.b), s.get("mode", self.mode), s.get("paused", False)
                self.s.users = s.get("users")
                self.tick()

    def position_ns(self) -> int:
        wall0, rec0 = self._anchor
        if self.replay_paused:
            return rec0
        return rec0 + int((time.monotonic() - wall0) * self.speed * NS)

    def set_speed(self, speed: float) -> None:
        self._anchor = (time.monotonic(), self.position_ns())
        self.speed = max(0.25, min(64.0, speed))

    def toggle_pause(self) -> None:
        self._anchor = (time.monotonic(), self.position_ns())
        self.replay_paused = not self.replay_paused

    def seek(self, delta_s: float) -> None:
        """Jump; going back replays from the start into fresh state (the same figures, recomputed)."""
        target = min(max(self.rec.t0_ns, self.position_ns() + int(delta_s * NS)), self.rec.samples[-1]["t_ns"])
        paused = self.replay_paused
        if target < self._fed_ns:
            with self._lock2:
                version, stop = self._version, self._stop2
                self.__init__(self.rec, self.speed)  # fresh state, then recomputed up to the target
                self._version, self._stop2, self.replay_paused = version, stop, paused
        self._anchor = (time.monotonic(), target)
        self.advance_to(target)

    def label(self) -> str:
        pos = min(self.position_ns(), self.rec.samples[-1]["t_ns"])
        return (f"REPLAY ×{self.speed:g}{' paused' if self.replay_paused else ''} "
                f"{(pos - self.rec.t0_ns) / NS:.0f}/{self.rec.duration_s:.0f} s")

    def start(self, thread: bool = True) -> None:
        self.advance_to(self.rec.t0_ns + 1)
        if thread:
            threading.Thread(target=self._run_replay, daemon=True, name="replay").start()

    def _run_replay(self) -> None:
        while not self._stop2.wait(0.1):
            self.advance_to(min(self.position_ns(), self.rec.samples[-1]["t_ns"]))

    def close(self) -> None:
        self._stop2.set()
