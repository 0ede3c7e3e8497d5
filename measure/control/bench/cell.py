"""The bench cell: one level's figures, as typed parts (docs/design/metrics.md, docs/design/glossary.md "cell").

A cell is made by one function, `Cell.measure`, from its records, a `Spec` (the level and what the run was given:
W, β, the roofline, the SLO, the cost) and a timing that says how its per-second figures are timed: per rep (a
bench cell, a `--find` level), over a recording's level periods (`report`), or summed over clients (`report
--combine`). Every figure derived from another — the bandwidth product from the throughput, J/token and $/Mtok
from the watts and the throughput, the CV from the reps, the predicted throughput's error — is derived there,
once, so the table, the report and the knee cannot read two numbers for one thing.

Its parts: each distribution (TTFT, TPOT, ITL, E2E, the load generator's lateness, the client's wait) is a
`Dist`; the request figures, the bandwidth product, the prediction, the load generator, the server's own
figures, cost, goodput, the machine, the scaling, a --find level and how a report timed it are each a frozen
record, None where the cell has none (a cell without --slo has no `goodput`).

summary.json (`to_json`) writes the figures by the names and in the order of `KEYS`, the order summary.json has
always had: a measured cell writes each of its parts' figures, null where there is none; a part the cell has not
is not written, nor a figure marked optional that is None. A cell without numbers (refused, wall, timeout, cut:
`skipped`) writes the short list `SKIPPED`. `Cell.from_json` reads a summary.json cell back; keys this version
does not name are kept in `extra` and written after the rest.
"""
from __future__ import annotations

import csv
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from measure.control.bench.server_check import ServerCheck, server_check
from measure.core import metrics as M
from measure.core.records import RequestRecord, is_remote

if TYPE_CHECKING:
    from measure.core.arrivals import ClientWait
    from measure.core.cost import Cost
    from measure.core.roofline import Roofline
    from measure.core.sessions import TurnTTFT
    from measure.core.work import WorkModel
    from presets import SLO


class ClassTTFT(TypedDict):
    """One request class's queue-inclusive TTFT (ttft_by_class), ms."""

    n: int
    median_ttft_ms: float
    p99_ttft_ms: float


class EndpointFigures(TypedDict):
    """One endpoint's figures in an HTTP cell over several (endpoint_figures)."""

    endpoint: str
    url: str | None
    requests: int
    errors: int
    output_throughput: float | None
    median_ttft_ms: float | None
    median_tpot_ms: float | None
    bandwidth_gbps: float | None


@dataclass(frozen=True)
class Dist:
    """A distribution's figures in ms, those it has (TTFT: mean, p50, p90, p99; lateness: p50, p99, max)."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class Requests:
    """The request figures (metrics.summarize; every rep pooled), ms."""

    completed: int | None = None
    errors: int | None = None
    total_output_tokens: int | None = None
    ttft: Dist = Dist()  # queue-inclusive: first token − scheduled
    ttft_engine: Dist = Dist()  # first token − started
    queue_wait: Dist = Dist()
    ttfat: Dist = Dist()  # to the first answer token (a reasoning model's)
    reasoning_tokens: int | None = None
    tpot: Dist = Dist()
    itl: Dist = Dist()
    e2el: Dist = Dist()
    per_stream_tps: float | None = None  # 1 ÷ TPOT p50
    stopped_early: int | None = None  # with EOS ignored: answers that ended before their length limit anyway
    ttft_by_class: dict[str, ClassTTFT] | None = None  # long documents vs short prompts, where both ran


@dataclass(frozen=True)
class CellBandwidth:
    """The bandwidth product (docs/design/metrics.md) and what made it."""

    gbps: float | None = None
    formula: str | None = None
    endpoints: list[EndpointFigures] | None = None  # http, several endpoints: one per endpoint (endpoint_figures)
    steps_per_s: float | None = None  # batch
    kv_read_gbps: float | None = None  # batch, the KV size known


@dataclass(frozen=True)
class CellPrediction:
    """K·W/β's TPOT, or the roofline's TPOT and tok/s and the error of each against the measurement."""

    by: str | None = None  # roofline | K·W/β | None
    tpot_ms: float | None = None
    output_throughput: float | None = None
    binding: str | None = None
    error_tpot: float | None = None
    error_output_throughput: float | None = None
    caveat: str | None = None  # where the prediction does not hold (K × threads > cores)


@dataclass(frozen=True)
class LoadGen:
    """The load generator (core/arrivals.lateness_figures) and, over HTTP, the requests that were due while every
    client stream was busy and how long they waited in the client (arrivals.client_wait_figures), only where
    some did: the client's queue, not the server's."""

    lateness: Dist = Dist()
    behind_schedule: bool | None = None
    arrival_rps: float | None = None
    client_waited: int | None = None
    client_wait: Dist = Dist()
    client_procs: int | None = None  # http: the client processes whose streams sent this cell's requests (a pool)
    arrivals: str | None = None  # the arrival process, described
    warmup_requests: int | None = None  # http: requests sent before the cell's figures, not in them (--warmup)


@dataclass(frozen=True)
class Turns:
    """Multi-turn sessions (core/sessions.py)."""

    sessions: str | None = None  # the sessions, described
    ttft_by_turn: dict[str, TurnTTFT] | None = None
    prefix_cache: str | None = None


@dataclass(frozen=True)
class Server:
    """http: the server's own figures beside the client's; its prefix cache, speculative decoding and KV use
    (core/server_cache.py), where given."""

    check: ServerCheck | None = None
    prefix_cache_hit_rate: float | None = None
    prefix_cache_tokens: float | None = None
    prefix_cache_source: str | None = None
    spec_acceptance_rate: float | None = None
    spec_draft_tokens: float | None = None
    spec_source: str | None = None
    spec_mean_acceptance_length: float | None = None
    kv_cache_usage_max: float | None = None


@dataclass(frozen=True)
class CostFigures:
    """Cost (--watts, --price-per-hour …): the mean power over the cell and what read it."""

    watts: float | None = None
    joules_per_token: float | None = None
    usd_per_mtok: float | None = None
    power_source: str | None = None


@dataclass(frozen=True)
class CellGoodput:
    """A cell's goodput (--slo, docs/design/goodput.md)."""

    slo: str | None = None
    rps: float | None = None
    tps: float | None = None
    attainment: float | None = None


