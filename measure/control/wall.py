"""The wall: which ceiling the load is against now, and the memory wall with its brake.

The memory wall is detected from consecutive system samples (guard.detect_wall); it stays shown for
WALL_HOLD_S after the last reading that showed it, and the brake undoes the step that led there once.
"""
from __future__ import annotations

from dataclasses import dataclass

from measure.core.guard import detect_wall
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


def ceiling(bw_gbps: float | None, beta_gbps: float | None, workers_cpu_percent: float, cores: int) -> str:
    """Which wall the load is against: the chip's bandwidth, the CPU cores, or none yet."""
    if bw_gbps is not None and beta_gbps and bw_gbps >= 0.8 * beta_gbps:
        return f"memory bandwidth ({bw_gbps / beta_gbps:.0%} of spec)"
    if workers_cpu_percent >= 90.0 * cores:
        return f"CPU cores (workers busy on {workers_cpu_percent / 100:.1f} of {cores})"
    return "none reached"


class WallWatch:
    def __init__(self, brake: bool):
        self.brake = brake
        self.last_step: Step | None = None
        self._braked: Step | None = None
        self.reason: str | None = None
        self._until = 0

    def step(self, step: Step) -> None:
        self.last_step = step

    def active(self, now_ns: int) -> bool:
        return bool(self.reason) and now_ns < self._until

    def check(self, prev, cur, agg_tps: float, now_ns: int) -> WallHit | None:
        step = self.last_step
        since = (now_ns - step.t_ns) / NS if step else 0.0
        why = detect_wall(prev, cur, step.tps_before if step else None, agg_tps if step else None, since)
        if why is None:
            return None
        first = not self.active(now_ns)
        self.reason = why
        self._until = now_ns + int(WALL_HOLD_S * NS)
        undo = None
        if first and self.brake and step and self._braked is not step and step.new > step.old:
            self._braked = undo = step
        return WallHit(why, first, undo)
