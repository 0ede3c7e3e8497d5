"""The live step table: each K/B level the user visits is a row, its figures counted once it has settled.

Settled, the stated rule: the level has run at least `SETTLE_AFTER_S` (one window: the 5 s tok/s window then
holds only this level's tokens) with every worker ready, at least `SETTLE_REQUESTS` of its own requests have
finished, and the last `SETTLE_SAMPLES` readings of aggregate tok/s (2 Hz) vary by less than `SETTLE_CV`
(stdev ÷ mean) with no trend: the means of their later and earlier halves differ by less than `SETTLE_TREND`
of their mean (a steady +50 % ramp over 15 s has CV 0.04 over 10 readings, but its halves differ by 6 %).
Until then the row says what it waits for; a level left before it settled keeps its row, marked so. A row's
tok/s and achieved concurrency are the means of its settled readings; TPOT and TTFT come from the level's own
requests.

Goodput is counted over the settled window only (from the first settled reading on): of the level's requests
that finished in it, the share of output tokens that met the SLO, times the row's settled tok/s (req/s: the
met requests per output token, times the same tok/s). Counting finished requests from the level's start read
low by about one request's duration ÷ the level's age (a request begun at the step ends only a duration
later: 256-token answers read 35 % of the true rate 10 s in, 68 % at 20 s), and the ★ followed that bias.
Before the first settled reading the share is over every request of the level so far.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from measure.control.live.stats import KEEP, Counts, LevelFigures
from measure.core import metrics as M
from measure.core.cost import Cost
from measure.core.lines import StepRow as StepRow  # its home; control code imports it from here
from measure.core.units import NS
from presets import SLO

LEFT_UNSETTLED = "left before it settled"  # the progress of a level's row kept though it never settled
SETTLE_AFTER_S = 5.0
SETTLE_REQUESTS = 8
SETTLE_SAMPLES = 10
SETTLE_CV = 0.10
SETTLE_TREND = 0.05


def settled_goodput(tps: float, counts: Counts, base: Counts | None) -> M.Goodput | None:
    """Goodput over the settled window: `counts` (finished, met, tokens, met tokens) now, less `base` (the
    counts at the first settled reading) where a request finished since; `tps` the row's settled tok/s.
    None before a request finished."""
    if base is not None and counts.finished > base.finished:
        counts = counts.since(base)
    finished, met, tokens, met_tokens = counts
    if not finished:
        return None
    per_token = tps / tokens if tokens else 0.0
    return M.Goodput(met * per_token, met_tokens * per_token, met / finished, met, finished)


def _trend(xs: list[float]) -> float:
    """(mean of the later half − mean of the earlier half) ÷ the mean: a ramp the CV alone lets through."""
    h = len(xs) // 2
    m = statistics.fmean(xs)
    return (statistics.fmean(xs[-h:]) - statistics.fmean(xs[:h])) / m if h and m else 0.0


@dataclass(frozen=True)
class StepLevel:
    """The K/B level a reading belongs to: its label, mode, K, B and when it began."""

    label: str
    mode: str
    k: int
    b: int
    start_ns: int


@dataclass(frozen=True)
class StepReading:
    """One tick's figures for the step table: the aggregate tok/s and achieved concurrency of the window, the
    level's request figures (stats.LevelFigures), and what the row shows beside them."""

    now_ns: int
    steady: bool  # every worker ready and the load running (the controller's state "steady")
    figures: LevelFigures
    agg_tps: float
    concurrency: float
    mem_used: int | None = None
    bw_gbps: float | None = None
    predicted_tps: float | None = None
    wall: str = ""
    watts: float | None = None
    thermal: str | None = None
    predicted_range: tuple[float, float] | None = None  # a chip nobody measured: (slowest, fastest) tok/s