@dataclass(frozen=True)
class CellMachine:
    """The machine while the cell ran."""

    rss_gb_sum: float | None = None  # decimal GB (docs/design/units.md's exception)
    k_served_min: int | None = None  # a worker died mid-cell
    thermal: str | None = None  # the thermal states seen while the cell ran ("nominal → throttled (…)")
    thermal_changed: bool | None = None  # set (True) when the state changed: its figures mix two machines
    # a Mac's energy per rail over the cell (zeus-apple-silicon, docs/design/unified-memory.md): readable rails only
    rails_watts: dict[str, float] | None = None
    rails_joules_per_token: dict[str, float] | None = None
    rails_unread: str | None = None  # the rails not read and why ("cpu: frozen: …")
    oom_killed: bool | None = None
    # the cores other work kept busy while the cell ran (the machine's CPU less inference-top's own processes'; local
    # engines only) and, from a quarter of the cores, what it says (docs/design/wall.md "Threads beside other work")
    other_work_cores: float | None = None
    other_work: str | None = None
    # residency over the cell (docs/residency.md): the weights' resident share, major faults a token, swap-in and
    # file read-in MB/s, and every field (Residency.fields)
    weights_resident_share: float | None = None
    major_faults_per_token: float | None = None
    swap_in_mbps: float | None = None
    file_read_mbps: float | None = None
    residency: dict[str, Any] | None = None


@dataclass(frozen=True)
class CellRow:
    """The sweep's row a bench cell is in: its context (None: the workload's own prompts)."""

    context: int | None = None


@dataclass(frozen=True)
class Scaling:
    vs_k1: float | None = None
    vs_b1: float | None = None


@dataclass(frozen=True)
class KneeLevel:
    """A --find level (knee.py) and its verdict (start.py's run_find)."""

    level: float | None = None
    users: int | None = None
    span_s: float | None = None
    offered_rps: float | None = None
    arrivals_s: float | None = None
    ttft_trend: float | None = None
    peak_users: int | None = None
    within_slo: bool | None = None
    verdict: str | None = None


@dataclass(frozen=True)
class TimingNote:
    """How a report's cell was timed: a recording's level periods, or clients combined."""

    periods: list[list[int]] | None = None
    seconds: float | None = None
    clients: int | None = None
    clients_throughput: list[float | None] | None = None
    throughput_rule: str | None = None
    span_ns: tuple[int, int] | list[int] | None = None
    segments: str | None = None  # --segment i/N: the schedule's segments combined ("1/2 + 2/2")


