"""`inference-top compare A B`: is B slower than A, beyond this machine's noise? (docs/design/compare.md)

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

Before it goes on past the first look, it says what the budget can tell (`plan_line`, issue 58): the rounds'
noise so far (the SD of d), the rounds the budget holds at their pace, and the smallest difference those rounds
detect at 80 % power (`detectable`: (t at the last look's level + t at 80 %) × SD ÷ √rounds). A verdict of no
difference names that detectable difference, not the interval's half-width (a difference as large as the
half-width is found half the time). Every verdict says how many rounds it took and whether the interval decided
or the budget ended.

Failed requests count (issue 58): each run's errors are in its progress line, in compare.json and in the
verdict; a side that failed a larger share of its requests gets no latency verdict (its TPOT and TTFT are over
the requests it answered: an immediate error makes a side "faster"), and a throughput verdict it wins says so.
A side whose run fails ends the command with the rounds measured so far written (state `failed`).

Beside the speed, the answers (issue 58): both sides answer the same prompts greedily, each answer comes back
in its record (a local engine's token ids, a server's text), and the verdict ends with the share of prompts
answered alike and the first token where they part, a side that wins on speed but answers otherwise named
(answers.py; `Comparison.with_answers`).

The statistics are a pure function of the per-run figures (`Sequential`, `welch`), tested with simulated figures
drawn from the null engine's measured run-to-run noise and at 2, 10 and 15 % noise with its lag-1 correlation;
`LiveSides` drives two load sources.
"""
from __future__ import annotations

import functools
import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

from engines.null import NULL
from measure.core import metrics as M

if TYPE_CHECKING:
    from measure.control.bench.answers import Agreement, AgreementLine, Answers
    from measure.core.lines import RunHeader
    from measure.core.records import RequestRecord
    from presets import SLO

ALPHA = 0.05
MIN_ROUNDS = 3  # rounds (of four runs) before the first look: two degrees of freedom at least
POWER = 0.8  # the detectable difference is the one found this often
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
    # Welch–Satterthwaite; a side without noise leaves the other's n − 1 (its limit: not the pooled n_a + n_b − 2,
    # which made the interval narrowest where one side had no noise at all)
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1))
    h = t_quantile(alpha, df) * se
    return Interval(math.expm1(d), math.expm1(d - h), math.expm1(d + h), 1 - alpha, min(len(a), len(b)))


