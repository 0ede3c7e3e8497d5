"""The wall: which ceiling the load is against now, and the memory wall with its brake.

The memory wall needs evidence: a memory reading (swap growing or swapping in, memory pressure, available
memory nearly gone: guard.detect_wall on consecutive system samples), or aggregate tok/s fallen below half
its pre-step rate ≥ 10 s after a step that *raised* the load (K or B up), with no pause, resume or mode change
since. A pause, or a step down, lowers tok/s by itself and is never a wall. The wall stays shown for
WALL_HOLD_S after the last reading that showed it, and the brake undoes the step up that led there, once.
"""
from __future__ import annotations

from dataclasses import dataclass

from measure.core.guard import detect_wall
from measure.core.readings import SystemSample
from measure.core.roofline import name_wall
from measure.core.units import NS

WALL_HOLD_S = 10.0


@dataclass(frozen=True)
class Step:
    """A K or B change: which, from, to, when (ns), and the aggregate tok/s just before it."""

    kind: str  # "k" | "b"
    old: int
    new: int
    t_ns: int
    tps_before: float


@dataclass(frozen=True)
class WallHit:
    why: str
    first: bool  # the first reading of this episode (mark and log it once)
    undo: Step | None  # the step the brake should undo, if any


@dataclass(frozen=True)
class WallLoad:
    """measured_wall's load itself: whether the server is remote (its ceilings are not measured here) with the
    streams asked and those decoding, and `threads`, the cores the workers' threads were given (0: all)."""

    remote: bool = False
    streams_asked: int = 1
    streams_decoding: float = 0.0
    threads: float = 0.0


def measured_wall(bw_gbps: float | None, beta_gbps: float | None, workers_cpu_percent: float, cores: int,
                  attainable_gbps: float | None = None, predicted_binding: str | None = None,
                  load: WallLoad = WallLoad()) -> str:
    """Which wall the load is against, by the one naming rule (core/roofline.name_wall, docs/design.md §11)
    applied to the measured figures: the bandwidth product's share of the attainable figure where the probe
    measured one (else of spec), the workers' CPU in cores, `threads` the cores their threads were given
    (0: all), and whether the roofline's binding ceiling is compute."""
    streams_asked, streams_decoding, threads = load.streams_asked, load.streams_decoding, load.threads
    if load.remote:  # the server's ceilings are not measured here; its queue shows in the streams it decodes
        if streams_asked > 1 and 0 < streams_decoding <= 1.2:
            return name_wall(0.0, queue=f"{streams_decoding:.1f} of {streams_asked} streams decode")[1]
        return "not measured here (the server's machine)"
    ref, ref_name = (attainable_gbps, "attainable") if attainable_gbps else (beta_gbps, "spec")
    bw_share = bw_gbps / ref if bw_gbps is not None and ref else 0.0
    return name_wall(bw_share, workers_cpu_percent / 100.0, cores, threads, predicted_binding == "compute",
                     ref=ref_name)[1]


class WallWatch:
    def __init__(self, brake: bool):
        self.brake = brake
        self.last_step: Step | None = None
        self._braked: Step | None = None
        self._compare: Step | None = None  # the step up whose pre-step rate tok/s is compared with
        self.reason: str | None = None
        self._until = 0

    def step(self, step: Step) -> None:
        self.last_step = step
        self._compare = step if step.new > step.old else None  # only a higher load's fall is a wall

    def load_changed(self) -> None:
        """A pause, a resume or a mode change: tok/s no longer compares with the rate before the last step."""
        self._compare = None

    def active(self, now_ns: int) -> bool:
        return bool(self.reason) and now_ns < self._until

    def check(self, prev: SystemSample | None, cur: SystemSample, agg_tps: float, now_ns: int) -> WallHit | None:
        step, cmp = self.last_step, self._compare
        since = (now_ns - cmp.t_ns) / NS if cmp else 0.0
        why = detect_wall(prev, cur, cmp.tps_before if cmp else None, agg_tps if cmp else None, since)
        if why is None:
            return None
        first = not self.active(now_ns)
        self.reason = why
        self._until = now_ns + int(WALL_HOLD_S * NS)
        undo = None
        if first and self.brake and step and self._braked is not step and step.new > step.old:
            self._braked = undo = step
        return WallHit(why, first, undo)
