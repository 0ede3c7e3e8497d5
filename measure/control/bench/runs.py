"""The runs a report reads: a bench output folder (its summary.json, or cells from its records) or a dashboard
recording, read into one Run of cells; several clients' runs of one load combined into one (`report
--combine`). The report draws and writes them (control/bench/report.py)."""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from measure.core import metrics as M
from measure.core.lines import ClockCheck, EventLine, RunHeader, Sample
from measure.core.work import WorkModel, work_from_dict
from measure.machine.recorder import read_jsonl
from measure.core.records import RequestRecord, shifted
from measure.control.bench.cell import Cell, Clients, Periods, Spec, TimingNote, add_scaling, as_cell
from measure.control.bench.knee import KneeResult

if TYPE_CHECKING:
    from presets import SLO


class ReportError(ValueError):
    """An input the report cannot use: one line saying why."""


@dataclass(frozen=True)
class ClientStart:
    """A client asked to --start-at, in a combined run: how late its first request went out, and its clock
    against the server's."""

    client: str
    start_at_unix: float
    first_sent_late_ms: float | None
    clock_offset_s: float | None
    clock_bound_s: float | None
    clock_why: str | None


@dataclass(frozen=True)
class Combined:
    """What `combine` made a run of: the clients' runs, the segments of one schedule they were (None: not
    segments), and each client's start."""

    runs: list[str]
    segments: str | None
    clients_start: list[ClientStart]


class LevelKey(NamedTuple):
    """A cell's level, as the clients' runs are matched by: K, B and the mode."""

    k: int | None
    b: int | None
    mode: str | None


@dataclass
class Run:
    name: str
    header: RunHeader
    cells: list[Cell]
    samples: list[Sample] = field(default_factory=list)
    events: list[EventLine] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    records: list[RequestRecord] = field(default_factory=list)  # combine pools them
    knee: KneeResult | None = None  # bench --find's answer (its knee.json)
    combined: Combined | None = None  # combine's

    def __post_init__(self) -> None:
        self.cells = [as_cell(c) for c in self.cells]

    @property
    def beta(self) -> float | None:
        return self.header.bandwidth_gbps

    @property
    def weight_bytes(self) -> int:
        return self.header.model_bytes or 0


def load_run(path: str | Path) -> Run:
    """A bench output folder (or its summary.json / records.jsonl), or a dashboard recording."""
    import warnings

    p = Path(path)
    if p.is_dir():
        if not (p / "records.jsonl").exists():
            raise ReportError(f"{p} holds no records.jsonl: give a bench --out folder or a recording")
        p = p / "records.jsonl"
    elif p.name == "summary.json":
        p = p.with_name("records.jsonl")
    if not p.exists():
        raise ReportError(f"{path} not found")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            lines = read_jsonl(p)
        except (OSError, ValueError) as exc:
            raise ReportError(f"cannot read {p}: {exc}") from None
    if not lines.headers:
        raise ReportError(f"{p} has no header line: not an inference-top output")
    header = lines.headers[0]  # its fields checked (lines.RunHeader)
    samples, events = lines.samples, lines.events
    summary = p.with_name("summary.json")
    if header.command == "bench" and summary.exists():
        cells = [Cell.from_json(c) for c in json.loads(summary.read_text())]
    else:  # a recording, or a bench run cut short: cells from the records, grouped by (K, B, mode)
        try:
            cells = cells_from_records(lines.records, header, samples, events)
        except M.UnsetTime as exc:
            raise ReportError(f"{p}: {exc}: a damaged record (look at the file's request lines)") from None
    knee = None
    if p.with_name("knee.json").exists():
        try:
            knee = KneeResult.read(p.with_name("knee.json"))
        except ValueError:
            pass  # not one bench --find wrote: the report marks the knee from the cells
    name = p.parent.name if p.name == "records.jsonl" else p.stem
    return Run(f"{name} ({header.engine})", header, cells, samples, events, [str(w.message) for w in caught],
               lines.records, knee)


TOGETHER_S = 60.0  # clients whose runs started further apart than this did not load the servers together


