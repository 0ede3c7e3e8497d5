"""`inference-top compare A B`: is B slower than A, beyond this machine's noise? (docs/design.md §27)

Two configurations are measured in turns under one load, in rounds of four runs (A B B A, then B A A B, …),
until the relative difference in the figure asked (tok/s, goodput, TPOT p50, TTFT p99) is resolved at 95 %
confidence or the budget ends. Each round is one paired observation, d = ln(mean of B's two runs ÷ mean of
A's two): the ABBA order cancels a machine whose speed drifts linearly within the round, and alternating it
cancels a first-run-of-the-round effect. The rounds' d are treated as independent draws; their mean, with a
Student-t interval, is the log of B ÷ A. The interval is looked at after the third round and then each time
the rounds have grown by a quarter; the j-th look is taken at confidence 1 − 0.05 × 6 ÷ (π² j²): the looks'
error rates add up to 5 % (Σ 1/j² = π²/6), so the intervals looked at hold at 95 % together and stopping at the
first that excludes 0 keeps 95 % (a Bonferroni confidence sequence: conservative, and honest under peeking).

The verdict is one of: a difference (the interval excludes 0: "B is 7 % ± 2 % slower than A"), no difference
above the precision asked (the interval lies within ± --precision), or, where the budget ended first, no
difference above the interval's far end ("this machine's noise"); each says the smallest difference the rounds
could detect (the interval's half-width). Two bench outputs on disk compare from their records: their reps are
not interleaved, so the interval is Welch's on the reps' logs, one look at 95 %, and it says so.

The statistics are a pure function of the per-run figures (`Sequential`, `welch`), tested with simulated figures
drawn from the null engine's measured run-to-run noise; `run_live` drives two load sources.
"""
from __future__ import annotations

import functools
import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from engines.null import NULL
from measure.core import metrics as M

if TYPE_CHECKING:
    from measure.core.lines import RunHeader
    from measure.core.records import RequestRecord
    from presets import SLO

ALPHA = 0.05
MIN_ROUNDS = 3  # rounds (of four runs) before the first look: two degrees of freedom at least
LOOK_STEP = 1.25  # each look a quarter more rounds than the one before


class CompareError(ValueError):
    """A bad input for compare (one line: what was wrong, what to do)."""


@dataclass(frozen=True)
class Metric:
    name: str  # as printed
    field: str  # summary.json's / a tune trial's name
    higher_is_better: bool
    unit: str


METRICS = {
    "tok/s": Metric("tok/s", "output_throughput", True, "tok/s"),
    "goodput": Metric("goodput", "goodput_tps", True, "tok/s"),
    "tpot": Metric("TPOT p50", "median_tpot_ms", False, "ms"),
    "ttft-p99": Metric("TTFT p99", "p99_ttft_ms", False, "ms"),
}
ALIASES = {"tps": "tok/s", "throughput": "tok/s", "output_throughput": "tok/s", "goodput_tps": "goodput",
           "tpot-p50": "tpot", "tpot_p50": "tpot", "median_tpot_ms": "tpot", "ttft": "ttft-p99",
           "ttft_p99": "ttft-p99", "p99_ttft_ms": "ttft-p99"}


def metric(text: str) -> Metric:
    key = ALIASES.get(text.strip().lower(), text.strip().lower())
    if key not in METRICS:
        raise CompareError(f"--metric {text!r}: give one of {', '.join(METRICS)}")
    return METRICS[key]


def parse_share(text: str, what: str) -> float:
    """--precision 2% / 0.02 → 0.02."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise CompareError(f"{what} {text!r}: give a share such as 2% or 0.02") from None
    if not 0 < v < 1:
        raise CompareError(f"{what} {text!r}: give a share between 0 and 100 %, such as 2%")
    return v


# ---- Student's t, without scipy ---------------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (Numerical Recipes' betacf, Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _ibeta(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_sf2(t: float, df: float) -> float:
    """P(|T| > t) for Student's t with df degrees of freedom."""
    return _ibeta(df / 2.0, 0.5, df / (df + t * t))


