"""The wall: which ceiling the load is against now, and the memory wall with its brake.

The memory wall needs evidence: a memory reading (swap growing or swapping in, memory pressure, available
memory nearly gone: guard.detect_wall on consecutive system samples), or aggregate tok/s fallen below half
its pre-step rate ≥ 10 s after a step that *raised* the load (K or B up), with no pause, resume or mode change
since. A pause, or a step down, lowers tok/s by itself and is never a wall. The wall stays shown for
WALL_HOLD_S after the last reading that showed it, and the brake undoes the step up that led there, once.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from measure.core.guard import detect_wall
from measure.core.readings import SystemSample, crowded
from measure.core.residency import LevelMemory, Reading, Residency, StorageRates, gives_out, level_fit, past_wall_note, residency
from measure.core.roofline import name_wall
from measure.core.units import NS

if TYPE_CHECKING:
    from measure.core.guard import Footprint
    from measure.core.roofline import Prediction

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
    rates: str = ""  # the level's predicted and measured tok/s when it hit (the brake's decision says both)


@dataclass(frozen=True)
class WallLoad:
    """measured_wall's load itself: whether the server is remote (its ceilings are not measured here) with the
    streams asked and those decoding, `threads`, the cores the workers' threads were given (0: all), and
    `others`, the cores other work on the machine keeps busy (readings.other_work_cores)."""

    remote: bool = False
    streams_asked: int = 1
    streams_decoding: float = 0.0
    threads: float = 0.0
    others: float = 0.0
    engines: int = 0  # the workers the threads are spread over (0: not known)


def measured_wall(bw_gbps: float | None, beta_gbps: float | None, workers_cpu_percent: float, cores: int,
                  attainable_gbps: float | None = None, predicted_binding: str | None = None,
                  load: WallLoad = WallLoad()) -> str:
    """Which wall the load is against, by the one naming rule (core/roofline.name_wall, docs/design/wall.md)
    applied to the measured figures: the bandwidth product's share of the attainable figure where the probe
    measured one (else of spec), the workers' CPU in cores, `threads` the cores their threads were given
    (0: all), whether the roofline's binding ceiling is compute, and the cores other work holds (the cores wall
    says so: the engines cannot have them)."""
    streams_asked, streams_decoding, threads = load.streams_asked, load.streams_decoding, load.threads
    if load.remote:  # the server's ceilings are not measured here; its queue shows in the streams it decodes
        if streams_asked > 1 and 0 < streams_decoding <= 1.2:
            return name_wall(0.0, queue=f"{streams_decoding:.1f} of {streams_asked} streams decode")[1]
        return "not measured here (the server's machine)"
    ref, ref_name = (attainable_gbps, "attainable") if attainable_gbps else (beta_gbps, "spec")
    bw_share = bw_gbps / ref if bw_gbps is not None and ref else 0.0
    binding, text = name_wall(bw_share, workers_cpu_percent / 100.0, cores, threads, predicted_binding == "compute",
                              ref=ref_name, others=load.others)
    return text + (crowded(threads, load.engines, cores, load.others) if binding == "cores" else "")


class WallWatch:
    def __init__(self, brake: bool):
        self.brake = brake
        self.last_step: Step | None = None
        self._braked: Step | None = None
        self._compare: Step | None = None  # the step up whose pre-step rate tok/s is compared with
        self.reason: str | None = None
        self._until = 0
        self.predicted_tps: float | None = None  # the level's predicted tok/s, past the wall included (ResidencyWatch)

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
        pred = f"predicted {self.predicted_tps:.1f} tok/s, " if self.predicted_tps is not None else ""
        # a step taken before its level decoded a token (a key pressed while the probe ran) has no rate yet
        got = f"measured {agg_tps:.1f} tok/s" if agg_tps > 0 else "nothing measured yet"
        return WallHit(why, first, undo, f"{pred}{got}")


class ResidencyNumbers(TypedDict):
    """The numbers panel's residency fields (snapshot.Numbers)."""

    residency: str | None
    gives_out: str | None
    past_wall: str | None


@dataclass(frozen=True)
class ResidencyView:
    """What the numbers panel shows of residency (docs/residency.md): the gauge, the memory that gives out first
    with its headroom, and where the level is past the wall its predicted tok/s there and why."""

    gauge: str | None = None
    gives_out: str | None = None
    past_tps: float | None = None
    past_note: str | None = None

    def numbers(self) -> ResidencyNumbers:
        return {"residency": self.gauge, "gives_out": self.gives_out, "past_wall": self.past_note}