class StepTable:
    def __init__(self, slo: SLO | None = None, cost: Cost | None = None):
        self.slo = slo
        self.cost = cost
        self.rows: list[StepRow] = []  # levels left behind, settled or not
        self._label: str | None = None
        self._samples: list[tuple[float, float]] = []  # (tok/s, concurrency) once the level may settle
        self.current: StepRow | None = None
        self._figures_key: tuple[str, int, int, tuple[int, int, int] | None] | None = None
        self._figures: tuple[int, float | None, float | None, float | None] = (0, None, None, None)
        # (id of the level's figures, their counts at its first settled reading)
        self._base: tuple[int, Counts] | None = None
        self._settled: StepRow | None = None  # the current level's row as it last stood settled
        self._heat: tuple[str, int] | None = None  # the thermal state and when it last changed (docs/design/unified-memory.md)
        # the level's figures when the thermal state last changed (their id, good requests, TPOTs): the row's TPOT,
        # per-user tok/s and TTFT count only the requests that ended since, the new machine's
        self._heat_from: tuple[int, int, int] | None = None

    def tick(self, level: StepLevel, r: StepReading) -> StepRow:
        """The current level's row after this reading (and the row of a level left behind, settled, kept)."""
        self._track_heat(r.thermal, r.now_ns, r.figures)
        if level.label != self._label:
            # the level left behind keeps its row: as it last stood settled, else as it last stood, unsettled
            left = self._settled or self._unsettled()
            if left is not None:
                self.rows.append(left)
            self._label, self._samples, self._base = level.label, [], None
            self._settled = self._heat_from = None
        if not r.steady and self._settled is not None:
            # a step is pending (new workers load and warm up; the level goes on until they are ready): the
            # row stays as it last stood settled, not re-marked unsettled by the warmup's ticks
            self.current = self._settled
            return self.current
        del self._samples[:-SETTLE_SAMPLES]  # only the last readings count
        age = (r.now_ns - level.start_ns) / NS
        figures = r.figures
        if self._base is not None and self._base[0] != id(figures):  # statistics reset: a new window
            self._base = None
        if r.steady and age >= SETTLE_AFTER_S:
            self._samples.append((r.agg_tps, r.concurrency))
            if self._base is None:
                self._base = (id(figures), figures.counts())
        recent = self._samples[-SETTLE_SAMPLES:]
        tps = [s[0] for s in recent]
        n_good, p50, ttft50, ttft99 = self._request_figures(level.label, figures)
        waits = self._waits(level, r, age, n_good, tps)
        settled = not waits
        agg = statistics.fmean(tps) if tps else r.agg_tps
        g = settled_goodput(agg, figures.counts(), self._base[1] if self._base else None) if self.slo else None
        usd = self.cost.usd_per_mtok(agg, r.watts) if self.cost and agg else None
        cur = self.current
        if not r.steady and cur is not None and cur.level == level.label:
            # a step is pending and this level has not settled: the controller already predicts the level asked
            # for, so the row keeps its own level's prediction (an unsettled row left behind showed the next one's)
            pred = (cur.predicted_tps, cur.predicted_low, cur.predicted_high)
        else:
            low, high = r.predicted_range or (None, None)
            pred = (r.predicted_tps, low, high)
        self.current = StepRow(
            level.label, level.mode, level.k, level.b, settled,
            "settled" if settled else "settling: " + ", ".join(waits),
            statistics.fmean(s[1] for s in recent) if recent else r.concurrency, agg,
            1 / p50 if p50 else None, p50, ttft50, ttft99, n_good,
            g.rps if g else None, g.tps if g else None, g.attainment if g else None, r.mem_used, r.bw_gbps,
            pred[0], r.wall, r.watts, usd, predicted_low=pred[1], predicted_high=pred[2])
        if settled:
            self._settled = self.current
        return self.current

    def _unsettled(self) -> StepRow | None:
        """The row of a level left before it settled (a step taken sooner, or on a machine too noisy to settle
        it), as it last stood: kept, marked, never the best."""
        cur = self.current
        if cur is None or cur.level != self._label:
            return None
        return replace(cur, progress=f"{LEFT_UNSETTLED}: " + cur.progress.removeprefix("settling: "))

    def _track_heat(self, thermal: str | None, now_ns: int, figures: LevelFigures) -> None:
        """A change of the thermal state: the readings and the requests before it are another machine's; the level
        settles again on those after it."""
        heat = thermal.split(" (")[0] if thermal and not thermal.startswith("unknown") else None
        if heat and self._heat and heat != self._heat[0]:  # hotter or cooler: the readings before are another
            self._samples, self._base, self._settled = [], None, None  # machine's; the level settles again
            self._heat_from = (id(figures), figures.good, figures.tpot_added)
        if heat and (not self._heat or heat != self._heat[0]):
            self._heat = (heat, now_ns if self._heat else 0)  # the first reading is not a change

    def _request_figures(self, label: str, figures: LevelFigures) -> tuple[int, float | None, float | None,
                                                                           float | None]:
        """(good requests, TPOT p50, TTFT p50, TTFT p99) of the level. They only change when a request ended:
        recomputed then, not every tick (`figures`: stats.LevelFigures, each request's computed once as it ended)."""
        key = (label, figures.version, id(figures), self._heat_from)
        if key != self._figures_key:
            good, n_ttft, n_tpot = figures.good, KEEP, KEEP
            if self._heat_from is not None and self._heat_from[0] == id(figures):  # since the thermal change only
                good = figures.good - self._heat_from[1]
                n_ttft, n_tpot = min(good, KEEP), min(figures.tpot_added - self._heat_from[2], KEEP)
            ttfts = figures.ttft[-n_ttft:] if n_ttft else []
            self._figures = (good, M.percentile(figures.tpot[-n_tpot:] if n_tpot else [], 50),
                             M.percentile(ttfts, 50), M.percentile(ttfts, 99))
            self._figures_key = key
        return self._figures

    def _waits(self, level: StepLevel, r: StepReading, age: float, n_good: int, tps: list[float]) -> list[str]:
        """What the level still waits for before it settles (none: settled), by the rule in this module's doc."""
        waits = []
        if age < SETTLE_AFTER_S or not r.steady:
            waits.append(f"{max(0.0, SETTLE_AFTER_S - age):.0f} s of warmup")
        if (self._heat and self._heat[1] > level.start_ns
                and (since := (r.now_ns - self._heat[1]) / NS) < SETTLE_AFTER_S):
            waits.append(f"thermal state now {self._heat[0]} ({since:.0f} s ago)")
        if n_good < SETTLE_REQUESTS:
            waits.append(f"{n_good}/{SETTLE_REQUESTS} requests")
        cv = M.cv(tps) if len(tps) >= 2 else None
        if len(tps) < SETTLE_SAMPLES:
            waits.append(f"{len(tps)}/{SETTLE_SAMPLES} readings")
        elif cv is None:
            waits.append("tokens flowing")
        elif cv >= SETTLE_CV:
            waits.append(f"tok/s CV {cv:.2f} ≥ {SETTLE_CV:.2f}")
        elif abs(trend := _trend(tps)) >= SETTLE_TREND:
            waits.append(f"tok/s {'rising' if trend > 0 else 'falling'} {abs(trend):.0%} over the last "
                         f"{len(tps)} readings")
        return waits

    def table(self) -> list[StepRow]:
        """The settled rows and the current level's, the best marked: the most goodput where an SLO is set,
        else the most aggregate tok/s."""
        rows = list(self.rows) + ([self.current] if self.current else [])
        settled = [r for r in rows if r.settled]
        if settled:
            key = (lambda r: r.goodput_tps or 0.0) if self.slo else (lambda r: r.agg_tps or 0.0)
            best = max(settled, key=key)
            rows = [replace(r, best=r is best) for r in rows]
        return rows