def combine(runs: list[Run]) -> Run:
    """Several clients' runs of the same sweep, started together against the same servers (one inference-top
    per client machine when one client cannot drive them), as one run. Per cell (K, B, mode): throughput and
    achieved concurrency add up (each client's tokens over its own span: their clocks are never compared),
    request counts add up, and TTFT / TPOT / ITL percentiles come from every client's requests pooled
    (each a duration on one machine's clock). A warning says when the runs did not start together or did
    not run the same cells."""
    if len(runs) < 2:
        raise ReportError("--combine needs the outputs of two or more clients")
    if any(c.context for r in runs for c in r.cells):
        raise ReportError("--combine does not handle --contexts rows; combine runs without --contexts")
    warnings = [w for r in runs for w in r.warnings]
    starts = [r.header.started_unix for r in runs]
    asked = [r.header.start_at_unix for r in runs]
    segments, more = _clients_check(runs)
    warnings += more
    # (where no value is None, the lists without the Nones are the lists themselves: the filters are for mypy)
    asked_at, started = [t for t in asked if t is not None], [t for t in starts if t is not None]
    if None not in asked:  # --start-at: every client was asked for one instant (when each was launched is moot)
        if max(asked_at) - min(asked_at) > 0.001:
            warnings.append(f"the clients were asked to start at different times (--start-at {min(asked_at):.3f} … "
                            f"{max(asked_at):.3f}): their sum is not one load")
    elif None in starts:
        warnings.append("a run has no start time (made before this version): cannot check that the clients ran "
                        "together; the sums assume they did")
    elif max(started) - min(started) > TOGETHER_S:
        warnings.append(f"the clients' runs started {max(started) - min(started):.0f} s apart (> {TOGETHER_S:.0f} s):"
                        " they did not load the servers together, so their sum is not one load")
    keys = [{LevelKey(c.k, c.b, c.mode) for c in r.cells if c.ok} for r in runs]
    if any(k != keys[0] for k in keys):
        warnings.append("the clients did not run the same cells: a cell missing from one sums fewer clients "
                        "(see 'clients' per cell)")
    h0 = runs[0].header
    cells = []
    for key in sorted(set().union(*keys)):
        k, b, mode = key
        assert k is not None and b is not None  # an ok cell names its level (Cell.measure sets K and B)
        parts = [(r, c) for r in runs for c in r.cells if (c.k, c.b, c.mode) == key and c.ok]
        one_clock = _one_clock(runs)
        pooled = [shifted(rec, one_clock[r.name]) if one_clock else rec
                  for r, _ in parts for rec in r.records if (rec.k, rec.b, rec.mode) == key]
        timing = (None if one_clock else
                  Clients([p.output_throughput for _, p in parts], [p.achieved_concurrency for _, p in parts]))
        c = Cell.measure(pooled, Spec(k, b, h0.model_bytes or 0, h0.bandwidth_gbps, mode or "instances",
                                      endpoint_gbps=endpoint_gbps(h0), slo=slo_of(h0),
                                      max_tokens=h0.max_tokens, ignore_eos=h0.ignore_eos, served=served_of(h0)),
                         timing)
        if one_clock:
            c.timing = TimingNote(clients=len(parts), throughput_rule="every client's requests pooled on one clock "
                                  "(each client's times from its --start-at), tokens ÷ first scheduled → last done")
        c.load = replace(c.load, arrival_rps=_arrival_rps(parts, key, segments),
                         arrivals=parts[0][1].load.arrivals or c.load.arrivals)
        c.timing = replace(c.timing, segments=segments or None)
        cells.append(c)
    add_scaling(cells)
    return Run(f"{len(runs)} clients combined ({', '.join(r.name for r in runs)})", h0, cells,
               warnings=warnings, records=[rec for r in runs for rec in r.records],
               combined=Combined([r.name for r in runs], segments, _clients_start(runs)))


def slo_of(header: RunHeader) -> SLO | None:
    """The SLO a run was measured under, read back from its header's description ("interactive: TTFT ≤ 450 ms,
    TPOT ≤ 40 ms"); None where it had none or the text is not one this version wrote."""
    from presets import SLO

    text = header.slo
    if text is None or ": " not in text:
        return None
    key, _, rest = text.partition(": ")
    bounds: dict[str, float] = {}
    for part in rest.split(", "):
        name, _, value = part.partition(" ≤ ")
        if name not in ("TTFT", "TPOT", "E2E") or not value.endswith(" ms"):
            return None
        try:
            bounds[name.lower() + "_s"] = float(value[:-3]) / 1e3
        except ValueError:
            return None
    return SLO(key, key, **bounds)