@dataclass
class Cell:
    # which level, and what became of it
    k: int | None = None
    b: int | None = None
    reps: int | None = None
    mode: str | None = None
    status: str | None = None  # ok | failed | refused | wall | timeout | cut
    reason: str | None = None  # a cell without numbers: why
    row: CellRow | None = None
    # per-second figures, timed by the cell's timing
    achieved_concurrency: float | None = None  # Little's law (docs/design/concurrency.md)
    output_throughput: float | None = None  # aggregate tok/s (docs/design/metrics.md)
    output_throughput_per_rep: list[float] | None = None
    cv: float | None = None  # over the reps' throughput
    noisy: bool | None = None
    # the parts (empty where the cell has none of their figures; cost and scaling: None where not asked)
    requests: Requests = Requests()
    bandwidth: CellBandwidth = CellBandwidth()
    prediction: CellPrediction = CellPrediction()
    load: LoadGen = LoadGen()
    turns: Turns = Turns()
    server: Server = Server()
    cost: CostFigures | None = None
    goodput: CellGoodput = CellGoodput()
    machine: CellMachine = CellMachine()
    scaling: Scaling | None = None
    knee: KneeLevel = KneeLevel()
    timing: TimingNote = TimingNote()
    extra: dict[str, object] = field(default_factory=dict)  # keys this version does not name, read from another's JSON

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def context(self) -> int | None:
        return self.row.context if self.row else None

    def copy(self) -> Cell:
        return replace(self, extra=dict(self.extra))

    @classmethod
    def measure(cls, records: Sequence[RequestRecord], spec: Spec, timing: Timing | None = None) -> Cell:
        """One cell's figures, every one recomputable from its records with docs/design/metrics.md (the one place a
        bench cell, a --find level and a report's cell are made). `timing`: how the per-second figures are
        timed (PerRep, the default; Periods; Clients); every figure derived from them is derived here."""
        return _measure(records, spec, timing or PerRep())

    # ---- summary.json -------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """summary.json's cell: its figures in KEYS' order (SKIPPED's for a cell without numbers)."""
        if self.reason is not None:
            return {key: _get(self, path)[1] for key, path in SKIPPED}
        out = {}
        for key, path, when in KEYS:
            there, value = _get(self, path)
            if there and (value is not None if when is None else when(self)):
                out[key] = value
        return out | self.extra

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Cell:
        """A summary.json cell read back (or any part of one)."""
        parts: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        extra: dict[str, object] = {}
        for key, value in d.items():
            path = PATHS.get(key)
            if path is None:
                extra[key] = value
            elif len(path) == 1:
                top[path[0]] = value
            elif len(path) == 2:
                parts.setdefault(path[0], {})[path[1]] = value
            else:
                parts.setdefault(path[0], {}).setdefault(path[1], {})[path[2]] = value
        for name, figures in parts.items():
            kind = PARTS[name]
            top[name] = kind(**{f: Dist(**v) if isinstance(v, dict) and f in DISTS else v
                                for f, v in figures.items()})
        return cls(**top, extra=extra)


@dataclass(frozen=True)
class Spec:
    """What a cell is measured with besides its records: its level and what the run was given. `endpoint_gbps`:
    HTTP, each listed endpoint's β in order (None where its chip is not known). With ignore_eos,
    `stopped_early` counts the answers that ended before their length limit anyway."""

    k: int
    b: int
    weight_bytes: int
    bandwidth_gbps: float | None = None
    mode: str = "instances"
    kv_bytes_per_token: float | None = None
    roofline: Roofline | None = None
    threads: int | None = None
    max_tokens: int | None = None
    slo: SLO | None = None
    cost: Cost | None = None
    watts: float | None = None
    endpoint_gbps: Sequence[float | None] | None = None
    ignore_eos: bool = False
    served: WorkModel | None = None  # http: the served model's work (--model-bytes its config.json or GGUF)


# ---- summary.json's names: (key, attribute path, when it is written) ----------------------------------------
def _measured(c: Cell) -> bool:
    """A cell Cell.measure made (a cell without numbers is written by SKIPPED)."""
    return c.requests.completed is not None


def _get(c: Cell, path: tuple[str, ...]) -> tuple[bool, Any]:
    """(whether the part holding it is there, the figure)."""
    v: Any = c
    for name in path:
        if v is None:
            return False, None
        v = getattr(v, name)
    return True, v


def _part(name: str) -> Callable[[Cell], bool]:
    return lambda c: getattr(c, name) is not None


Rule = Callable[[Cell], bool] | None  # None: written where not None
ALWAYS: Rule = _measured  # a measured cell writes it, null where there is none
_req = _bw = _pred = _load = _mach = ALWAYS
_cost = _part("cost")


def _good(c: Cell) -> bool:
    return c.goodput.slo is not None


def _knee(c: Cell) -> bool:
    return c.knee.level is not None


def _dist(prefix: str, part: str, dist: str, stats: Sequence[tuple[str, str]], rule: Rule) -> list[
        tuple[str, tuple[str, ...], Rule]]:
    return [(prefix.format(s), (part, dist, attr), rule) for s, attr in stats]


def _roofline(c: Cell) -> bool:
    return c.prediction.by == "roofline"


def _batch(c: Cell) -> bool:
    return _measured(c) and c.mode == "batch"


def _batch_span(c: Cell) -> bool:
    return _batch(c) and c.bandwidth.steps_per_s is not None


def _waited(c: Cell) -> bool:
    return c.load.client_waited is not None


def _turns(c: Cell) -> bool:
    return c.turns.ttft_by_turn is not None


def _rails(c: Cell) -> bool:
    return c.machine.rails_watts is not None


def _rate(c: Cell) -> bool:
    return c.knee.arrivals_s is not None


_MEAN_P = (("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p99", "p99"))
_P50_99 = (("median", "p50"), ("p99", "p99"))
_P_MAX = (("p50", "p50"), ("p99", "p99"), ("max", "max"))
_SERVER = ("prefix_cache_hit_rate", "prefix_cache_tokens", "prefix_cache_source", "spec_acceptance_rate",
           "spec_draft_tokens", "spec_source", "spec_mean_acceptance_length", "kv_cache_usage_max")
