"""The bench cell: one level's figures, as summary.json holds them (docs/design.md §4, §14 "cell").

A cell is made by one function, `sweep.cell_summary`, from its records and a `Timing` that says how its
per-second figures are timed: per rep (a bench cell, a `--find` level), over a recording's level periods
(`report`), or summed over clients (`report --combine`). Every figure derived from another — the bandwidth
product from the throughput, J/token and $/Mtok from the watts and the throughput, the CV from the reps, the
predicted throughput's error — is derived there, once, so the table, the report and the knee cannot read two
numbers for one thing.

Its JSON (`to_dict`) lists the figures in the order they were set, which is the order summary.json has always
had; a figure never set is not in it (an HTTP cell has no `steps_per_s`, a cell without --slo no goodput), and
reading it as an attribute gives None. `Cell.from_dict` reads a summary.json cell back; keys this version
does not name are kept, in place, in `extra`. `cell["key"]` and `cell.get("key")` read the JSON's view (for
tests and scripts that read cells as summary.json).
"""
from __future__ import annotations

from collections.abc import Iterator, KeysView, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from measure.core import metrics as M
from measure.core.records import RequestRecord


@dataclass(init=False)
class Cell:
    if TYPE_CHECKING:  # (not a field: set in __init__) the figures set, in the order set; a dict as an ordered set
        _keys: dict[str, None]
    # which level
    k: int | None = None
    b: int | None = None
    reps: int | None = None
    # per-second figures, timed by the cell's Timing
    achieved_concurrency: float | None = None  # Little's law (§6)
    output_throughput: float | None = None  # aggregate tok/s (§4)
    output_throughput_per_rep: list[float] | None = None
    # request figures (metrics.summarize; every rep pooled)
    completed: int | None = None
    errors: int | None = None
    total_output_tokens: int | None = None
    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    p90_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    median_ttft_engine_ms: float | None = None
    p99_ttft_engine_ms: float | None = None
    median_queue_wait_ms: float | None = None
    median_ttfat_ms: float | None = None
    p99_ttfat_ms: float | None = None
    reasoning_tokens: int | None = None
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    p90_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    median_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    median_e2el_ms: float | None = None
    p99_e2el_ms: float | None = None
    per_stream_tps: float | None = None  # 1 ÷ TPOT p50
    rss_gb_sum: float | None = None  # decimal GB (docs/design.md §12's exception)
    # the bandwidth product (§4) and what made it
    bandwidth_gbps: float | None = None
    bandwidth_formula: str | None = None
    endpoints: list[dict[str, Any]] | None = None  # http, several endpoints: one per endpoint (sweep.endpoint_figures)
    steps_per_s: float | None = None  # batch
    kv_read_gbps: float | None = None  # batch, the KV size known
    mode: str | None = None
    predicted_tpot_ms: float | None = None
    cv: float | None = None  # over the reps' throughput
    noisy: bool | None = None
    status: str | None = None  # ok | failed | refused | wall | timeout | cut
    k_served_min: int | None = None  # a worker died mid-cell
    ttft_by_class: dict[str, Any] | None = None
    predicted_by: str | None = None  # roofline | K·W/β | None
    # the load generator (core/arrivals.lateness_figures)
    lateness_p50_ms: float | None = None
    lateness_p99_ms: float | None = None
    lateness_max_ms: float | None = None
    behind_schedule: bool | None = None
    arrival_rps: float | None = None
    # http: requests that were due while every client stream was busy, and how long they waited in the client
    # (arrivals.client_wait_figures), only where some did: the client's queue, not the server's
    client_waited: int | None = None
    client_procs: int | None = None  # http: the client processes whose streams sent this cell's requests (a pool)
    client_wait_p50_ms: float | None = None
    client_wait_p99_ms: float | None = None
    client_wait_max_ms: float | None = None
    # multi-turn sessions (core/sessions.py)
    ttft_by_turn: dict[str, Any] | None = None
    prefix_cache: str | None = None
    stopped_early: int | None = None  # with EOS ignored
    server_check: dict[str, Any] | None = None  # http: the server's own figures beside the client's
    # http: the server's prefix cache, speculative decoding and KV use (core/server_cache.py), where given
    prefix_cache_hit_rate: float | None = None
    prefix_cache_tokens: float | None = None
    prefix_cache_source: str | None = None
    spec_acceptance_rate: float | None = None
    spec_draft_tokens: float | None = None
    spec_source: str | None = None
    spec_mean_acceptance_length: float | None = None
    kv_cache_usage_max: float | None = None
    # cost (--watts, --price-per-hour …)
    watts: float | None = None
    joules_per_token: float | None = None
    usd_per_mtok: float | None = None
    # goodput (--slo, §7)
    slo: str | None = None
    goodput_rps: float | None = None
    goodput_tps: float | None = None
    slo_attainment: float | None = None
    # the roofline's prediction and its errors
    predicted_output_throughput: float | None = None
    binding: str | None = None
    error_tpot: float | None = None
    error_output_throughput: float | None = None
    prediction_caveat: str | None = None  # where the prediction does not hold (K × threads > cores), else unset
    # the sweep's row and what ran it
    context: int | None = None
    reason: str | None = None  # a cell without numbers: why
    power_source: str | None = None
    arrivals: str | None = None
    sessions: str | None = None
    oom_killed: bool | None = None
    thermal: str | None = None  # the thermal states seen while the cell ran ("nominal → throttled (…)")
    thermal_changed: bool | None = None  # set (True) when the state changed: its figures mix two machines
    # a Mac's energy per rail over the cell (zeus-apple-silicon, docs/design.md §21): readable rails only
    rails_watts: dict[str, float] | None = None
    rails_joules_per_token: dict[str, float] | None = None
    rails_unread: str | None = None  # the rails not read and why ("cpu: frozen: …")
    scaling_vs_k1: float | None = None
    scaling_vs_b1: float | None = None
    # a --find level (knee.py) and its verdict (tui/cli.py)
    level: float | None = None
    users: int | None = None
    span_s: float | None = None
    offered_rps: float | None = None
    arrivals_s: float | None = None
    ttft_trend: float | None = None
    peak_users: int | None = None
    within_slo: bool | None = None
    verdict: str | None = None
    # the report: a recording's level periods, or clients combined
    span_ns: tuple[int, int] | list[int] | None = None
    periods: list[list[int]] | None = None
    seconds: float | None = None
    throughput_rule: str | None = None
    clients: int | None = None
    clients_throughput: list[float | None] | None = None
    segments: str | None = None  # --segment i/N: the schedule's segments combined ("1/2 + 2/2")
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not name, read from another's JSON

    def __init__(self, **figures: Any):
        object.__setattr__(self, "_keys", {})
        for f in FIELDS.values():
            object.__setattr__(self, f.name, {} if f.name == "extra" else None)
        self.update(**figures)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in FIELDS or name == "extra":
            raise AttributeError(f"a cell has no figure {name!r} (cell.py names them; cell[{name!r}] = … keeps "
                                 "one it does not)")
        object.__setattr__(self, name, value)
        self._keys[name] = None

    def update(self, **figures: Any) -> Cell:
        """Set figures in this order (a figure set before keeps its place in the JSON)."""
        for name, value in figures.items():
            setattr(self, name, value)
        return self

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """summary.json's cell: every figure set, in the order set."""
        return {name: self.extra[name] if name in self.extra else getattr(self, name) for name in self._keys}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Cell:
        c = cls()
        for name, value in d.items():
            c[name] = value
        return c

    def copy(self) -> Cell:
        return Cell.from_dict(self.to_dict())

    # ---- the JSON's view ------------------------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        if key not in self._keys:
            raise KeyError(key)
        return self.extra[key] if key in self.extra else getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if key in FIELDS and key != "extra":
            setattr(self, key, value)
        else:
            self.extra[key] = value
            self._keys[key] = None

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self._keys else default

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def keys(self) -> KeysView[str]:
        return self._keys.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)