@functools.lru_cache(maxsize=4096)
def t_quantile(two_sided_alpha: float, df: float) -> float:
    """The t with P(|T| > t) = two_sided_alpha (bisection on t_sf2)."""
    lo, hi = 0.0, 1.0
    while t_sf2(hi, df) > two_sided_alpha:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_sf2(mid, df) > two_sided_alpha:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


# ---- the interval -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """B ÷ A − 1 (a relative difference, + where B's figure is higher) with its interval at `confidence`."""

    rel: float
    lo: float
    hi: float
    confidence: float
    rounds: int  # paired rounds (live) or runs a side (Welch)

    @property
    def half(self) -> float:
        """The interval's half-width: the smallest difference these runs could tell from none."""
        return (self.hi - self.lo) / 2.0

    @property
    def excludes_zero(self) -> bool:
        return self.lo > 0.0 or self.hi < 0.0

    @property
    def far(self) -> float:
        """The largest difference the interval leaves possible, either way."""
        return max(abs(self.lo), abs(self.hi))


def look_alpha(look: int, alpha: float = ALPHA) -> float:
    """The error rate of the look-th look (1-based): α · 6 ÷ (π² look²), summing to α over every look."""
    return alpha * 6.0 / (math.pi ** 2 * look * look)


def paired(ds: Sequence[float], alpha: float) -> Interval:
    """The interval of exp(mean d) − 1 over the rounds' log ratios d, Student t at 1 − alpha."""
    m = len(ds)
    if m < 2:
        raise CompareError("an interval needs two rounds at least")
    mean = statistics.fmean(ds)
    se = statistics.stdev(ds) / math.sqrt(m)
    h = t_quantile(alpha, m - 1) * se
    return Interval(math.expm1(mean), math.expm1(mean - h), math.expm1(mean + h), 1 - alpha, m)


def welch(a: Sequence[float], b: Sequence[float], alpha: float = ALPHA) -> Interval:
    """Two sets of runs not measured in turns: Welch's interval on the difference of the runs' mean logs."""
    if len(a) < 2 or len(b) < 2:
        raise CompareError("an interval needs two runs a side at least (bench --reps 5)")
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    d = statistics.fmean(lb) - statistics.fmean(la)
    se = math.sqrt(va + vb)
    if se == 0:
        return Interval(math.expm1(d), math.expm1(d), math.expm1(d), 1 - alpha, min(len(a), len(b)))
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1)) if va and vb else len(a) + len(b) - 2
    h = t_quantile(alpha, df) * se
    return Interval(math.expm1(d), math.expm1(d - h), math.expm1(d + h), 1 - alpha, min(len(a), len(b)))


def order(round_index: int) -> str:
    """The runs of round i (0-based): ABBA, then BAAB, alternately."""
    return "ABBA" if round_index % 2 == 0 else "BAAB"


@dataclass
class Sequential:
    """The rounds so far and what they say: `add` a round's four figures (in its order's runs), then `look`."""

    precision: float | None = None  # stop once the interval lies within ± this (no difference above it)
    min_rounds: int = MIN_ROUNDS
    alpha: float = ALPHA
    rounds: list[tuple[list[float], list[float]]] = field(default_factory=list)  # (A's two, B's two)

    def add(self, a: Sequence[float], b: Sequence[float]) -> None:
        if min(list(a) + list(b)) <= 0:
            raise CompareError("a run's figure is 0: no ratio to compare (goodput 0: no request met the SLO; "
                               "compare tok/s, or loosen --slo)")
        self.rounds.append((list(a), list(b)))

    @property
    def ds(self) -> list[float]:
        return [math.log(statistics.fmean(b) / statistics.fmean(a)) for a, b in self.rounds]

    def looks(self, upto: int) -> list[int]:
        """The rounds the interval is looked at, up to `upto`: min_rounds, then each a quarter more rounds than
        the last (3, 4, 5, 7, 9, 12, 15, 19, 24, …): the looks' count grows as the log of the rounds, so a late
        look's confidence costs little."""
        out, m = [], max(2, self.min_rounds)
        while m <= upto:
            out.append(m)
            m = max(m + 1, math.ceil(m * LOOK_STEP))
        return out

    def is_look(self) -> bool:
        return len(self.rounds) in self.looks(len(self.rounds))

    def interval(self) -> Interval | None:
        """The interval now (None before min_rounds), at the confidence of this look: between two looks, at the
        next look's (a verdict the budget forces there takes that look's place)."""
        m = len(self.rounds)
        if m < max(2, self.min_rounds):
            return None
        done = self.looks(m)
        j = len(done) if done and done[-1] == m else len(done) + 1
        return paired(self.ds, look_alpha(j, self.alpha))

    def resolved(self, last: bool = False) -> str | None:
        """At a look (or the `last` round, which takes the next look's place): 'difference' (the interval
        excludes 0), 'none' (it lies within ± precision), or None: go on."""
        iv = self.interval()
        if iv is None or not (last or self.is_look()):
            return None
        if iv.excludes_zero:
            return "difference"
        if self.precision is not None and iv.far <= self.precision:
            return "none"
        return None


