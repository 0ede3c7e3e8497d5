"""`bench --find users|rate|b`: ramp the load (doubling, then bisecting) until the SLO attainment falls below
a target, a rate level's queue grows (it does not keep up, docs/design/find.md), or the memory guard or the
wall stops it; then say the answer in one sentence with the binding ceiling. Every level is bounded in time;
the search ends at the first wall, and where a level could not run the users it names.

The search is a pure function of `run_level` (one measured level → a Level), so it is tested on a synthetic
curve with a known knee; `measure_levels` runs real levels on a load source.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from measure.control.bench.cell import Cell, KneeLevel, as_cell
from measure.core import metrics as M
from measure.core.arrivals import LATE_MS
from measure.core.records import RequestRecord, is_remote
from measure.core.units import NS
from measure.core.workload import ClosedLoop, Poisson
from measure.sources.base import CellStopped

if TYPE_CHECKING:
    from measure.control.bench.sweep import SweepConfig
    from measure.sources.base import LoadSource
    from presets import SLO, Workload

TARGET_ATTAINMENT = 0.90  # the SLO attainment a level needs (--target's default; the report's knee without one)
SERVED_RATIO = 0.95
# queue-inclusive TTFT rising faster than this (s per s of arrivals) = a server completing < 95 % of the rate
QUEUE_TREND = 1 / SERVED_RATIO - 1
CLIENT_LATE_SHARE = 0.2  # a failing level sent later than this share of the SLO's TTFT (p99; ≥ arrivals.LATE_MS)
# is the client's failure, not the server's
LEVEL_S = 10.0  # a rate level offers at least this many seconds of arrivals (and at least cfg.requests)
LEVEL_SERVICES = 5  # … and at least 5 service times (a request's started → done), so a queue has time to show
ENDS = ("refused", "wall", "short", "client")  # a level that stops this way ends the search: nothing after it
# is measured ("client": the load generator could not send the level on schedule, twice: the client's limit)


@dataclass
class Level:
    """One measured level of the search: the users, rate or B it ran at, and its verdict."""

    level: float
    ok: bool
    stop: str | None = None  # refused | wall | short (fewer users ran than named) | client (the load generator fell
    # behind its schedule): the search ends; timeout
    why: str = ""  # what failed, in words ("TTFT p99 1.9 s (queue)")
    cell: Cell | None = None


@dataclass
class Knee:
    what: str  # users | rate | b
    passed: Level | None
    failed: Level | None
    levels: list[Level]

    def sentence(self, slo_name: str, wall: str | None = None) -> str:
        unit = {"users": "concurrent users", "b": "sequences per engine (B)", "rate": "requests/s"}[self.what]

        def fmt(v: float) -> str:
            return f"{v:g}" if self.what == "rate" else f"{int(v)}"

        if self.passed is None:
            head = f"this machine serves no level of this workload within the {slo_name} SLO"
        else:
            head = f"this machine serves {fmt(self.passed.level)} {unit} of this workload within the {slo_name} SLO"
        if self.failed is not None and self.failed.stop == "client":
            head += (f"; {fmt(self.failed.level)} was not measured: {self.failed.why}, so the knee is at or above "
                     f"{fmt(self.passed.level) if self.passed else 'nothing measured'}, not found")
        elif self.failed is not None:
            head += f"; at {fmt(self.failed.level)}, {self.failed.why}"
        return head + (f"; the wall is {wall}" if wall else "")

    def cells(self) -> list[Cell]:
        """bench --find's summary.json: each measured level's cell with its verdict."""
        out = []
        for st in self.levels:
            if st.cell is not None:
                c = st.cell.copy()
                c.knee = replace(c.knee, level=st.level, within_slo=st.ok, verdict=st.why)
                out.append(c)
        return out

    def wall(self, roofline_known: bool) -> str | None:
        """The wall the answer names (docs/design/wall.md): the last level's roofline binding (where a roofline
        was known), or memory capacity / the memory budget where the memory wall or the guard stopped it."""
        wall = None
        last = self.failed or self.passed
        binding = last.cell.prediction.binding if last and last.cell else None
        if binding and roofline_known:
            wall = {"cores": "the CPU cores", "compute": "compute",
                    "bandwidth": "memory bandwidth"}.get(binding, binding)
        if last and last.stop in ("wall", "refused"):
            wall = "memory capacity" if last.stop == "wall" else "the memory budget"
        return wall

    def write(self, out: Path, slo: SLO, target: float, sentence: str) -> list[Cell]:
        """bench --find's outputs in `out`: summary.json (each measured level's cell, `cells`) and knee.json (the
        search, its answer and every level it measured: KneeResult); the cells written are returned."""
        cells = self.cells()
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps([c.to_json() for c in cells], indent=2))
        result = KneeResult(
            self.what, slo.describe(), target, sentence, self.passed.level if self.passed else None,
            self.failed.level if self.failed else None,
            [KneeStep(st.level, st.ok, st.stop, st.why, **_step_figures(st.cell)) for st in self.levels])
        result.write(out / "knee.json")
        return cells


@dataclass(frozen=True)
class KneeStep:
    """knee.json's level: its verdict, and a rate's offered rate and TTFT trend, the users' peak, as its cell has
    them (absent where the cell has none)."""

    level: float
    within: bool
    stop: str | None
    why: str
    offered_rps: float | None = None
    ttft_trend: float | None = None
    peak_users: int | None = None


@dataclass(frozen=True)
class KneeResult:
    """knee.json, `bench --find`'s answer: what it searched, under which SLO and target, its sentence, the knee
    (the last level within; None: none was) and the first level out, and every level it measured. The report
    reads it back beside the run (runs.Run.knee)."""

    find: str  # users | rate | b
    slo: str
    target: float
    sentence: str
    knee: float | None
    first_out: float | None
    steps: list[KneeStep]

    def to_json(self) -> dict[str, object]:
        steps = [{k: v for k, v in vars(st).items() if v is not None or k in ("stop",)} for st in self.steps]
        return {"find": self.find, "slo": self.slo, "target": self.target, "sentence": self.sentence,
                "knee": self.knee, "first_out": self.first_out, "steps": steps}

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2))

    @classmethod
    def read(cls, path: Path) -> KneeResult:
        """knee.json as written; ValueError (one line naming the field) for one `bench --find` did not write."""
        from measure.core.lines import check, of

        d = json.loads(path.read_text())
        if not isinstance(d, dict) or not isinstance(d.get("steps"), list):
            raise ValueError(f"{path}: not a knee.json bench --find wrote")
        check(cls, d, str(path), "knee.json")  # its steps too (each a KneeStep)
        result: KneeResult = of(cls, d)
        return result


def _step_figures(cell: Cell | None) -> dict[str, Any]:
    """knee.json's figures of a level: a rate's offered rate and TTFT trend, the users' peak, as its cell has them."""
    figures = cell.to_json() if cell is not None else {}
    return {f: figures[f] for f in ("offered_rps", "ttft_trend", "peak_users") if f in figures}