def detectable(sd: float, rounds: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest relative difference `rounds` paired rounds whose d have this SD find at `power` (two-sided
    at `alpha`): (t₁₋α/₂ + t_power) × SD ÷ √rounds, as a ratio − 1. inf below two rounds."""
    if rounds < 2:
        return math.inf
    df = rounds - 1
    return math.expm1((t_quantile(alpha, df) + t_quantile(2 * (1 - power), df)) * sd / math.sqrt(rounds))


def look_at(rounds: int, min_rounds: int = MIN_ROUNDS) -> int:
    """Which look (1-based) falls at or next after `rounds` rounds (Sequential.looks' schedule)."""
    return len(Sequential(min_rounds=min_rounds).looks(rounds - 1)) + 1


def plan_line(seq: Sequential, each_s: float, left_s: float) -> str:
    """What the budget can tell, from the rounds so far: their noise, the rounds it holds at their pace and the
    smallest difference those detect at 80 % power (at that look's level), and now (at this look's: the level the
    outcome's detectable difference is at)."""
    ds = seq.ds
    sd = statistics.stdev(ds) if len(ds) > 1 else 0.0
    now = len(ds)
    total = max(now, now + int(left_s // each_s) if each_s > 0 else now)
    at = detectable(sd, total, seq.level(total))
    return (f"noise of the first {now} rounds: B ÷ A moves {math.expm1(sd):.1%} a round (SD); at ≈ {each_s:.0f} s "
            f"a round the budget holds ≈ {total} rounds: the smallest difference they detect at {POWER:.0%} power "
            f"is ±{at:.1%} (now, at {now} rounds: ±{detectable(sd, now, seq.level(now)):.1%})")


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
    runs: list[RoundRun] = field(default_factory=list)  # every run so far (run_rounds), its errors with it

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
        return paired(self.ds, self.level(m))

    def level(self, rounds: int) -> float:
        """The error rate of the look at or next after `rounds` rounds (look_at): the interval's there."""
        return look_alpha(look_at(rounds, self.min_rounds), self.alpha)

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
            names: tuple[str, str] = ("A", "B"), sd: float | None = None) -> str:
    """One sentence: the difference with its interval, or no difference above what the runs could tell (with the
    rounds' SD of d, the difference they detect at 80 % power is named too)."""
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
    power = ("" if sd is None else
             f"; a difference of ±{detectable(sd, iv.rounds, 1 - iv.confidence):.1%} is found {POWER:.0%} of the time")
    return (f"no difference above {bound:.1%} in {m.name}, this machine's noise ({figs}; {b} vs {a} "
            f"{iv.rel:+.1%}, {span}; the interval's half-width ±{iv.half:.1%}{power})")


def error_line(errors: Mapping[str, int], requests: Mapping[str, int]) -> str:
    """Each side's failed requests: "errors A 0 of 64, B 16 of 64"."""
    return "errors " + ", ".join(f"{s} {errors.get(s, 0)} of {requests.get(s, 0)}" for s in ("A", "B"))


def error_caveat(iv: Interval | None, m: Metric, errors: Mapping[str, int], requests: Mapping[str, int]
                 ) -> tuple[str | None, str | None]:
    """(state, words) where errors change the verdict: a side that failed a larger share of its requests and
    comes out better gets no latency verdict (state `errors`: its latency is over the requests it answered) and
    a throughput win that says so; (None, None) where neither side failed more."""
    share = {s: errors.get(s, 0) / max(1, requests.get(s, 0)) for s in ("A", "B")}
    if share["A"] == share["B"]:
        return None, None
    worse = "A" if share["A"] > share["B"] else "B"
    said = (f"{worse} failed {errors.get(worse, 0)} of {requests.get(worse, 0)} requests "
            f"({share[worse]:.0%}), {'B' if worse == 'A' else 'A'} {share['B' if worse == 'A' else 'A']:.0%}")
    b_better = iv is not None and (iv.rel > 0) == m.higher_is_better
    if iv is None or not iv.excludes_zero or (worse == "B") != b_better:  # the side with more errors does not come out better
        return None, said
    if not m.higher_is_better:
        return "errors", (f"no verdict on {m.name}: {said}; its {m.name} is over the requests it answered (a "
                          f"failed request costs no wait: {worse} reads {abs(iv.rel):.1%} lower there)")
    return None, said + f"; its {m.name} lead counts the requests it failed as served at no cost"


class _Run(TypedDict):
    side: str  # A | B
    value: float


class RoundRun(_Run, total=False):
    """One run of a compare: its side and its figure; measured in turns, its round (1-based), how long it took,
    and its failed requests of those sent."""

    round: int
    seconds: float
    errors: int
    requests: int


class RunFigure(NamedTuple):
    """What one run gives: its figure, and its failed requests of those sent (a run_one may give the figure
    alone: no errors counted)."""

    value: float
    errors: int = 0
    requests: int = 0


class OutcomeLine(TypedDict):
    """compare.json's verdict part (Comparison.to_dict)."""

    sentence: str
    state: str
    interval: dict[str, float] | None  # Interval's fields
    means: list[float | None]
    runs: list[RoundRun]
    notes: list[str]
    rounds: int
    errors: dict[str, int]
    requests: dict[str, int]
    detectable: float | None
    ended: str
    answers: AgreementLine | None  # the two sides' answers (answers.py); None where not compared


@dataclass
class Comparison:
    """What a compare found: the verdict, its interval, and every run (side, round, figure, seconds)."""

    sentence: str
    state: str  # difference | none | budget (no difference above the interval's far end) | errors | failed | welch
    interval: Interval | None
    means: tuple[float, float]
    runs: list[RoundRun]
    notes: list[str] = field(default_factory=list)
    detectable: float | None = None  # the difference these rounds find at 80 % power
    answers: Agreement | None = None  # the two sides' answers compared (answers.agree)

    def with_answers(self, ag: Agreement | None, m: Metric) -> Comparison:
        """The outcome with what the sides' answers say added to its sentence (answers.verdict_clause: the side the
        interval finds better in `m` named where its answers differ; answers not compared, where no ids)."""
        from measure.control.bench.answers import verdict_clause

        iv = self.interval
        winner = None
        if iv is not None and iv.excludes_zero and self.state in ("difference", "welch"):  # a verdict, not "errors"
            winner = "B" if (iv.rel > 0) == m.higher_is_better else "A"
        notes = self.notes + ([ag.where()] if ag is not None and ag.at else [])
        return replace(self, sentence=f"{self.sentence}; {verdict_clause(ag, winner)}", answers=ag, notes=notes)

    @property
    def errors(self) -> dict[str, int]:
        return {s: sum(r.get("errors", 0) for r in self.runs if r["side"] == s) for s in ("A", "B")}

    @property
    def requests(self) -> dict[str, int]:
        return {s: sum(r.get("requests", 0) for r in self.runs if r["side"] == s) for s in ("A", "B")}

    def to_dict(self) -> OutcomeLine:
        return {"sentence": self.sentence, "state": self.state,
                "interval": asdict(self.interval) if self.interval else None,
                "means": [x if x == x else None for x in self.means],  # NaN (no run yet): null
                "runs": self.runs, "notes": self.notes, "rounds": max([r.get("round", 0) for r in self.runs] or [0]),
                "errors": self.errors, "requests": self.requests, "detectable": self.detectable,
                "ended": {"difference": "decided", "none": "decided", "errors": "decided",
                          "failed": "a run failed", "welch": "runs on disk"}.get(self.state, "the budget ended"),
                "answers": self.answers.to_dict() if self.answers else None}


# ---- the live procedure ---------------------------------------------------------------------------------------
RunOne = Callable[[str, int], "float | RunFigure"]  # (side "A" | "B", run index of that side) → the run's figure


def run_rounds(run_one: RunOne, m: Metric, budget_s: float, seq: Sequential,
               say: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic,
               max_rounds: int | None = None) -> Comparison:
    """Rounds of ABBA / BAAB until `seq` resolves, the budget cannot hold another round (its rounds so far
    timed), or max_rounds; a progress line after each round with the interval as it narrows and each side's
    errors, and at the first look what the budget can tell (plan_line). At least seq.min_rounds rounds run
    whatever the budget (an interval needs them). The runs are kept in seq.runs as they come (a run that raises
    leaves the rounds before it there: failed_outcome)."""
    t0 = clock()
    count = {"A": 0, "B": 0}
    state = "budget"
    while True:
        i = len(seq.rounds)
        got = _one_round(run_one, seq, i, count, clock)
        took = clock() - t0
        iv = seq.interval()
        errors, requests = _tally(seq.runs)
        say(_progress(i + 1, got, iv, m, took, budget_s, seq.min_rounds)
            + (" · " + error_line(errors, requests) if any(requests.values()) else ""))
        each = took / len(seq.rounds)
        if len(seq.rounds) == seq.min_rounds:
            say(plan_line(seq, each, budget_s - took))
        if (res := seq.resolved()) is not None:
            state = res
            break
        if len(seq.rounds) == 1 and each * seq.min_rounds > budget_s:
            say(f"the budget holds ≈ {budget_s / each:.1f} rounds of ≈ {each:.0f} s; the interval needs "
                f"{seq.min_rounds}: they run anyway (≈ {each * seq.min_rounds:.0f} s)")
        if len(seq.rounds) >= seq.min_rounds and (took + each > budget_s or
                                                  (max_rounds is not None and len(seq.rounds) >= max_rounds)):
            state = seq.resolved(last=True) or "budget"
            break
    return _outcome(seq, m, state, seq.runs)


def _one_round(run_one: RunOne, seq: Sequential, i: int, count: dict[str, int], clock: Callable[[], float]
               ) -> dict[str, list[float]]:
    """Round i's four runs in its order, each kept in seq.runs as it ends; the round added to seq."""
    got: dict[str, list[float]] = {"A": [], "B": []}
    for side in order(i):
        t1 = clock()
        v = run_one(side, count[side])
        value = v.value if isinstance(v, RunFigure) else float(v)
        count[side] += 1
        got[side].append(value)
        run: RoundRun = {"side": side, "round": i + 1, "value": value, "seconds": round(clock() - t1, 3)}
        if isinstance(v, RunFigure):  # a run that counted its requests: its errors with it
            run["errors"], run["requests"] = v.errors, v.requests
        seq.runs.append(run)
    seq.add(got["A"], got["B"])
    return got


def _tally(runs: Sequence[RoundRun]) -> tuple[dict[str, int], dict[str, int]]:
    return ({s: sum(r.get("errors", 0) for r in runs if r["side"] == s) for s in ("A", "B")},
            {s: sum(r.get("requests", 0) for r in runs if r["side"] == s) for s in ("A", "B")})


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


def _outcome(seq: Sequential, m: Metric, state: str, runs: list[RoundRun]) -> Comparison:
    iv = seq.interval()
    a = statistics.fmean(x for r in seq.rounds for x in r[0])
    b = statistics.fmean(x for r in seq.rounds for x in r[1])
    errors, requests = _tally(runs)
    if iv is None:  # fewer rounds than an interval needs (max_rounds below min_rounds)
        return Comparison(f"unresolved: {len(seq.rounds)} round(s), an interval needs {seq.min_rounds}; "
                       + error_line(errors, requests), "budget", None, (a, b), runs)
    sd = statistics.stdev(seq.ds)
    n = len(seq.rounds)
    notes = [f"run-to-run CV: A {_cv([x for r in seq.rounds for x in r[0]]):.1%}, "
             f"B {_cv([x for r in seq.rounds for x in r[1]]):.1%} of its mean"]
    if any(requests.values()):  # runs that counted their requests (LiveSides): the errors of each side
        notes.append(error_line(errors, requests))
    sentence = verdict(iv, m, (a, b), seq.precision, sd=sd)
    caveat_state, caveat = error_caveat(iv, m, errors, requests)
    if caveat_state is not None and caveat is not None:
        state, sentence = caveat_state, caveat + f" ({n} rounds)"
    else:
        ended = (f"decided after {n} rounds" if state in ("difference", "none")
                 else f"the budget ended after {n} rounds, undecided")
        sentence += f" — {ended}" + (f"; {caveat}" if caveat else "")
    if state == "budget":
        notes.append("the budget ended before the interval resolved (a longer --budget narrows it)")
    return Comparison(sentence, state, iv, (a, b), runs, notes, detectable(sd, n, 1 - iv.confidence))


def failed_outcome(seq: Sequential, m: Metric, reason: str) -> Comparison:
    """The rounds measured before a run failed (state `failed`): written so that they are not lost."""
    full = [x for r in seq.rounds for x in r[0]], [x for r in seq.rounds for x in r[1]]
    means = (statistics.fmean(full[0]) if full[0] else math.nan, statistics.fmean(full[1]) if full[1] else math.nan)
    return Comparison(f"failed after {len(seq.rounds)} complete round(s): {reason}; "
                   + error_line(*_tally(seq.runs)), "failed", seq.interval(), means, list(seq.runs))


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
def runs_on_disk(path: Path, m: Metric) -> tuple[dict[tuple[int, int, str], list[float]], RunHeader,
                                                  Mapping[tuple[int, int, str], list[Answers]]]:
    """A bench (or compare side) output's per-run figures by cell (K, B, mode): one a rep; its header; and each
    cell's answers, one a rep, where its records carry them (answers.of_cells)."""
    from measure.control.bench.answers import of_cells
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
    return out, headers[0], of_cells(records)


def compare_dirs(a: Path, b: Path, m: Metric) -> list[Comparison]:
    """Every cell (K, B, mode) the two outputs share: Welch's interval over their reps (not interleaved)."""
    from measure.control.bench.answers import agree

    ra, _, ans_a = runs_on_disk(a, m)
    rb, _, ans_b = runs_on_disk(b, m)
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
        o = Comparison(f"K={key[0]} B={key[1]} {key[2]}: " + verdict(iv, m, means), "welch", iv, means, runs,
                    [f"{len(xa)} and {len(xb)} runs, not measured in turns: a change in the machine between the "
                     "two outputs counts as a difference (compare -A … -B … measures in turns)"])
        out.append(o.with_answers(agree(ans_a.get(key, []), ans_b.get(key, [])), m))
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
        self.answers: dict[str, list[Answers]] = {side.name: [] for side in sides}  # each counted run's, in order
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

            if p.spec is not None:  # a local engine: its workers send each answer's ids back (answers.py)
                p = replace(p, spec=replace(p.spec, options={**p.spec.options, "answer_ids": True}))
            src = make_source(p, events=False, on_record=on_record, per_cell=True)
            if keep := getattr(src, "keep_answers", None):  # a server's source: each answer's text (HttpOptions)
                keep()
            return src
        from engines.base import EngineSpec
        from measure.core.records import RunMeta
        from measure.sources.fleet import Fleet

        spec = EngineSpec(NULL.name, "", threads=p.threads or 1, ctx=p.ctx, options={**side.null, "answer_ids": True})
        return Fleet(spec, RunMeta(NULL.label, "null", 0, simulated=NULL.simulated), k=k, threads=p.threads or 1,
                     on_record=on_record, b_cap=1, events=False)

    def warm_up(self, runs: int) -> list[str]:
        """`runs` runs of each side before the rounds, not counted (their records' rep is −1): a first run pays
        for cold caches and lazy allocations the rounds should not see. Each side's figures, as lines."""
        return [f"warm-up, not counted: {name} " + " ".join(f"{self.run_one(name, -1).value:.4g}" for _ in range(runs))
                + f" {self.m.unit}" for name in self.live] if runs else []

    def run_one(self, name: str, index: int) -> RunFigure:
        """One run of side `name` (index −1: a warm-up): the closed loop, to completion; its figure and its
        failed requests (CompareError: no figure)."""
        from measure.control.bench.answers import answers_of
        from measure.core.workload import ClosedLoop

        lv = self.live[name]
        lv.runner.source.rep = index
        p = lv.side.plan
        recs = lv.runner.load(p.workload, ClosedLoop(self.users, self.requests))
        v = figure(recs, self.m, p.slo)
        if index >= 0 and (ans := answers_of(recs)) is not None:
            self.answers[name].append(ans)
        if v is None or v <= 0:
            errs = sorted({r.error for r in recs if r.error})
            raise CompareError(f"{name}'s {'warm-up' if index < 0 else f'run {index + 1}'} gave no {self.m.name}"
                               + (f" ({'; '.join(errs)[:200]})" if errs else
                                  " (goodput 0: no request met the SLO)" if self.m.field == "goodput_tps" else ""))
        return RunFigure(v, sum(1 for r in recs if r.error), len(recs))

    def agreement(self) -> Agreement | None:
        """The two sides' answers so far (answers.agree; None where a side recorded none)."""
        from measure.control.bench.answers import agree

        if len(self.answers) != 2:
            return None
        a, b = self.answers
        return agree(self.answers[a], self.answers[b], (a, b))

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


__all__ = ["Side", "LiveSides", "Metric", "METRICS", "metric", "Interval", "Sequential", "Comparison", "RoundRun",
           "OutcomeLine", "CompareError",
           "RunFigure", "detectable", "plan_line", "failed_outcome", "error_line", "error_caveat", "look_at",
           "paired", "welch",
           "look_alpha", "order", "run_rounds", "verdict", "figure", "runs_on_disk", "compare_dirs", "t_quantile",
           "t_sf2", "parse_share", "write_result"]