# ---- the verdict, in words ----------------------------------------------------------------------------------
def verdict(iv: Interval, m: Metric, means: tuple[float, float], precision: float | None = None,
            names: tuple[str, str] = ("A", "B")) -> str:
    """One sentence: the difference with its interval, or no difference above what the runs could tell."""
    a, b = names
    conf = (f"{iv.confidence:.2%} at this look, 95 % over every look" if iv.confidence > 1 - ALPHA + 1e-9
            else f"{iv.confidence:.0%} confidence")
    span = f"interval {iv.lo:+.1%} … {iv.hi:+.1%} of {a}'s {m.name}, {conf}"
    figs = f"{a} {means[0]:.4g}, {b} {means[1]:.4g} {m.unit}"
    if iv.excludes_zero:
        worse = (iv.rel < 0) == m.higher_is_better
        how = "slower" if worse else "faster"
        return (f"{b} is {abs(iv.rel):.1%} ± {iv.half:.1%} {how} than {a} in {m.name} "
                f"({figs}; {span}; smallest detectable difference ±{iv.half:.1%})")
    bound = precision if precision is not None and iv.far <= precision else iv.far
    return (f"no difference above {bound:.1%} in {m.name}, this machine's noise ({figs}; {b} vs {a} "
            f"{iv.rel:+.1%}, {span}; smallest detectable difference ±{iv.half:.1%})")


class _Run(TypedDict):
    side: str  # A | B
    value: float


class RoundRun(_Run, total=False):
    """One run of a compare: its side and its figure; measured in turns, its round (1-based) and how long it
    took."""

    round: int
    seconds: float


class OutcomeLine(TypedDict):
    """compare.json's verdict part (Outcome.to_dict)."""

    sentence: str
    state: str
    interval: dict[str, float] | None  # Interval's fields
    means: list[float]
    runs: list[RoundRun]
    notes: list[str]


@dataclass
class Outcome:
    """What a compare found: the verdict, its interval, and every run (side, round, figure, seconds)."""

    sentence: str
    state: str  # difference | none | budget (no difference above the interval's far end) | welch
    interval: Interval | None
    means: tuple[float, float]
    runs: list[RoundRun]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> OutcomeLine:
        return {"sentence": self.sentence, "state": self.state,
                "interval": asdict(self.interval) if self.interval else None, "means": list(self.means),
                "runs": self.runs, "notes": self.notes}


# ---- the live procedure ---------------------------------------------------------------------------------------
RunOne = Callable[[str, int], float]  # (side "A" | "B", run index of that side) → the run's figure