def _one_clock(runs: list[Run]) -> dict[str, int] | None:
    """Each client's shift onto one clock (ns to add to its records' times), where every client was asked to
    --start-at and recorded where that instant fell on its own clock: its times then count from the one instant
    all were asked for. None where some client lacks it (their clocks cannot be compared)."""
    out = {}
    for r in runs:
        h = r.header
        if h.start_perf_ns is None or h.start_at_unix is None:
            return None
        out[r.name] = round(h.start_at_unix * 1e9) - h.start_perf_ns
    return out


def _clients_check(runs: list[Run]) -> tuple[str | None, list[str]]:
    """Segments (bench --segment i/N) of one schedule: every share there exactly once, of one schedule; and the
    clients' clocks against the server's. ("1/2 + 2/2" or None, warnings)."""
    from collections import Counter

    from measure.core.clients import CLOCK_WARN_S

    warnings = []
    checks = [(r.name, c.offset_s, c.bound_s or 0.0) for r in runs
              if (c := r.header.clock_check) is not None and c.offset_s is not None]
    if len(checks) > 1:
        lo, hi = min(checks, key=lambda x: x[1]), max(checks, key=lambda x: x[1])
        if hi[1] - lo[1] - (hi[2] + lo[2]) > CLOCK_WARN_S:
            warnings.append(f"the clients' clocks differ by {(hi[1] - lo[1]) * 1e3:.0f} ms (each against the server's "
                            f"Date): {lo[0]} and {hi[0]} started that far apart at --start-at")
    segs = [r.header.segment for r in runs]
    if not any(segs):
        return None, warnings
    if not all(segs):
        warnings.append("some runs are segments of a schedule (--segment) and some are not: their sum is not one load")
        return None, warnings
    shares = [s for s in segs if s]  # every one (all() above): [i, n] of a run's --segment i/n
    n = shares[0][1]
    if any(s[1] != n for s in shares):
        warnings.append("the segments split their schedules in different ways "
                        f"({', '.join(f'{i}/{m}' for i, m in shares)})")
    seen = Counter(i for i, _ in shares)
    for i in range(1, n + 1):
        if not seen[i]:
            warnings.append(f"segment {i}/{n} is missing: the combined load is not the whole schedule")
        elif seen[i] > 1:
            warnings.append(f"segment {i}/{n} is there {seen[i]} times: its requests are counted {seen[i]} times")
    if len({(r.header.arrivals, r.header.seed, r.header.requests, r.header.workload) for r in runs}) > 1:
        warnings.append("the segments are of different schedules (their arrivals, seed, requests or workload differ)")
    return " + ".join(f"{i}/{m}" for i, m in sorted(shares)), warnings


def _arrival_rps(parts: list[tuple[Run, Cell]], key: LevelKey, segments: str | None) -> float | None:
    """The rate the clients offered together: segments of one schedule, anchored at their --start-at, put back on
    the schedule's own clock (each scheduled time − its client's time zero) give the schedule's rate; else each
    client offered its own, and the rates add (their clocks are never compared)."""
    from measure.core.arrivals import realised_rate

    starts = [(r, r.header.start_perf_ns) for r, _ in parts]
    if segments and all(t0 is not None for _, t0 in starts):
        times = sorted(rec.t_scheduled_ns - (t0 or 0) for r, t0 in starts for rec in r.records
                       if (rec.k, rec.b, rec.mode) == key)
        return realised_rate(times)
    rates = [p.load.arrival_rps for _, p in parts]
    return sum(x for x in rates if x is not None) if rates and None not in rates else None  # (a filter for mypy)


def _clients_start(runs: list[Run]) -> list[ClientStart]:
    """Per client asked to --start-at: how late its first request went out, and its clock against the server's."""
    from measure.core.clients import start_lateness_ms

    out = []
    for r in runs:
        h = r.header
        if h.start_at_unix is None:
            continue
        c = h.clock_check or ClockCheck()
        out.append(ClientStart(r.name, h.start_at_unix, start_lateness_ms(h.start_perf_ns, h.arrivals, r.records),
                               c.offset_s, c.bound_s, c.why))
    return out


def _level_key(label: str) -> tuple[int, int, str] | None:
    """A `level` event's label, "K=2 B=1 instances", as (K, B, mode); None where it is not one."""
    parts = label.split()
    try:
        if len(parts) == 3 and parts[0].startswith("K=") and parts[1].startswith("B="):
            return int(parts[0][2:]), int(parts[1][2:]), parts[2]
    except ValueError:
        pass
    return None