FIELDS = {f.name: f for f in fields(Cell)}


def as_cell(c: Cell | Mapping[str, Any]) -> Cell:
    """A cell, whether given as one or as summary.json's dict."""
    return c if isinstance(c, Cell) else Cell.from_dict(c)


def skipped(k: int, b: int, context: int | None, status: str, reason: str) -> Cell:
    """A cell that has no numbers: refused by admission, stopped at the wall, out of time, or cut."""
    return Cell(k=k, b=b, context=context, status=status, reason=reason, output_throughput=None, median_tpot_ms=None,
                median_ttft_ms=None, p99_ttft_ms=None, rss_gb_sum=None, bandwidth_gbps=None, cv=None, noisy=False,
                errors=0, completed=0)


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
    notes: dict[str, Any] = field(default_factory=dict)  # how it was timed, set after the cell's own figures


class PerRep:
    """A bench cell or a --find level (docs/design.md §4): each rep's tokens ÷ its span, first scheduled → last
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
    """A recording's level (docs/design.md §6): over the level's own periods [a, b), so a level left and visited
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
                     {"periods": [[a, e] for a, e in self.spans], "seconds": secs,
                      "throughput_rule": "tokens inside this level's periods ÷ their length"})


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
                     {"clients": len(self.tps), "clients_throughput": self.tps,
                      "throughput_rule": "Σ over clients of each client's output tokens ÷ its own span"})


def _achieved(records: Sequence[RequestRecord]) -> float | None:
    span = M.run_span_ns(records)
    return M.achieved_concurrency(records, span[0], span[1] + 1) if span else None


__all__ = ["Cell", "FIELDS", "as_cell", "skipped", "Timed", "PerRep", "Periods", "Clients"]