def find_knee(run_level: Callable[[float], Level], what: str = "users", start: float = 1, limit: float = 512,
              max_levels: int = 12) -> Knee:
    """Double from `start` until a level fails or stops, then bisect between the last pass and the first
    failure (whole numbers for users and B; to 10 % for a rate)."""
    levels: list[Level] = []
    passed: Level | None = None
    failed: Level | None = None

    def measured(level: float, confirm: bool = True) -> Level:
        """A level; the doubling's first failure is run once more before the search bisects below it: it counts
        as failed only when the second run fails too (one stall on a shared machine put a knee 17× too low); a
        level the load generator could not send on schedule (stop "client") is the client's failure, and twice
        ends the search."""
        st = run_level(level)
        levels.append(st)
        if (st.ok and not st.stop) or (st.stop in ENDS and st.stop != "client") or len(levels) >= max_levels or (
                not confirm and st.stop != "client"):
            return st
        again = run_level(level)
        levels.append(again)
        if again.ok and not again.stop:
            again.why += f" (on a second run; the first was out: {st.why})"
        return again

    level = start
    while level <= limit and len(levels) < max_levels:
        st = measured(level)
        if st.ok and not st.stop:
            passed, level = st, level * 2
            continue
        failed = st
        break
    if failed is None or failed.stop in ENDS:
        return Knee(what, passed, failed, levels)
    lo = passed.level if passed else 0
    hi = failed.level

    def close(a: float, b: float) -> bool:
        return b - a <= 1 if what != "rate" else b - a <= 0.1 * b

    while not close(lo, hi) and len(levels) < max_levels:
        mid = (lo + hi) // 2 if what != "rate" else (lo + hi) / 2
        if mid <= 0:
            break
        st = measured(mid, confirm=False)
        if st.ok and not st.stop:
            passed, lo = st, mid
        else:
            failed, hi = st, mid
            if st.stop in ENDS:  # a paused fleet or a refusal: what follows would measure nothing
                break
    return Knee(what, passed, failed, levels)