def run_rounds(run_one: RunOne, m: Metric, budget_s: float, seq: Sequential,
               say: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
               max_rounds: int | None = None) -> Outcome:
    """Rounds of ABBA / BAAB until `seq` resolves, the budget cannot hold another round (its rounds so far
    timed), or max_rounds; a progress line after each round with the interval as it narrows. At least
    seq.min_rounds rounds run whatever the budget (an interval needs them)."""
    t0, count = clock(), {"A": 0, "B": 0}
    runs: list[RoundRun] = []
    state = "budget"
    while True:
        i = len(seq.rounds)
        got: dict[str, list[float]] = {"A": [], "B": []}
        for side in order(i):
            t1 = clock()
            v = run_one(side, count[side])
            count[side] += 1
            got[side].append(v)
            runs.append({"side": side, "round": i + 1, "value": v, "seconds": round(clock() - t1, 3)})
        seq.add(got["A"], got["B"])
        took = clock() - t0
        iv = seq.interval()
        say(_progress(i + 1, got, iv, m, took, budget_s, seq.min_rounds))
        if (res := seq.resolved()) is not None:
            state = res
            break
        each = took / len(seq.rounds)
        if len(seq.rounds) == 1 and each * seq.min_rounds > budget_s:
            say(f"the budget holds ≈ {budget_s / each:.1f} rounds of ≈ {each:.0f} s; the interval needs "
                f"{seq.min_rounds}: they run anyway (≈ {each * seq.min_rounds:.0f} s)")
        if len(seq.rounds) >= seq.min_rounds and (took + each > budget_s or
                                                  (max_rounds is not None and len(seq.rounds) >= max_rounds)):
            state = seq.resolved(last=True) or "budget"
            break
    return _outcome(seq, m, state, runs)


def _progress(j: int, got: dict[str, list[float]], iv: Interval | None, m: Metric, took: float, budget: float,
              min_rounds: int) -> str:
    a = " ".join(f"{x:.4g}" for x in got["A"])
    b = " ".join(f"{x:.4g}" for x in got["B"])
    head = f"round {j} ({order(j - 1)}): A {a}, B {b} {m.unit}"
    tail = f" · {took:.0f} of {budget:.0f} s"
    if iv is None:
        return head + f" · the interval from round {min_rounds}" + tail
    return (head + f" · B vs A {iv.rel:+.1%}, interval {iv.lo:+.1%} … {iv.hi:+.1%} (±{iv.half:.1%}, "
            f"{iv.confidence:.2%})" + tail)


def _outcome(seq: Sequential, m: Metric, state: str, runs: list[RoundRun]) -> Outcome:
    iv = seq.interval()
    a = statistics.fmean(x for r in seq.rounds for x in r[0])
    b = statistics.fmean(x for r in seq.rounds for x in r[1])
    if iv is None:  # fewer rounds than an interval needs (max_rounds below min_rounds)
        return Outcome(f"unresolved: {len(seq.rounds)} round(s), an interval needs {seq.min_rounds}", "budget",
                       None, (a, b), runs)
    notes = [f"run-to-run CV: A {_cv([x for r in seq.rounds for x in r[0]]):.1%}, "
             f"B {_cv([x for r in seq.rounds for x in r[1]]):.1%} of its mean"]
    if state == "budget":
        notes.append("the budget ended before the interval resolved (a longer --budget narrows it)")
    return Outcome(verdict(iv, m, (a, b), seq.precision), state, iv, (a, b), runs, notes)


def _cv(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) / statistics.fmean(xs) if len(xs) > 1 and statistics.fmean(xs) else 0.0


# ---- one run's figure from its records ------------------------------------------------------------------------
def figure(records: Sequence[RequestRecord], m: Metric, slo: SLO | None) -> float | None:
    """The figure of one run's records (None: nothing completed, or goodput without an SLO)."""
    if m.field == "output_throughput":
        return M.output_throughput(records)
    if m.field == "goodput_tps":
        span = M.run_span_ns(records)
        if slo is None or span is None:
            return None
        g = M.goodput(records, slo, (span[1] - span[0]) / 1e9)
        return g.tps if g else None
    v = M.summarize(records).get(m.field)
    return None if v is None else float(v)