KEYS: list[tuple[str, tuple[str, ...], Rule]] = [
    ("k", ("k",), ALWAYS), ("b", ("b",), ALWAYS), ("reps", ("reps",), ALWAYS),
    ("achieved_concurrency", ("achieved_concurrency",), ALWAYS), ("output_throughput", ("output_throughput",), ALWAYS),
    ("output_throughput_per_rep", ("output_throughput_per_rep",), ALWAYS),
    ("completed", ("requests", "completed"), _req), ("errors", ("requests", "errors"), _req),
    ("total_output_tokens", ("requests", "total_output_tokens"), _req),
    *_dist("{}_ttft_ms", "requests", "ttft", _MEAN_P, _req),
    *_dist("{}_ttft_engine_ms", "requests", "ttft_engine", _P50_99, _req),
    *_dist("{}_queue_wait_ms", "requests", "queue_wait", (("median", "p50"),), _req),
    *_dist("{}_ttfat_ms", "requests", "ttfat", _P50_99, _req),
    ("reasoning_tokens", ("requests", "reasoning_tokens"), _req),
    *_dist("{}_tpot_ms", "requests", "tpot", _MEAN_P, _req),
    *_dist("{}_itl_ms", "requests", "itl", _P50_99, _req),
    *_dist("{}_e2el_ms", "requests", "e2el", _P50_99, _req),
    ("per_stream_tps", ("requests", "per_stream_tps"), _req), ("rss_gb_sum", ("machine", "rss_gb_sum"), _mach),
    ("bandwidth_gbps", ("bandwidth", "gbps"), _bw), ("bandwidth_formula", ("bandwidth", "formula"), _bw),
    ("endpoints", ("bandwidth", "endpoints"), None), ("steps_per_s", ("bandwidth", "steps_per_s"), _batch),
    ("kv_read_gbps", ("bandwidth", "kv_read_gbps"), _batch_span),
    ("mode", ("mode",), ALWAYS), ("predicted_tpot_ms", ("prediction", "tpot_ms"), _pred),
    ("cv", ("cv",), ALWAYS), ("noisy", ("noisy",), ALWAYS), ("status", ("status",), ALWAYS),
    ("reason", ("reason",), None),
    ("k_served_min", ("machine", "k_served_min"), None), ("ttft_by_class", ("requests", "ttft_by_class"), None),
    ("predicted_by", ("prediction", "by"), _pred),
    *_dist("lateness_{}_ms", "load", "lateness", _P_MAX, _load),
    ("behind_schedule", ("load", "behind_schedule"), _load), ("arrival_rps", ("load", "arrival_rps"), _load),
    ("ttft_by_turn", ("turns", "ttft_by_turn"), None), ("prefix_cache", ("turns", "prefix_cache"), _turns),
    ("stopped_early", ("requests", "stopped_early"), None), ("server_check", ("server", "check"), None),
    *[(k, ("server", k), None) for k in _SERVER],
    ("client_waited", ("load", "client_waited"), None),
    *_dist("client_wait_{}_ms", "load", "client_wait", _P_MAX, _waited),
    ("client_procs", ("load", "client_procs"), None), ("warmup_requests", ("load", "warmup_requests"), None),
    ("watts", ("cost", "watts"), _cost), ("joules_per_token", ("cost", "joules_per_token"), _cost),
    ("usd_per_mtok", ("cost", "usd_per_mtok"), _cost),
    ("slo", ("goodput", "slo"), _good), ("goodput_rps", ("goodput", "rps"), _good),
    ("goodput_tps", ("goodput", "tps"), _good), ("slo_attainment", ("goodput", "attainment"), _good),
    ("predicted_output_throughput", ("prediction", "output_throughput"), _roofline),
    ("binding", ("prediction", "binding"), _roofline), ("error_tpot", ("prediction", "error_tpot"), _roofline),
    ("error_output_throughput", ("prediction", "error_output_throughput"), _roofline),
    ("prediction_caveat", ("prediction", "caveat"), None),
    *[(k, ("timing", k), None) for k in ("periods", "seconds", "clients", "clients_throughput", "throughput_rule")],
    ("context", ("row", "context"), _part("row")),
    ("thermal", ("machine", "thermal"), None), ("thermal_changed", ("machine", "thermal_changed"), None),
    ("rails_watts", ("machine", "rails_watts"), None),
    ("rails_joules_per_token", ("machine", "rails_joules_per_token"), _rails),
    ("rails_unread", ("machine", "rails_unread"), None), ("power_source", ("cost", "power_source"), None),
    ("arrivals", ("load", "arrivals"), None), ("sessions", ("turns", "sessions"), None),
    ("oom_killed", ("machine", "oom_killed"), None),
    ("other_work_cores", ("machine", "other_work_cores"), None), ("other_work", ("machine", "other_work"), None),
    *[(k, ("machine", k), None) for k in ("weights_resident_share", "major_faults_per_token", "swap_in_mbps",
                                           "file_read_mbps", "residency")],
    ("span_ns", ("timing", "span_ns"), None), ("segments", ("timing", "segments"), None),
    ("scaling_vs_k1", ("scaling", "vs_k1"), _part("scaling")),
    ("scaling_vs_b1", ("scaling", "vs_b1"), _part("scaling")),
    ("level", ("knee", "level"), _knee), ("users", ("knee", "users"), _knee),
    ("span_s", ("knee", "span_s"), _knee), ("offered_rps", ("knee", "offered_rps"), _rate),
    ("arrivals_s", ("knee", "arrivals_s"), None), ("ttft_trend", ("knee", "ttft_trend"), _rate),
    ("peak_users", ("knee", "peak_users"), None), ("within_slo", ("knee", "within_slo"), None),
    ("verdict", ("knee", "verdict"), None),
]
PATHS = {key: path for key, path, _ in KEYS}
# a cell without numbers: these, every one written
SKIPPED = [(key, PATHS[key]) for key in ("k", "b", "context", "status", "reason", "output_throughput",
                                         "median_tpot_ms", "median_ttft_ms", "p99_ttft_ms", "rss_gb_sum",
                                         "bandwidth_gbps", "cv", "noisy", "errors", "completed")]