def judge(cell: Cell | Mapping[str, Any], slo: SLO | None, what: str, level: float,
          target: float = TARGET_ATTAINMENT) -> Level:
    """Whether a measured level meets the SLO target (and, for a rate, keeps up with it)."""
    cell = as_cell(cell)
    att, kl = cell.goodput.attainment, cell.knee
    if not cell.ok or att is None:
        return Level(level, False, cell.status if not cell.ok else None, cell.reason or "no request finished", cell)
    if what == "rate" and (trend := kl.ttft_trend) is not None and trend > QUEUE_TREND:
        offered = kl.offered_rps or level
        assert kl.arrivals_s is not None  # set beside ttft_trend (rate_figures)
        return Level(level, False, None, f"its queue grows: TTFT rises {trend * kl.arrivals_s:.2f} s over its "
                    f"{kl.arrivals_s:.0f} s of arrivals (it serves ≈ {offered / (1 + trend):.3g} of the "
                    f"{offered:.3g} req/s offered)", cell)
    if att >= target:
        return Level(level, True, None, f"{att:.0%} of requests within the SLO", cell)
    assert slo is not None  # a cell has an SLO attainment only where an SLO was given
    return Level(level, False, None, _why(cell, slo, att), cell)


def _why(cell: Cell, slo: SLO, att: float) -> str:
    parts, r = [], cell.requests
    if slo.ttft_s is not None and (r.ttft.p99 or 0) > slo.ttft_s * 1e3:
        assert r.ttft.p99 is not None  # over a bound of ≥ 0 s
        queue = r.queue_wait.p50 or 0
        cause = "queue" if queue > 0.5 * (r.ttft.p50 or 0) else "prefill"
        parts.append(f"TTFT p99 is {M.p99_mark(r.completed)}{r.ttft.p99 / 1e3:.2f} s ({cause})")
    if slo.tpot_s is not None and (r.tpot.p50 or 0) > slo.tpot_s * 1e3:
        parts.append(f"TPOT p50 is {r.tpot.p50:.0f} ms (each decode step)")
    return (" and ".join(parts) or f"only {att:.0%} of requests meet the SLO") + f" ({att:.0%} within it)"


class ExactPoisson(Poisson):
    """Poisson arrivals conditioned on their count: n arrivals whose n − 1 exponential gaps are scaled to sum
    to (n − 1) ÷ λ, so the level offers exactly the rate it is named for (the arrival times of a Poisson
    process given its count are uniform over its span: bursts and lulls as before). A plain draw of 20
    arrivals can realise 0.84 of λ, and a level would then be judged at a rate it never offered."""

    def __init__(self, rate: float, total: int, seed: int = 0):
        super().__init__(rate, total, seed)
        gaps = [self._rng.expovariate(rate) for _ in range(max(0, total - 1))]
        scale = (total - 1) / rate / sum(gaps) if gaps else 1.0
        self._gaps = iter([round(g * scale * NS) for g in gaps])

    def _gap_ns(self) -> int:
        return next(self._gaps, 0)  # the gap after the last arrival is never waited for