READ_EVERY_S = 1.0  # smaps of each worker, at most this often near the wall
# far from it (room for the engines to double, nothing swapped or faulted, every weight resident) every 10 s and
# without the smaps walk: a detailed read walks every worker's page tables (smaps) and the model file's (mincore),
# kernel time that was 4.5 % of a core of the dashboard's 7.4 % at K = 2 read every second (docs/residency.md,
# "Residency, measured live")
CALM_READ_S = 10.0


class ResidencyWatch:
    """The workers' residency read live (machine/residency.py) and the level against the memory left: a level whose
    footprint is over what the engines hold plus the headroom is predicted by the residency roofline before its
    measured rate arrives."""

    def __init__(self, model_path: str | None, weights_bytes: int, mmapped: bool, storage: StorageRates | None):
        from measure.machine.residency import ResidencyProbe

        self.probe = ResidencyProbe(model_path, weights_bytes, mincore=mmapped and model_path is not None)
        self.mmapped, self.storage = mmapped, storage
        self._prev: Reading | None = None
        self._tokens = 0.0
        self._last_ns = 0
        self._calm_for: float | None = None  # the footprint of the level judged far from the wall, None: not calm
        self.view = ResidencyView()

    def tick(self, pids: Sequence[int | None], agg_tps: float, now_ns: int, fp: Footprint, per_request: float,
             level: Prediction | None) -> ResidencyView:
        from measure.machine.residency import limits

        every = CALM_READ_S if self._calm_for == fp.total else READ_EVERY_S  # a new level: read now
        if self._last_ns and now_ns - self._last_ns < every * NS:
            return self.view
        self._tokens += agg_tps * (now_ns - self._last_ns) / NS if self._last_ns else 0.0
        self._last_ns = now_ns
        cur = self.probe.read(pids, int(self._tokens), detail=self._calm_for is None)
        prev, self._prev = self._prev, cur
        if not cur.procs:
            return self.view
        held = sum(p.rss for p in cur.procs)
        out = gives_out(limits(cur.procs[0].pid, self.mmapped), held, per_request)
        now = residency(prev, cur) if prev is not None else None
        self.view = ResidencyView(now.gauge() if now else None, out.line(), *self._past(fp, held + out.headroom, level))
        self._calm_for = fp.total if calm(now, out.headroom, held, fp.total) and self.view.past_tps is None else None
        return self.view

    def _past(self, fp: Footprint, room: float, level: Prediction | None) -> tuple[float | None, str | None]:
        if level is None or fp.total <= room or fp.k < 1:
            return None, None
        seqs = max(1, fp.b)
        mem = LevelMemory(fp.weights / fp.k, fp.overhead / fp.k, fp.kv / (fp.k * seqs), self.mmapped)
        fit = level_fit(f"K={fp.k} B={fp.b}", (fp.k, seqs), level.tpot_s, level.bytes_per_s * level.tpot_s, mem, room,
                        self.storage)
        return fit.tps, past_wall_note(fit, level.aggregate_tps)


def calm(now: Residency | None, headroom: int, held: int, footprint: float) -> bool:
    """Far from the wall: room for the engines to hold twice what they hold (and the level's whole footprint),
    every weight resident, nothing swapped out or in, no major faults: ResidencyWatch reads every CALM_READ_S."""
    if now is None or headroom < max(held, footprint):
        return False
    return (now.weights_share >= 0.99 and not now.anon_swapped and not now.swap_in_mbps
            and not (now.majflt_per_token or 0.0))


def residency_watch(source: Any, weights_bytes: int, engine: str) -> ResidencyWatch:
    """The watch of a local source's workers: the file its spec serves (its mapping read where the engine maps it:
    llama.cpp, unless use_mmap is off) and this machine's storage rates where the probe measured them."""
    from measure.machine import storage
    from measure.machine.probes import machine_key

    spec = getattr(source, "spec", None)
    path = getattr(spec, "model_path", None)
    options = getattr(spec, "options", None) or {}
    mmapped = "mlx" not in engine.lower() and bool(options.get("use_mmap", True))
    return ResidencyWatch(path if isinstance(path, str) else None, weights_bytes, mmapped,
                          storage.cached_rates(machine_key()))