PARTS: dict[str, Callable[..., Any]] = {"requests": Requests, "bandwidth": CellBandwidth,
                                        "prediction": CellPrediction,
                                        "load": LoadGen, "turns": Turns, "server": Server, "cost": CostFigures,
                                        "goodput": CellGoodput, "machine": CellMachine, "scaling": Scaling,
                                        "knee": KneeLevel,
                                        "timing": TimingNote, "row": CellRow}
DISTS = {"ttft", "ttft_engine", "queue_wait", "ttfat", "tpot", "itl", "e2el", "lateness", "client_wait"}


def as_cell(c: Cell | Mapping[str, Any]) -> Cell:
    """A cell, whether given as one or as summary.json's dict."""
    return c if isinstance(c, Cell) else Cell.from_json(c)


def skipped(k: int, b: int, context: int | None, status: str, reason: str) -> Cell:
    """A cell that has no numbers: refused by admission, stopped at the wall, out of time, or cut."""
    return Cell(k=k, b=b, row=CellRow(context), status=status, reason=reason, noisy=False,
                requests=Requests(completed=0, errors=0))


# ---- how a cell's per-second figures are timed ------------------------------------------------------------
@dataclass
class Timed:
    """A cell's per-second figures, and the records, windows and seconds its batch steps are counted over."""

    per_rep: list[float]  # aggregate tok/s of each rep (the CV is over these)
    throughput: float | None
    concurrency: float | None
    goodput_s: float | None  # the seconds goodput is per
    batch: tuple[list[RequestRecord], list[tuple[int, int]] | None, float] | None  # (ok records, windows or None
    # for all, seconds); None: no span
    note: TimingNote | None = None  # how it was timed


class PerRep:
    """A bench cell or a --find level (docs/design/metrics.md): each rep's tokens ÷ its span, first scheduled → last
    done, meaned over the reps; achieved concurrency likewise; goodput per second of the reps' spans summed;
    batch steps over the cell's span."""

    def time(self, records: Sequence[RequestRecord]) -> Timed:
        reps = sorted({r.rep for r in records})
        per_rep = [x for x in (M.output_throughput([r for r in records if r.rep == rep]) for rep in reps)
                   if x is not None]
        conc = [c for c in (_achieved([r for r in records if r.rep == rep]) for rep in reps) if c is not None]
        spans = [M.run_span_ns([r for r in records if r.rep == rep]) for rep in reps]
        good = M.ok(records)
        span = M.run_span_ns(good)
        return Timed(per_rep, M.mean(per_rep), M.mean(conc), sum((e - a) / 1e9 for a, e in (x for x in spans if x)),
                     (good, None, (span[1] - span[0]) / 1e9) if good and span and span[1] > span[0] else None)


class Periods:
    """A recording's level (docs/design/concurrency.md): over the level's own periods [a, b), so a level left and visited
    again, or a pause, never stretches its span: tokens inside them ÷ their length; busy time inside them ÷
    their length; batch steps inside them (every record's: a request of the level before may still decode)."""

    def __init__(self, spans: Sequence[tuple[int, int]], all_records: Sequence[RequestRecord]):
        self.spans, self.all = list(spans), all_records

    def time(self, records: Sequence[RequestRecord]) -> Timed:
        own = PerRep().time(records)
        secs = sum(e - a for a, e in self.spans) / 1e9
        if secs <= 0:
            return own
        tps = sum(M.tokens_in_window(self.all, a, e) for a, e in self.spans) / secs
        busy = sum((M.achieved_concurrency(self.all, a, e) or 0.0) * (e - a) for a, e in self.spans)
        return Timed([tps], tps, busy / (secs * 1e9), secs, (M.ok(self.all), self.spans, secs),
                     TimingNote(periods=[[a, e] for a, e in self.spans], seconds=secs,
                                throughput_rule="tokens inside this level's periods ÷ their length"))