# ---- two outputs on disk --------------------------------------------------------------------------------------
def runs_on_disk(path: Path, m: Metric) -> tuple[dict[tuple[int, int, str], list[float]], RunHeader]:
    """A bench (or compare side) output's per-run figures by cell (K, B, mode): one a rep; and its header."""
    from measure.control.bench.runs import slo_of
    from measure.machine.recorder import read_jsonl

    f = path / "records.jsonl" if path.is_dir() else path
    if not f.is_file():
        raise CompareError(f"{path}: no records.jsonl; give a bench --out folder (or a compare side's)")
    try:
        headers, records, _ = read_jsonl(f)
    except (OSError, ValueError) as exc:
        raise CompareError(f"cannot read {f}: {exc}") from None
    if not headers:
        raise CompareError(f"{f} has no header line: not an inference-top output")
    slo = slo_of(headers[0])  # lines.RunHeader
    if m.field == "goodput_tps" and slo is None:
        raise CompareError(f"--metric goodput: {path} was run without --slo; compare tok/s")
    groups: dict[tuple[int, int, str, int], list[RequestRecord]] = {}
    for r in records:
        groups.setdefault((r.k, r.b, r.mode, r.rep), []).append(r)
    out: dict[tuple[int, int, str], list[float]] = {}
    for (k, b, mode, rep), recs in sorted(groups.items()):
        if rep < 0:  # a compare's warm-up run: not counted
            continue
        v = figure(recs, m, slo)
        if v is not None and v > 0:
            out.setdefault((k, b, mode), []).append(v)
    return out, headers[0]


def compare_dirs(a: Path, b: Path, m: Metric) -> list[Outcome]:
    """Every cell (K, B, mode) the two outputs share: Welch's interval over their reps (not interleaved)."""
    ra, _ = runs_on_disk(a, m)
    rb, _ = runs_on_disk(b, m)
    common = [k for k in ra if k in rb]
    if not common:
        raise CompareError(f"{a} and {b} share no cell (K, B, mode): {sorted(ra)} against {sorted(rb)}")
    out = []
    for key in common:
        xa, xb = ra[key], rb[key]
        if len(xa) < 2 or len(xb) < 2:
            raise CompareError(f"K={key[0]} B={key[1]}: {len(xa)} run(s) in {a}, {len(xb)} in {b}; an interval "
                               "needs two runs a side at least (bench --reps 5)")
        iv = welch(xa, xb)
        means = (statistics.fmean(xa), statistics.fmean(xb))
        runs: list[RoundRun] = [{"side": s, "value": v} for s, xs in (("A", xa), ("B", xb)) for v in xs]
        o = Outcome(f"K={key[0]} B={key[1]} {key[2]}: " + verdict(iv, m, means), "welch", iv, means, runs,
                    [f"{len(xa)} and {len(xb)} runs, not measured in turns: a change in the machine between the "
                     "two outputs counts as a difference (compare -A … -B … measures in turns)"])
        out.append(o)
    return out


# ---- two configurations, started once each and loaded in turns ----------------------------------------------
@dataclass
class Side:
    """One configuration: its name (A or B), the options that make it, its RunPlan (builder.make_plan) and, for
    the null engine (simulated: a fixed schedule, no model), that schedule's options."""

    name: str
    options: str
    plan: Any
    null: dict[str, float] | None = None


@dataclass
class _Live:
    """A started side: its load source, the cell runner that loads it, and its records file."""

    side: Side
    source: Any
    runner: Any
    recorder: Any