def _p50(values: Sequence[float]) -> float:
    """The median of values that are there (each caller's list is non-empty)."""
    p = M.percentile(values, 50)
    assert p is not None
    return p


def rate_figures(records: list[RequestRecord]) -> dict[str, Any]:
    """A rate level's arrivals and queue (docs/design/find.md): offered_rps = (n − 1) ÷ (first → last scheduled);
    ttft_trend = how fast queue-inclusive TTFT rises with arrival time (s per s), between the medians of the
    earlier and the later half of the requests by scheduled time (robust to a few slow requests). With
    the queue growing, TTFT rises by ρ − 1 seconds a second (ρ = offered ÷ served; requests queued in arrival
    order, however many are served at once); it ignores the last request's own latency, which the old span
    rule counted."""
    sched = sorted(r.t_scheduled_ns for r in records)
    out: dict[str, Any] = {"offered_rps": None, "arrivals_s": 0.0, "ttft_trend": None}
    if len(sched) >= 2 and sched[-1] > sched[0]:
        out["arrivals_s"] = (sched[-1] - sched[0]) / NS
        out["offered_rps"] = (len(sched) - 1) / out["arrivals_s"]
    good = sorted(M.ok(records), key=lambda r: r.t_scheduled_ns)
    h = len(good) // 2
    if h >= 2:
        early, late = good[:h], good[-h:]
        dt = (_p50([r.t_scheduled_ns for r in late]) - _p50([r.t_scheduled_ns for r in early])) / NS
        if dt > 0:
            out["ttft_trend"] = (_p50([M.ttft(r) for r in late]) - _p50([M.ttft(r) for r in early])) / dt
    return out


def peak_in_flight(records: list[RequestRecord], since: str = "t_scheduled_ns") -> int:
    """The most requests in flight at once, scheduled → done: a closed loop's users that were really there
    (since="t_started_ns": started → done, the streams or slots in use)."""
    done = [r for r in records if r.t_done_ns is not None and getattr(r, since) is not None]
    ev = sorted([(getattr(r, since), 1) for r in done] + [(r.t_done_ns, -1) for r in done])
    now = peak = 0
    for _, d in ev:
        now += d
        peak = max(peak, now)
    return peak


def measure_levels(source: LoadSource, workload: Workload, what: str, cfg: SweepConfig, say: Callable[[str], None],
                   k: int = 1, target: float = TARGET_ATTAINMENT) -> Callable[[float], Level]:
    """run_level over a load source: users → one engine batching min(U, max-b) sequences for U closed-loop
    users (over HTTP one stream per user: the server batches them itself); b → B sequences for B users;
    rate → open-loop Poisson arrivals on the engine as configured, for LEVEL_S seconds or LEVEL_SERVICES
    service times (the shortest median started → done of the levels so far), whichever is longer, within
    half the cell timeout. A closed-loop
    level whose records never held as many users in flight as it names ends the search (stop "short"). Each
    level runs as a sweep's cell does (sweep.CellRunner): the same figures, and a worker OOM-killed at one
    level refuses that level and every larger one of its mode after it (the search ends there)."""
    from measure.control.bench.sweep import CellRunner

    runner = CellRunner(source, cfg, say)
    service_s: list[float] = []  # each level's median started → done

    def run(level: float) -> Level:
        mode, b, users, arrivals = _plan(what, level, cfg, k, service_s)
        if refusal := runner.oom_refusal(mode, k, b) or runner.budget_refusal(mode, k, b, cfg.ctx):
            say(f"{what} {level:g}: {refusal}")
            return Level(level, False, "refused", f"the memory guard refuses it: {refusal.split(';')[0]}")
        # exactly these users (a source may otherwise follow its streams × endpoints)
        runner.start(mode, k, b, cfg.ctx, users)
        say(f"{what} {level:g}: {arrivals.total} requests, {arrivals.describe()}, {mode} K={k} B={b} …")
        t0 = time.monotonic()
        try:
            recs = runner.load(workload, arrivals)
        except CellStopped as stop:
            return Level(level, False, "wall", f"the memory wall: {stop}")
        except TimeoutError as exc:
            return Level(level, False, "timeout", str(exc))
        cell = runner.finish(recs, workload, mode, k, b)
        runner.learn(cell, mode, k, b, cfg.ctx)
        span = M.run_span_ns(recs)
        cell.knee = KneeLevel(level, users, (span[1] - span[0]) / 1e9 if span else 0.0,
                              **(rate_figures(recs) if what == "rate" else {"peak_users": peak_in_flight(recs)}))
        if what == "rate":
            served = [(r.t_done_ns - r.t_started_ns) / NS for r in M.ok(recs) if r.t_started_ns and r.t_done_ns]
            if served:
                service_s.append(_p50(served))
        elif (peak := cell.knee.peak_users or 0) < (users or 0):
            say(f"  only {peak} of {users} users were in flight at once: the search stops")
            return Level(level, False, "short", f"only {peak} of the {users} users asked were in "
                         f"flight at once ({mode} K={k} B={b}): this source did not run them, so the search "
                         "stops here", cell)
        st = _verdict(cell, recs, what, level, cfg, target, b)
        trend, r = cell.knee.ttft_trend, cell.requests
        say(f"  {time.monotonic() - t0:.0f} s: attainment {cell.goodput.attainment or 0:.0%}, TTFT p99 "
            f"{(r.ttft.p99 or 0):.0f} ms, TPOT p50 {(r.tpot.p50 or 0):.0f} ms"
            + (f", TTFT trend {trend:+.3f} s/s" if trend is not None else "") + " → "
            + ("within" if st.ok else "out"))
        return st

    return run