class Clients:
    """Several clients' runs of one cell (`report --combine`): each client's throughput and concurrency over its
    own span, summed (their clocks are never compared); request figures over every client's requests pooled."""

    def __init__(self, throughput: Sequence[float | None], concurrency: Sequence[float | None]):
        self.tps, self.conc = list(throughput), list(concurrency)

    def time(self, records: Sequence[RequestRecord]) -> Timed:
        own = PerRep().time(records)
        # (all() holds: every value is set, the filters are for the type checker)
        tps = sum(t for t in self.tps if t) if all(self.tps) else None
        tokens = sum(r.output_tokens for r in M.ok(records))
        # goodput per second of the span that gives the summed throughput (tokens ÷ Σ tok/s)
        return Timed([], tps, sum(c for c in self.conc if c) if all(self.conc) else None,
                     tokens / tps if tps and tokens else None, own.batch,
                     TimingNote(clients=len(self.tps), clients_throughput=self.tps,
                                throughput_rule="Σ over clients of each client's output tokens ÷ its own span"))


def _achieved(records: Sequence[RequestRecord]) -> float | None:
    span = M.run_span_ns(records)
    return M.achieved_concurrency(records, span[0], span[1] + 1) if span else None


Timing = PerRep | Periods | Clients


# ---- the cell's figures from its records --------------------------------------------------------------------
def _measure(records: Sequence[RequestRecord], spec: Spec, timing: Timing) -> Cell:
    from measure.core.arrivals import client_wait_figures, lateness_figures
    from measure.core.sessions import prefix_cache_label, ttft_by_turn

    t = timing.time(records)
    cv = M.cv(t.per_rep)
    req = _requests(records, spec)
    kwb = M.kwb_tpot(spec.k, spec.weight_bytes, spec.bandwidth_gbps, spec.mode, spec.endpoint_gbps)
    pred = CellPrediction("K·W/β" if kwb else None, None if kwb is None else kwb * 1e3)
    served = min((r.k for r in records), default=spec.k)  # below K: a worker died mid-cell
    late = lateness_figures(records)
    wait: ClientWait = client_wait_figures(records) if is_remote(spec.mode) else {}
    procs = {(r.extra or {}).get("proc") for r in records} - {None}  # sent through a pool of processes
    load = LoadGen(Dist(p50=late["lateness_p50_ms"], p99=late["lateness_p99_ms"], max=late["lateness_max_ms"]),
                   late["behind_schedule"], late["arrival_rps"], wait.get("client_waited"),
                   Dist(p50=wait.get("client_wait_p50_ms"), p99=wait.get("client_wait_p99_ms"),
                        max=wait.get("client_wait_max_ms")), len(procs) if procs and is_remote(spec.mode) else None)
    turns = ttft_by_turn(records)  # multi-turn sessions: TTFT by turn, labelled with the prefix cache
    cell = Cell(k=spec.k, b=spec.b, reps=len({r.rep for r in records}), mode=spec.mode,
                status="ok" if req.completed else "failed", achieved_concurrency=t.concurrency,
                output_throughput=t.throughput, output_throughput_per_rep=t.per_rep, cv=cv, noisy=M.is_noisy(cv),
                requests=req, bandwidth=_bandwidth(records, t, spec, req.tpot.p50), prediction=pred, load=load,
                turns=Turns(ttft_by_turn=turns, prefix_cache=prefix_cache_label(records)) if turns else Turns(),
                server=_server(records) if is_remote(spec.mode) else Server(),
                machine=CellMachine(M.rss_sum_bytes(records) / 1e9, served if served < spec.k else None),
                timing=t.note or TimingNote())
    if spec.cost is not None and (spec.cost.set or spec.watts is not None):
        from measure.core.cost import joules_per_token

        cell.cost = CostFigures(spec.watts, joules_per_token(spec.watts, cell.output_throughput),
                                spec.cost.usd_per_mtok(cell.output_throughput, spec.watts))
    if spec.slo is not None:
        g = M.goodput(records, spec.slo, t.goodput_s) if t.goodput_s is not None else None
        cell.goodput = CellGoodput(spec.slo.describe(), g.rps if g else None, g.tps if g else None,
                               g.attainment if g else None)
    if spec.roofline is not None:
        cell.prediction = _predicted(records, spec, cell) or pred
    return cell


def _requests(records: Sequence[RequestRecord], spec: Spec) -> Requests:
    s = M.summarize(records)
    tpot_ms = s["median_tpot_ms"]
    classes = ttft_by_class(records)
    return Requests(
        s["completed"], s["errors"], s["total_output_tokens"],
        Dist(s["mean_ttft_ms"], s["median_ttft_ms"], s["p90_ttft_ms"], s["p99_ttft_ms"]),
        Dist(p50=s["median_ttft_engine_ms"], p99=s["p99_ttft_engine_ms"]), Dist(p50=s["median_queue_wait_ms"]),
        Dist(p50=s["median_ttfat_ms"], p99=s["p99_ttfat_ms"]), s["reasoning_tokens"],
        Dist(s["mean_tpot_ms"], s["median_tpot_ms"], s["p90_tpot_ms"], s["p99_tpot_ms"]),
        Dist(p50=s["median_itl_ms"], p99=s["p99_itl_ms"]), Dist(p50=s["median_e2el_ms"], p99=s["p99_e2el_ms"]),
        per_stream_tps=1000.0 / tpot_ms if tpot_ms else None,
        stopped_early=M.stopped_early(records, spec.max_tokens) if spec.ignore_eos else None,
        ttft_by_class=classes if len(classes) > 1 else None)