class LiveSides:
    """Both sides started once (their workers or connections up, the idle one waiting while the other is
    loaded) and loaded in turns with the same closed loop of `users` over `requests` requests: request i is
    the same prompt on both (one workload, one seed). Records in OUT/A/records.jsonl and OUT/B/records.jsonl,
    one rep a run, so `compare OUT/A OUT/B` reads them back."""

    def __init__(self, sides: Sequence[Side], users: int, requests: int, out: Path, m: Metric,
                 say: Callable[[str], None], timeout_s: float = 600.0, header: Mapping[str, object] | None = None):
        self.users, self.requests, self.m, self.say, self.timeout_s = users, requests, m, say, timeout_s
        self.live: dict[str, _Live] = {}
        try:
            for side in sides:
                self.live[side.name] = self._open(side, out / side.name, header or {})
        except BaseException:
            self.close()
            raise

    def _open(self, side: Side, out: Path, header: Mapping[str, object]) -> _Live:
        from measure.control.bench.sweep import CellRunner, SweepConfig
        from measure.machine.recorder import Recorder

        p = side.plan
        k, b = p.sweep_ks[0], (p.bs or [1])[0]
        head = p.header({**header, "command": "compare", "side": side.name, "options": side.options,
                         "users": self.users, "requests": self.requests})
        if side.null is not None:
            head.update(engine=NULL.name, model="null", model_bytes=0, simulated=NULL.simulated,
                        engine_settings=side.null)
        rec = Recorder(out / "records.jsonl", head)
        src = self._source(side, rec.record, k)
        try:
            src.start()
            cfg = SweepConfig(ks=[k], bs=[b], requests=self.requests, max_tokens=p.max_tokens, mode=p.mode,
                              ignore_eos=p.ignore_eos, ctx=p.ctx, slo=p.slo, users=self.users, threads=p.threads,
                              max_b=max(p.max_b, b), cell_timeout_s=self.timeout_s, force=p.force,
                              memory_budget=p.memory_budget)
            runner = CellRunner(src, cfg, self.say)
            runner.start(p.mode, k, b, p.ctx, self.users)
        except BaseException:
            src.close()
            rec.close()
            raise
        return _Live(side, src, runner, rec)

    @staticmethod
    def _source(side: Side, on_record: Callable[[RequestRecord], None], k: int) -> Any:
        p = side.plan
        if side.null is None:
            from measure.control.wiring import make_source

            return make_source(p, events=False, on_record=on_record, per_cell=True)
        from engines.base import EngineSpec
        from measure.core.records import RunMeta
        from measure.sources.fleet import Fleet

        spec = EngineSpec(NULL.name, "", threads=p.threads or 1, ctx=p.ctx, options=dict(side.null))
        return Fleet(spec, RunMeta(NULL.label, "null", 0, simulated=NULL.simulated), k=k, threads=p.threads or 1,
                     on_record=on_record, b_cap=1, events=False)

    def warm_up(self, runs: int) -> list[str]:
        """`runs` runs of each side before the rounds, not counted (their records' rep is −1): a first run pays
        for cold caches and lazy allocations the rounds should not see. Each side's figures, as lines."""
        return [f"warm-up, not counted: {name} " + " ".join(f"{self.run_one(name, -1):.4g}" for _ in range(runs))
                + f" {self.m.unit}" for name in self.live] if runs else []

    def run_one(self, name: str, index: int) -> float:
        """One run of side `name` (index −1: a warm-up): the closed loop, to completion; its figure
        (CompareError: none)."""
        from measure.core.workload import ClosedLoop

        lv = self.live[name]
        lv.runner.source.rep = index
        p = lv.side.plan
        recs = lv.runner.load(p.workload, ClosedLoop(self.users, self.requests))
        v = figure(recs, self.m, p.slo)
        if v is None or v <= 0:
            errs = sorted({r.error for r in recs if r.error})
            raise CompareError(f"{name}'s {'warm-up' if index < 0 else f'run {index + 1}'} gave no {self.m.name}"
                               + (f" ({'; '.join(errs)[:200]})" if errs else
                                  " (goodput 0: no request met the SLO)" if self.m.field == "goodput_tps" else ""))
        return v

    def close(self) -> None:
        for lv in self.live.values():
            try:
                lv.source.close()
            finally:
                lv.recorder.close()


def write_result(out: Path, res: Mapping[str, object]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "compare.json"
    path.write_text(json.dumps(res, indent=2, default=str))
    return path


__all__ = ["Side", "LiveSides", "Metric", "METRICS", "metric", "Interval", "Sequential", "Outcome", "RoundRun", "OutcomeLine", "CompareError",
           "paired", "welch",
           "look_alpha", "order", "run_rounds", "verdict", "figure", "runs_on_disk", "compare_dirs", "t_quantile",
           "t_sf2", "parse_share", "write_result"]