def _plan(what: str, level: float, cfg: SweepConfig, k: int, service_s: list[float]
          ) -> tuple[str, int, int | None, ExactPoisson | ClosedLoop]:
    """A level's mode, B, closed-loop users (None: a rate) and arrivals."""
    if what == "rate":
        secs = min(max(LEVEL_S, LEVEL_SERVICES * min(service_s, default=0.0)), cfg.cell_timeout_s / 2)
        return cfg.mode, max(cfg.bs), None, ExactPoisson(level, total=max(cfg.requests, int(level * secs)))
    users = int(level)
    if is_remote(cfg.mode):  # a user is a stream; --max-b caps a local engine's batch, not a server's
        b, mode = -(-users // k), cfg.mode
    else:
        b = users if what == "b" else min(users, cfg.max_b)
        mode = "batch" if b > 1 or cfg.mode == "batch" else "instances"
    return mode, b, users, ClosedLoop(users, total=max(cfg.requests, 2 * users))


def _verdict(cell: Cell, recs: list[RequestRecord], what: str, level: float, cfg: SweepConfig, target: float,
             b: int) -> Level:
    """The level judged (judge); a failing level the load generator sent late is the client's failure; a rate
    level over HTTP whose client streams were all busy says so."""
    st = judge(cell, cfg.slo, what, level, target)
    late_bound = max(LATE_MS, CLIENT_LATE_SHARE * cfg.slo.ttft_s * 1e3 if cfg.slo and cfg.slo.ttft_s else 0.0)
    late = cell.load.lateness.p99
    if not st.ok and not st.stop and (late or 0.0) > late_bound:
        # the load generator itself fell behind: the level was not offered as named, so its verdict is the
        # client's, not the server's (find_knee runs it again, and ends the search if it falls behind twice)
        st = Level(level, False, "client", f"the load generator fell behind its schedule (requests sent late p99 "
                   f"{M.p99_mark(cell.requests.completed)}{late or 0:.0f} ms): this client could not "
                   "offer the level", cell)
    if what == "rate" and is_remote(cell.mode or "") and not st.ok and peak_in_flight(recs, "t_started_ns") >= b:
        st.why += (f"; all {b} of this client's streams were busy (--b {b}), so the queue may be the client's, "
                   "not the server's: give a larger --b")
    return st