def _server(records: Sequence[RequestRecord]) -> Server:
    from measure.core.server_cache import cache_figures

    return Server(server_check(records) or None, **cache_figures(records))


def _mean(values: Sequence[float]) -> float:
    """The mean of values that are there (each caller's list is non-empty)."""
    m = M.mean(values)
    assert m is not None
    return m


def _pct(values: Sequence[float], p: float) -> float:
    """A percentile of values that are there (each caller's list is non-empty)."""
    v = M.percentile(values, p)
    assert v is not None
    return v


def prediction_error(pred: float, meas: float | None) -> float | None:
    """A cell's prediction error: (predicted − measured) ÷ measured; None where nothing was measured."""
    return (pred - meas) / meas if meas else None


def _predicted(records: Sequence[RequestRecord], spec: Spec, cell: Cell) -> CellPrediction | None:
    """The roofline's TPOT and tok/s for this cell, and the error of each against the measurement."""
    assert spec.roofline is not None
    good = M.ok(records)
    prompts = [r.prompt_tokens for r in good if r.prompt_tokens]
    out_tokens = spec.max_tokens or (round(_mean([r.output_tokens for r in good])) if good else 128)
    p = spec.roofline.level(spec.mode, spec.k, spec.b, spec.threads, round(_mean(prompts)) if prompts else 32,
                            out_tokens)
    if p is None:
        return None
    return CellPrediction("roofline", p.tpot_s * 1e3, p.aggregate_tps, p.binding,
                          prediction_error(p.tpot_s * 1e3, cell.requests.tpot.p50),
                          prediction_error(p.aggregate_tps, cell.output_throughput),
                          p.caveat() if p.oversubscribed else None)


def endpoint_figures(records: Sequence[RequestRecord], weight_bytes: int = 0,
                     served: WorkModel | None = None) -> list[EndpointFigures]:
    """Per endpoint of an HTTP run over several (records' worker = the endpoint): its requests, errors,
    output tok/s over the cell's span, TTFT and TPOT p50, and its bandwidth product W ÷ TPOT p50 (one weight
    read per server step, all its streams in it: metrics.http_bandwidth; where the served model's work is known,
    what a step's tokens read: metrics.http_read_bandwidth) where W is known. [] for one endpoint."""
    groups: dict[int | None, list[RequestRecord]] = {}
    for r in records:
        groups.setdefault(r.worker, []).append(r)
    if len(groups) < 2:
        return []
    span = M.run_span_ns(records)
    secs = (span[1] - span[0]) / 1e9 if span and span[1] > span[0] else None
    out: list[EndpointFigures] = []
    for wid, recs in sorted(groups.items(), key=lambda x: (x[0] is None, x[0] or 0)):
        s = M.summarize(recs)
        tp = s["median_tpot_ms"]
        ex = recs[0].extra or {}
        tps = s["total_output_tokens"] / secs if secs else None
        out.append({"endpoint": ex.get("endpoint", str(wid)), "url": ex.get("url"), "requests": len(recs),
                    "errors": s["errors"], "output_throughput": tps,
                    "median_ttft_ms": s["median_ttft_ms"], "median_tpot_ms": tp,
                    "bandwidth_gbps": (M.http_read_bandwidth(served, [(_s(tp), tps)]) if served else
                                       M.http_bandwidth(weight_bytes, [_s(tp)])).gbps})
    return out


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def _bandwidth(records: Sequence[RequestRecord], timed: Timed, spec: Spec, tpot_ms: float | None) -> CellBandwidth:
    """The bandwidth product (docs/design/metrics.md), from the cell's own figures: instances from its timed
    throughput, batch from the steps inside its timed span, http from each endpoint's TPOT p50."""
    mode, weight_bytes = spec.mode, spec.weight_bytes
    if is_remote(mode):
        eps = endpoint_figures(records, weight_bytes, spec.served)
        # one server: the cell's TPOT p50 is its streams' (one step serves all of them)
        if spec.served is not None:  # what a step's tokens read (an MoE: its experts), not the file
            bw = M.http_read_bandwidth(spec.served, [(_s(e["median_tpot_ms"]), e["output_throughput"]) for e in eps]
                                       if eps else [(_s(tpot_ms), timed.throughput)])
        else:
            bw = M.http_bandwidth(weight_bytes, [_s(e["median_tpot_ms"]) for e in eps] if eps else [_s(tpot_ms)])
        return CellBandwidth(bw.gbps, bw.formula, eps or None)
    work = spec.roofline.work if spec.roofline is not None else None  # the bytes a token reads (docs/design/model-reads.md), where known
    if mode != "batch":
        bw = (M.read_bandwidth(mode, work, agg_tps=timed.throughput) if work is not None
              else M.bandwidth_product(mode, weight_bytes, agg_tps=timed.throughput))
        return CellBandwidth(bw.gbps, bw.formula)
    if timed.batch is None:  # no request decoded over a span
        return CellBandwidth(None, M.bandwidth_product(mode, weight_bytes).formula)
    good, windows, secs = timed.batch
    steps, kv = M.batch_reads(good, windows, spec.kv_bytes_per_token)
    kv_per_s = None if kv is None else kv / secs
    bw = (M.read_bandwidth(mode, work, agg_tps=timed.throughput, steps_per_s=[steps / secs], kv_read_bps=kv_per_s)
          if work is not None and timed.throughput else
          M.bandwidth_product(mode, weight_bytes, steps_per_s=[steps / secs], kv_read_bps=kv_per_s))
    return CellBandwidth(bw.gbps, bw.formula, None, steps / secs, None if kv_per_s is None else kv_per_s / 1e9)


