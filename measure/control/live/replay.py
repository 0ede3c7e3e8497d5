"""Replay a recorded session (`inference-top --record FILE`): a LiveController over the recording's
ReplaySource, its probes and a replay clock. The controller recomputes every figure from the recorded
tokens and records, as it did live; going back in time builds a fresh controller and replays up to there."""
from __future__ import annotations

import bisect
import threading
import time
from pathlib import Path
from typing import Any

from measure.control.live.controller import LiveController, LiveHooks, LiveSettings
from measure.control.live.snapshot import RunInfo, Snapshot
from measure.core.units import NS
from measure.core.work import work_from_dict
from measure.sources.base import Capabilities
from measure.sources.replay import RecordedProcesses, Recording, RecordingError, ReplaySource
from presets import Workload

__all__ = ["Recording", "RecordingError", "ReplayController"]

NO_ENGINE = "a replay runs no engine: K and B are what the recording shows"


def _settings(saved: dict[str, Any]) -> LiveSettings:
    """The recorded settings, each of the type the live controller used (else RecordingError)."""
    defaults = LiveSettings()
    out = {}
    for key, value in saved.items():
        if key not in LiveSettings.__dataclass_fields__ or key in ("slo", "cost", "engine_baseline", "served"):
            continue  # presets and costs are not replayed: the recording's rows already hold their figures; the
            # served model's work is the header's (_fresh)
        d = getattr(defaults, key)
        num = isinstance(value, (int, float)) and not isinstance(value, bool)
        fits = (value is None and d is None) or (isinstance(d, bool) and isinstance(value, bool)) or (
            isinstance(d, str) and isinstance(value, str)) or (not isinstance(d, (bool, str)) and num)
        if not fits or (key in ("window_s", "sample_hz", "history_s") and not value > 0):
            raise RecordingError(f"the recording's setting {key}={value!r} is not one the dashboard wrote")
        out[key] = value
    return LiveSettings(**out)


class ReplayController:
    def __init__(self, rec: Recording, speed: float = 1.0):
        self.rec = rec
        self.speed = speed
        self.replay_paused = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sample_t = [s.t_ns for s in rec.samples]
        self._ev_t = [e.t_ns for e in rec.events]
        self._fresh()
        self._anchor = (time.monotonic(), rec.t0_ns)  # wall time ↔ recorded time

    def _fresh(self) -> None:
        """A new controller at the recording's start."""
        h = self.rec.header
        s = _settings(h.settings)
        s.chip = s.chip if h.chip is None else h.chip  # a header's null chip: the settings' own
        s.bandwidth_gbps = h.bandwidth_gbps if "bandwidth_gbps" in h.line else s.bandwidth_gbps
        try:  # http: the served model's work, so the bandwidth product counts what the dashboard counted
            s.served = work_from_dict(h.served) if h.served else None
        except ValueError as exc:
            raise RecordingError(f"the recording's served model is not one the dashboard wrote ({exc})") from None
        self.now_ns = self.rec.t0_ns
        self._fed_ns = self.rec.t0_ns - 1  # everything up to here has been fed
        self.source = ReplaySource(self.rec)
        self.live = LiveController(self.source, Workload("replay", ""), s,
                                   hooks=LiveHooks(sys_probe=self.source, procs_probe=RecordedProcesses(self.source),
                                                   clock=lambda: self.now_ns,
                                                   watch_wall=False))  # the recording's WALL is in its samples and log
        if not any(e.type == "load_started" for e in self.rec.events):
            self.live.load_started(self.rec.t0_ns)  # a recording made before the event existed

    # ---- what the dashboard reads (controller.Controller) ----------------------------------------
    @property
    def info(self) -> RunInfo:
        return self.live.info

    @property
    def settings(self) -> LiveSettings:
        return self.live.settings

    @property
    def caps(self) -> Capabilities:
        return self.live.caps

    @property
    def mode(self) -> str:  # K, B and mode: what the recording shows at this moment
        return self.live.mode

    @property
    def k(self) -> int:
        return self.live.k

    @property
    def b(self) -> int:
        return self.live.b

    @property
    def totals(self) -> dict[str, int]:
        return self.live.totals

    def snapshot(self) -> Snapshot | None:
        return self.live.snapshot()

    # ---- the live keys: a replay runs no engine --------------------------------------------------
    def set_k(self, k: int) -> str | None:
        return NO_ENGINE

    def set_b(self, b: int) -> str | None:
        return NO_ENGINE

    def toggle_mode(self) -> str | None:
        return NO_ENGINE

    def reset_stats(self) -> None:
        """Request figures count from this moment of the recording (a seek back starts them afresh)."""
        with self._lock:
            self.live.reset_stats()

    def log(self, level: str, text: str) -> None:
        self.live.log(level, text)

    def export(self, path: str | Path | None = None) -> Path:
        """`e`: what the replay shows now, in the live export's format (the live controller's export of its
        snapshot, the records and levels fed up to this moment). Under the replay's lock, so the clock
        cannot move between the snapshot and the records."""
        with self._lock:
            return self.live.export(path)

    def banner(self) -> str:
        pos = min(self.position_ns(), self.rec.end_ns)
        return (f"REPLAY ×{self.speed:g}{' paused' if self.replay_paused else ''} "
                f"{(pos - self.rec.t0_ns) / NS:.0f}/{self.rec.duration_s:.0f} s")

    # ---- the replay clock --------------------------------------------------------------------
    def _feed(self, upto: int) -> None:
        self.source.feed(self._fed_ns, upto)
        lo = bisect.bisect_right(self._ev_t, self._fed_ns)
        for e in self.rec.events[lo:bisect.bisect_right(self._ev_t, upto)]:
            self.now_ns = e.t_ns
            if e.type == "marker":
                self.live.mark(e.text)
            elif e.type == "load_started":
                self.live.load_started(e.t_ns)
            elif e.type == "level":
                self.live.begin_level(e.text, e.t_ns)
            else:
                self.live.log(e.level or "info", e.text)
        self._fed_ns = upto

    def advance_to(self, t_ns: int) -> None:
        """Feed and tick at every recorded sample time up to t_ns, as the live sampler did."""
        with self._lock:
            start = bisect.bisect_right(self._sample_t, self._fed_ns)
            for s in self.rec.samples[start:bisect.bisect_right(self._sample_t, t_ns)]:
                self._feed(s.t_ns)
                self.now_ns = s.t_ns
                self.source.current = s
                live = self.live
                live.k = self.source.target_k = s.k
                live.b, live.mode, live.paused = s.b, s.mode, s.paused
                live.settings.users = s.users
                live.tick(state=s.state or "steady")

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
        """Jump; going back replays from the start into a fresh controller (the same figures, recomputed)."""
        target = min(max(self.rec.t0_ns, self.position_ns() + int(delta_s * NS)), self.rec.end_ns)
        if target < self._fed_ns:
            with self._lock:
                self._fresh()
        self._anchor = (time.monotonic(), target)
        self.advance_to(target)

    def start(self, thread: bool = True) -> None:
        self.advance_to(self.rec.t0_ns + 1)
        if thread:
            threading.Thread(target=self._run, daemon=True, name="replay").start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.advance_to(min(self.position_ns(), self.rec.end_ns))

    def close(self) -> None:
        self._stop.set()