def level_periods(samples: Sequence[Sample], events: Sequence[EventLine] = ()
                  ) -> dict[tuple[int, int, str], list[tuple[int, int]]]:
    """(K, B, mode) → its contiguous periods [start, end) in ns, from a recording's samples; paused time
    belongs to no level. A level visited twice has two periods, each timed on its own. Where the recording has
    `level` events (a level begins when its workers are ready, docs/design/steps.md), a level runs from its event
    to the next one: the samples' K and B are the ones asked at the key press, and until the new workers were
    ready the level before went on (timing from the key press put the warmup's seconds, served by the old K,
    into the new level's span). Without such events, the samples' K, B and mode say the level."""
    ordered = sorted(samples, key=lambda s: s.t_ns)
    changes = sorted((e.t_ns, key) for e in events if e.type == "level" and (key := _level_key(e.text)) is not None)
    # the timeline: each sample (pause state; without level events, its K, B, mode), and each level's start
    points: list[tuple[int, int, Sample | tuple[int, int, str]]] = [(s.t_ns, 1, s) for s in ordered]
    points += [(t, 0, k) for t, k in changes]
    points.sort(key=lambda p: (p[0], p[1]))
    out: dict[tuple[int, int, str], list[tuple[int, int]]] = {}
    level: tuple[int, int, str] | None = None
    paused = False
    run_key: tuple[int, int, str] | None = None
    run_start = 0  # read only once run_key is set, with it
    for t, _, what in points:
        if not isinstance(what, Sample):
            level = what
        else:
            paused = what.paused
            if level is None or not changes:  # the first level (it has no event), or no events at all
                level = (what.k, what.b, what.mode)
        key = None if paused else level
        if key != run_key:
            if run_key is not None:
                out.setdefault(run_key, []).append((run_start, t))
            run_key, run_start = key, t
    if run_key is not None and ordered and ordered[-1].t_ns > run_start:
        out.setdefault(run_key, []).append((run_start, ordered[-1].t_ns))
    return out


def served_of(header: RunHeader) -> WorkModel | None:
    """HTTP: the served model's work the run counted its bandwidth product with (--model-bytes its config.json
    or GGUF), so a report gives what the run gave; None where the header has none."""
    if not header.served:
        return None
    try:
        return work_from_dict(header.served)
    except ValueError as exc:
        raise ReportError(f"the header's served model: {exc}") from None


def endpoint_gbps(header: RunHeader) -> list[float | None] | None:
    """HTTP: each endpoint's β as the header lists them (a header from before many endpoints: its one β)."""
    eps = header.endpoints
    return [e.bandwidth_gbps for e in eps] if eps else None


def cells_from_records(records: Sequence[RequestRecord], header: RunHeader,
                       samples: Sequence[Sample], events: Sequence[EventLine] = ()) -> list[Cell]:
    """One cell per (K, B, mode) that served requests (records say which level served them). With a
    recording's samples, every per-second figure is over that level's own periods (cell.Periods), so a level
    left and visited again, or a pause, never stretches its span: aggregate tok/s = tokens inside the periods
    ÷ their length; achieved concurrency = Σ busy time inside them ÷ their length; batch mode's bandwidth =
    the steps inside them ÷ their length × W. HTTP's bandwidth (W ÷ TPOT p50 per endpoint, summed) has no
    span in it: it is the sweep's, as the bench and the dashboard showed it."""
    groups: dict[tuple[int, int, str], list[RequestRecord]] = {}
    for r in records:
        groups.setdefault((r.k, r.b, r.mode), []).append(r)
    periods = level_periods(samples, events) if samples else {}
    w = header.model_bytes or 0
    cells = []
    for (k, b, mode), recs in sorted(groups.items()):
        spans = periods.get((k, b, mode))
        c = Cell.measure(recs, Spec(k, b, w, header.bandwidth_gbps, mode, header.kv_bytes_per_token,
                                    endpoint_gbps=endpoint_gbps(header), max_tokens=header.max_tokens,
                                    ignore_eos=header.ignore_eos, served=served_of(header)),
                         Periods(spans, records) if spans else None)
        c.timing = replace(c.timing, span_ns=M.run_span_ns(recs))
        cells.append(c)
    add_scaling(cells)
    return cells


__all__ = ["Run", "Combined", "ClientStart", "ReportError", "load_run", "combine", "cells_from_records", "level_periods", "endpoint_gbps"]