def request_class(prompt_id: str) -> str:
    return "long" if prompt_id.startswith("long-") else "short"


def ttft_by_class(records: Sequence[RequestRecord]) -> dict[str, ClassTTFT]:
    """Queue-inclusive TTFT p50/p99 (ms) per request class: long documents vs short prompts."""
    groups: dict[str, list[float]] = {}
    for r in M.ok(records):
        groups.setdefault(request_class(r.prompt_id), []).append(M.ttft(r))
    return {c: {"n": len(v), "median_ttft_ms": _pct(v, 50) * 1e3, "p99_ttft_ms": _pct(v, 99) * 1e3}
            for c, v in sorted(groups.items())}


def add_scaling(cells: list[Cell]) -> None:
    """scaling = output_throughput ÷ that of K=1 at the same B (None where K=1 was not run); each context row
    scales against its own K=1, B=1."""
    base_k = {(c.context, c.b): c.output_throughput for c in cells if c.k == 1 and c.output_throughput}
    base_b = {(c.context, c.k): c.output_throughput for c in cells if c.b == 1 and c.output_throughput}
    for c in cells:
        ref_k, ref_b = base_k.get((c.context, c.b)), base_b.get((c.context, c.k))
        c.scaling = Scaling(c.output_throughput / ref_k if ref_k and c.output_throughput else None,
                            c.output_throughput / ref_b if ref_b and c.output_throughput else None)


def write_summary(out_dir: Path, cells: list[Cell]) -> None:
    """summary.json: a list of cells (vLLM's field names where they exist); summary.csv: the same, flat."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [c.to_json() for c in cells]
    (out_dir / "summary.json").write_text(json.dumps(rows, indent=2))
    cols = [k for k in rows[0] if not isinstance(rows[0][k], list)] if rows else []
    with (out_dir / "summary.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for c in rows:
            w.writerow(c)


# ---- the cell's notes, in words (the bench table's and the report's) ---------------------------------------
def fmt(v: float | None, spec: str = ".1f", none: str = "—") -> str:
    return none if v is None else format(v, spec)


def prediction_text(c: Cell) -> str:
    """The roofline's TPOT and tok/s, each with its error ("—" without a roofline prediction)."""
    p = c.prediction
    if p.by != "roofline":
        return "—"
    e1, e2 = p.error_tpot, p.error_output_throughput
    return (f"{p.tpot_ms:.1f}ms{'' if e1 is None else f' {e1:+.0%}'} "
            f"{p.output_throughput:.0f}{'' if e2 is None else f' {e2:+.0%}'}")


def answer_notes(c: Cell) -> str:
    """A cell's notes on what its answers were: answers that ended before max_tokens although EOS was to be
    ignored; a reasoning model's time to the first answer token beside TTFT (TTFT is to its first thinking
    token)."""
    note, r = "", c.requests
    if r.stopped_early:
        note += (f" STOPPED EARLY {r.stopped_early}/{'?' if r.completed is None else r.completed} (answers ended "
                 "before max_tokens although ignore_eos was sent: does the server honour it?)")
    if r.reasoning_tokens:
        note += (f" TTFAT p50/p99 {fmt(r.ttfat.p50, '.0f')}/{M.p99_mark(r.completed)}{fmt(r.ttfat.p99, '.0f')} ms"
                 f" (first answer token; {r.reasoning_tokens} reasoning tokens counted)")
    return note


def client_note(c: Cell) -> str:
    """HTTP: requests that waited for a free client stream (the client's own queue, inside their TTFT). Its p99
    rests on the requests that waited: fewer than P99_MIN_N of them mark it ≈, however many completed."""
    if not c.load.client_waited:
        return ""
    w = c.load.client_wait
    return (f" CLIENT QUEUE: {c.load.client_waited} requests waited for a free stream, p50/p99 "
            f"{fmt(w.p50, '.0f')}/{M.p99_mark(c.load.client_waited)}{fmt(w.p99, '.0f')} ms "
            "(inside their TTFT: the client's queue, not the server's; a larger --b, or no --b with an open loop)")


__all__ = ["Cell", "Spec", "Dist", "Requests", "CellBandwidth", "CellPrediction", "LoadGen", "Turns", "Server",
           "CostFigures", "CellGoodput", "CellMachine", "CellRow", "Scaling", "KneeLevel", "TimingNote", "KEYS",
           "as_cell", "skipped", "Timed", "PerRep", "Periods", "Clients", "Timing", "endpoint_figures", "ttft_by_class",
           "ClassTTFT", "EndpointFigures",
           "add_scaling", "fmt", "prediction_error", "prediction_text", "answer_notes", "client_note", "write_summary"]
