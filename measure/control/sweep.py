"""The headless sweep: one fleet, scaled cell by cell, `requests` per rep, raw records + a summary."""
from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from measure.control.cell import Cell, PerRep, skipped
from measure.machine import host
from measure.core import metrics as M
from measure.core.arrivals import client_wait_figures, lateness_figures
from measure.core.cost import joules_per_token
from measure.core.guard import (DEFAULT_OVERHEAD_BYTES, OomKill, admit, engine_footprint, fmt_gib, oom_refusal,
                                overhead_after_oom)
from measure.core.readings import ThermalLog
from measure.machine.probes import SystemProbe, WallCheck, auto_threads
from measure.core.records import MODES, RequestRecord, is_remote
from measure.core.sessions import prefix_cache_label, ttft_by_turn, turn_note
from measure.core.server_cache import cache_figures, cache_note
from measure.core.workload import ClosedLoop, Load, Poisson, closed_loop_users
from measure.sources.base import CellStopped, FiniteLoadSource, LoadSource, SourceError, finite
from presets import Workload

if TYPE_CHECKING:
    from measure.control.cell import Clients, Periods, Timed
    from measure.core.arrivals import ArrivalSpec, Schedule
    from measure.core.clients import ClientShare, Segment
    from measure.core.cost import Cost
    from measure.core.guard import Footprint
    from measure.core.roofline import Roofline
    from measure.core.sessions import Sessions, SessionSpec
    from presets import SLO


@dataclass
class SweepConfig:
    ks: Sequence[int] = (1,)
    bs: Sequence[int] = (1,)
    requests: int = 16
    max_tokens: int = 256
    reps: int = 1
    rate: float | None = None
    ignore_eos: bool = True
    mode: str = "instances"
    kv_bytes_per_token: float | None = None
    contexts: Sequence[int] | None = None  # rows: a synthetic prompt of context − max_tokens tokens
    ctx: int = 2048
    memory_budget: int | None = None
    force: bool = False
    overhead_bytes: int = DEFAULT_OVERHEAD_BYTES
    bandwidth_gbps: float | None = None
    roofline: Roofline | None = None  # predicted columns and their errors
    slo: SLO | None = None  # goodput per cell
    cost: Cost | None = None  # $/Mtok per cell
    arrivals: ArrivalSpec | None = None  # each rep's open-loop schedule (else rate / users)
    sessions: SessionSpec | None = None  # the users hold multi-turn sessions (--turns)
    client: ClientShare | None = None  # --segment / --start-at, applied to the first load
    users: int | None = None  # closed-loop users in every cell (None: K × B, workload.closed_loop_users)
    max_b: int = 16  # sequences one engine batches at most (bench --find users)
    current: tuple[int, int, int | None] | None = None  # (k, b, context) of the cell running now
    threads: int | None = None  # per worker (None: physical cores ÷ K)
    cell_timeout_s: float = 1800.0
    out_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def cell_summary(records: Sequence[RequestRecord], k: int, b: int, weight_bytes: int,
                 bandwidth_gbps: float | None = None, mode: str = "instances",
                 kv_bytes_per_token: float | None = None, roofline: Roofline | None = None,
                 threads: int | None = None, max_tokens: int | None = None, slo: SLO | None = None,
                 cost: Cost | None = None, watts: float | None = None,
                 endpoint_gbps: Sequence[float | None] | None = None, ignore_eos: bool = False,
                 timing: PerRep | Periods | Clients | None = None) -> Cell:
    """One cell's figures, every one recomputable from its records with docs/design.md §4 (the one place a
    bench cell, a --find level and a report's cell are made). `endpoint_gbps`: HTTP, each listed endpoint's β
    in order (None where its chip is not known). With ignore_eos, `stopped_early` counts the answers that ended
    before their length limit anyway. `timing`: how the per-second figures are timed (cell.PerRep, the
    default; cell.Periods; cell.Clients); every figure derived from them is derived here, from them."""
    t = (timing or PerRep()).time(records)
    s = M.summarize(records)
    tpot_ms = s["median_tpot_ms"]
    cv = M.cv(t.per_rep)
    kwb = M.kwb_tpot(k, weight_bytes, bandwidth_gbps, mode, endpoint_gbps)
    out = Cell(k=k, b=b, reps=len({r.rep for r in records}), achieved_concurrency=t.concurrency,
               output_throughput=t.throughput, output_throughput_per_rep=t.per_rep, **s,
               per_stream_tps=1000.0 / tpot_ms if tpot_ms else None, rss_gb_sum=M.rss_sum_bytes(records) / 1e9,
               **_bandwidth(records, t, weight_bytes, mode, kv_bytes_per_token, tpot_ms), mode=mode,
               predicted_tpot_ms=None if kwb is None else kwb * 1e3, cv=cv, noisy=M.is_noisy(cv),
               status="ok" if s["completed"] else "failed")
    served = min((r.k for r in records), default=k)
    if served < k:  # a worker died mid-cell: the rest of it ran with fewer
        out.k_served_min = served
    classes = ttft_by_class(records)
    if len(classes) > 1:
        out.ttft_by_class = classes
    out.predicted_by = "K·W/β" if out.predicted_tpot_ms else None
    out.update(**lateness_figures(records))
    if turns := ttft_by_turn(records):  # multi-turn sessions: TTFT by turn, labelled with the prefix cache
        out.update(ttft_by_turn=turns, prefix_cache=prefix_cache_label(records))
    if ignore_eos:
        out.stopped_early = M.stopped_early(records, max_tokens)
    if is_remote(mode) and (check := server_check(records)):
        out.server_check = check
    if is_remote(mode):
        out.update(**cache_figures(records))
        out.update(**client_wait_figures(records))
        if procs := {(r.extra or {}).get("proc") for r in records} - {None}:  # sent through a pool of processes
            out.client_procs = len(procs)
    if cost is not None and (cost.set or watts is not None):
        out.update(watts=watts, joules_per_token=joules_per_token(watts, out.output_throughput),
                   usd_per_mtok=cost.usd_per_mtok(out.output_throughput, watts))
    if slo is not None:
        g = M.goodput(records, slo, t.goodput_s) if t.goodput_s is not None else None
        out.update(slo=slo.describe(), goodput_rps=g.rps if g else None, goodput_tps=g.tps if g else None,
                   slo_attainment=g.attainment if g else None)
    if roofline is not None:
        out.update(**_predicted(records, roofline, mode, k, b, threads, max_tokens, out))
    return out.update(**t.notes)


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


def _predicted(records: Sequence[RequestRecord], roofline: Roofline, mode: str, k: int, b: int, threads: int | None,
               max_tokens: int | None, cell: Cell) -> dict[str, Any]:
    """The roofline's TPOT and tok/s for this cell, and the error of each against the measurement."""
    good = M.ok(records)
    prompts = [r.prompt_tokens for r in good if r.prompt_tokens]
    out_tokens = max_tokens or (round(_mean([r.output_tokens for r in good])) if good else 128)
    p = roofline.level(mode, k, b, threads, round(_mean(prompts)) if prompts else 32, out_tokens)
    if p is None:
        return {}

    def err(pred: float, meas: float | None) -> float | None:
        return (pred - meas) / meas if meas else None

    return {"predicted_by": "roofline", "predicted_tpot_ms": p.tpot_s * 1e3,
            "predicted_output_throughput": p.aggregate_tps, "binding": p.binding,
            "error_tpot": err(p.tpot_s * 1e3, cell.median_tpot_ms),
            "error_output_throughput": err(p.aggregate_tps, cell.output_throughput),
            **({"prediction_caveat": p.caveat()} if p.oversubscribed else {})}


DISAGREE = 0.05
# llama-server's timings keys server_check compares (engines/null_server.py sends only its own null_* keys)
LLAMA_TIMINGS = {"predicted_per_token_ms", "prompt_n", "predicted_n"}


def server_check(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """The server's own figures beside the client's, where it sends them (llama-server's per-response `timings`):
    decode ms per token vs the client's TPOT, prompt tokens (prefilled + taken from its cache) vs the client's
    count, generated tokens vs the client's. A difference over 5 % is a finding, listed in `disagreements`."""
    out = _counter_deltas(records)
    timings = [(r, (r.server_view or {}).get("timings")) for r in M.ok(records)]
    pairs = [(r, t) for r, t in timings if isinstance(t, dict) and t.keys() & LLAMA_TIMINGS]
    if not pairs:
        return out
    server_tpot = [t["predicted_per_token_ms"] for _, t in pairs if t.get("predicted_per_token_ms")]
    client_tpot = [tp * 1e3 for tp in (M.tpot(r) for r, _ in pairs) if tp is not None]
    out = dict(out or {}, requests=len(pairs))
    if server_tpot and client_tpot:
        out["server_tpot_ms"], out["client_tpot_ms"] = M.percentile(server_tpot, 50), M.percentile(client_tpot, 50)
    # a prompt = the tokens prefilled (prompt_n) + those taken from the server's prefix cache (cache_n)
    sp = [(t["prompt_n"], t.get("cache_n") or 0, r.prompt_tokens) for r, t in pairs
          if t.get("prompt_n") and r.prompt_tokens]
    if sp:
        out["server_prompt_tokens"] = sum(a + c for a, c, _ in sp)
        out["client_prompt_tokens"] = sum(b for _, _, b in sp)
        if any(c for _, c, _ in sp):
            out["server_cached_tokens"] = sum(c for _, c, _ in sp)
    sg = [(t.get("predicted_n"), r.output_tokens) for r, t in pairs if t.get("predicted_n")]
    if sg:
        out["server_output_tokens"] = sum(a for a, _ in sg)
        out["client_output_tokens"] = sum(b for _, b in sg)
    _disagree(out)
    return out


def _counter_deltas(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """The server's Prometheus counters' rise over the cell (the view each record carried when it ended,
    first vs last), beside the client's own counts."""
    views = [(r.t_done_ns, r.server_view) for r in records if isinstance(r.server_view, dict) and r.t_done_ns]
    if len(views) < 2:
        return None
    views.sort(key=lambda v: v[0])
    first, last = views[0][1], views[-1][1]
    out: dict[str, Any] = {}
    # deltas between the scrapes the first and the last record carried (≤ 1 s apart from their ends): shown
    # beside the client's counts, not compared to 5 % (the scrape times do not line up with the records)
    for key in ("generated_tokens_total", "prompt_tokens_total", "requests_total", "preemptions"):
        if isinstance(first.get(key), (int, float)) and isinstance(last.get(key), (int, float)):
            out[f"server_delta_{key}"] = last[key] - first[key]
    return out or None


def _disagree(out: dict[str, Any]) -> None:
    out["disagreements"] = [
        f"{what}: server {out[s_key]:.4g} vs client {out[c_key]:.4g} ({out[s_key] / out[c_key] - 1:+.0%})"
        for what, s_key, c_key in (("decode ms/token vs TPOT", "server_tpot_ms", "client_tpot_ms"),
                                   ("prompt tokens", "server_prompt_tokens", "client_prompt_tokens"),
                                   ("output tokens", "server_output_tokens", "client_output_tokens"))
        if s_key in out and out[c_key] and abs(out[s_key] / out[c_key] - 1) > DISAGREE]


def endpoint_figures(records: Sequence[RequestRecord], weight_bytes: int = 0) -> list[dict[str, Any]]:
    """Per endpoint of an HTTP run over several (records' worker = the endpoint): its requests, errors,
    output tok/s over the cell's span, TTFT and TPOT p50, and its bandwidth product W ÷ TPOT p50 (one weight
    read per server step, all its streams in it: metrics.http_bandwidth) where W is known. [] for one endpoint."""
    groups: dict[int | None, list[RequestRecord]] = {}
    for r in records:
        groups.setdefault(r.worker, []).append(r)
    if len(groups) < 2:
        return []
    span = M.run_span_ns(records)
    secs = (span[1] - span[0]) / 1e9 if span and span[1] > span[0] else None
    out = []
    for wid, recs in sorted(groups.items(), key=lambda x: (x[0] is None, x[0] or 0)):
        s = M.summarize(recs)
        tp = s["median_tpot_ms"]
        ex = recs[0].extra or {}
        out.append({"endpoint": ex.get("endpoint", str(wid)), "url": ex.get("url"), "requests": len(recs),
                    "errors": s["errors"],
                    "output_throughput": s["total_output_tokens"] / secs if secs else None,
                    "median_ttft_ms": s["median_ttft_ms"], "median_tpot_ms": tp,
                    "bandwidth_gbps": M.http_bandwidth(weight_bytes, [_s(tp)]).gbps})
    return out


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def _bandwidth(records: Sequence[RequestRecord], timed: Timed, weight_bytes: int, mode: str, kvb: float | None,
               tpot_ms: float | None = None) -> dict[str, Any]:
    """The bandwidth product (docs/design.md §4), from the cell's own figures: instances from its timed
    throughput, batch from the steps inside its timed span, http from each endpoint's TPOT p50."""
    if is_remote(mode):
        eps = endpoint_figures(records, weight_bytes)
        # one server: the cell's TPOT p50 is its streams' (one step serves all of them)
        bw = M.http_bandwidth(weight_bytes, [_s(e["median_tpot_ms"]) for e in eps] if eps else [_s(tpot_ms)])
        return {"bandwidth_gbps": bw.gbps, "bandwidth_formula": bw.formula, **({"endpoints": eps} if eps else {})}
    if mode != "batch":
        bw = M.bandwidth_product(mode, weight_bytes, agg_tps=timed.throughput)
        return {"bandwidth_gbps": bw.gbps, "bandwidth_formula": bw.formula}
    if timed.batch is None:  # no request decoded over a span
        return {"bandwidth_gbps": None, "bandwidth_formula": M.bandwidth_product(mode, weight_bytes).formula,
                "steps_per_s": None}
    good, windows, secs = timed.batch
    steps, kv = M.batch_reads(good, windows, kvb)
    kv_per_s = None if kv is None else kv / secs
    bw = M.bandwidth_product(mode, weight_bytes, steps_per_s=[steps / secs], kv_read_bps=kv_per_s)
    return {"bandwidth_gbps": bw.gbps, "bandwidth_formula": bw.formula, "steps_per_s": steps / secs,
            "kv_read_gbps": None if kv_per_s is None else kv_per_s / 1e9}


def request_class(prompt_id: str) -> str:
    return "long" if prompt_id.startswith("long-") else "short"


def ttft_by_class(records: Sequence[RequestRecord]) -> dict[str, dict[str, Any]]:
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
        ref = base_k.get((c.context, c.b))
        c.scaling_vs_k1 = c.output_throughput / ref if ref and c.output_throughput else None
        ref = base_b.get((c.context, c.k))
        c.scaling_vs_b1 = c.output_throughput / ref if ref and c.output_throughput else None


skipped_cell = skipped  # a cell without numbers (cell.skipped)


class CellRunner:
    """One cell on a load source, run the same way for the sweep and for each --find level (knee.py): the
    source scaled to K, set to the mode and B and waited for; what a warmed-up worker holds beyond its weights
    learnt (later cells are admitted with it); each load under the memory wall's check; the cell summarised
    with every figure the configuration asks for (K·W/β, power and cost, the SLO, the roofline); a worker the
    kernel's OOM killer ended remembered, so that step and every larger one of its mode are refused from then
    on and the guard's overhead is raised."""

    def __init__(self, source: LoadSource, cfg: SweepConfig, say: Callable[[str], None]):
        from measure.machine.power import PowerMeter

        self.source, self.cfg, self.say = finite(source), cfg, say  # SourceError: it serves a live view only
        self.caps = source.capabilities()
        self.local = self.caps.local
        self.power = PowerMeter(cfg.cost.watts if cfg.cost else None)
        self.probe = SystemProbe()
        self.heat = ThermalLog()  # a cell's thermal states
        self.energy: host.EnergyWindow | None = None  # a Mac's energy per rail over the cell
        self.kills: list[OomKill] = []  # steps at which the kernel's OOM killer ended a worker in this run
        self._killed_before = 0
        self._wall: WallCheck | None = None

    def footprint(self, mode: str, k: int, b: int, seq_ctx: int) -> Footprint:
        return engine_footprint(mode, k, b, b_cap=b, seq_ctx=seq_ctx, ctx=self.cfg.ctx,
                                weight_bytes=self.source.meta.model_bytes,
                                kv_per_token=self.cfg.kv_bytes_per_token or 0.0, overhead_bytes=self.cfg.overhead_bytes)

    def oom_refusal(self, mode: str, k: int, b: int) -> str | None:
        """Why this step is refused: a worker was OOM-killed at it or below it in this run (None: it is not)."""
        return oom_refusal(self.kills, mode, k, b) if self.local and not self.cfg.force else None

    def budget_refusal(self, mode: str, k: int, b: int, seq_ctx: int) -> str | None:
        """Why this step is refused: its estimated footprint is over the memory budget (None: it fits)."""
        if not (self.local and self.cfg.memory_budget and not self.cfg.force):
            return None
        return admit(self.footprint(mode, k, b, seq_ctx), self.cfg.memory_budget)

    def start(self, mode: str, k: int, b: int, seq_ctx: int, users: int | None = None) -> None:
        """The source at this step, ready; `users`: a closed loop's, told to the source (else it may follow its
        streams × endpoints); the power meter and the wall's check count from here."""
        src = self.source
        src.scale_to(k)
        assert mode in MODES  # the sweep's and --find's modes are a source's
        src.set_batch(mode, b, b_cap=b, seq_ctx=seq_ctx)
        src.wait_ready()
        rss = [w.rss for w in src.workers() if w.rss and w.ready_ns]
        if rss and self.local:
            self.cfg.overhead_bytes = max(self.cfg.overhead_bytes, max(rss) - src.meta.model_bytes)
        if users is not None:
            src.set_users(users)
        self._killed_before = len(src.oom_killed)
        self.power.sample()  # a meter's reading counts from here
        self.heat.mark()  # the thermal states seen from here, in the wall check's samples
        self.energy = host.EnergyWindow("inference-top cell") if host.is_mac() else None
        if self.energy and not self.energy.begin():  # zeus-apple-silicon not installed, or IOReport closed
            self.energy = None
        self._wall = WallCheck(self.probe, self.heat)

    def load(self, workload: Workload, arrivals: ClosedLoop | Poisson | Schedule | Segment | Sessions
             ) -> list[RequestRecord]:
        """One load to completion (CellStopped at the memory wall, TimeoutError past the cell's timeout)."""
        cfg = self.cfg
        return self.source.run_requests(Load(workload, arrivals, cfg.max_tokens, cfg.ignore_eos),
                                        timeout=cfg.cell_timeout_s, should_stop=self._wall)

    def finish(self, records: list[RequestRecord], workload: Workload, mode: str, k: int, b: int,
               **first: Any) -> Cell:
        """The cell of these records; `first`: figures set right after its own (the sweep's context), before
        the power meter's source."""
        cfg, src = self.cfg, self.source
        cell = cell_summary(records, k, b, src.meta.model_bytes, cfg.bandwidth_gbps, mode, cfg.kv_bytes_per_token,
                            cfg.roofline, cfg.threads or auto_threads(k),
                            None if getattr(workload, "varies", False) else cfg.max_tokens, cfg.slo, cfg.cost,
                            self.power.sample(),
                            [w.bandwidth_gbps for w in src.workers()] if self.caps.per_endpoint_bandwidth else None,
                            ignore_eos=cfg.ignore_eos)
        cell.update(**first)
        heat = self.heat
        if heat.describe():  # docs/design.md §21: a cell whose thermal state changed is not one machine's figure
            cell.thermal = heat.describe()
            if heat.changed:
                cell.thermal_changed = True
        if self.energy:
            rails = self.energy.end(busy=bool(records))
            self.energy = None
            if read := {r.rail: r.watts for r in rails if r.watts is not None}:
                cell.rails_watts = read
                cell.rails_joules_per_token = host.joules_per_token(rails, cell.total_output_tokens or 0) or None
            if unread := "; ".join(r.label() for r in rails if r.watts is None):
                cell.rails_unread = unread
        if cell.watts is not None:  # mean power over the cell, and what read it
            cell.power_source = self.power.source
        return cell

    def learn(self, cell: Cell, mode: str, k: int, b: int, seq_ctx: int) -> None:
        """A worker OOM-killed while this cell ran: the estimate was too low here, so raise it and refuse ≥ it."""
        if len(self.source.oom_killed) <= self._killed_before:
            return
        cfg = self.cfg
        fp = self.footprint(mode, k, b, seq_ctx)
        budget = cfg.memory_budget or fp.total
        self.kills.append(OomKill(mode, k, b, fp.total, budget))
        cfg.overhead_bytes = overhead_after_oom(fp, budget, cfg.overhead_bytes)
        cell.oom_killed = True
        self.say(f"  the kernel's OOM killer ended a worker at K={k} B={b} (estimated {fmt_gib(fp.total)}): "
                 "larger cells of this mode are refused in this run")


def _idle_until(t0_ns: int | None, runner: CellRunner) -> None:
    """--start-at: wait here for the asked start (the load would wait for it anyway), then count the power meter
    from it, so the idle wait is not in the cell's watts."""
    if t0_ns is None:
        return
    wait = (t0_ns - time.perf_counter_ns()) / 1e9 - 0.05  # the load's own timers take the last 50 ms
    if wait > 0:
        time.sleep(wait)
        runner.power.sample()


def run_sweep(fleet: LoadSource, workload: Workload, cfg: SweepConfig, say: Callable[[str], None] = print,
              new_fleet: Callable[[], LoadSource] | None = None, cells: list[Cell] | None = None
              ) -> tuple[list[Cell], list[RequestRecord], FiniteLoadSource]:
    """Cells in rows (one row per context), each row over B then K. A cell the admission check
    refuses is skipped with every larger cell of its row; a cell that hits the wall or its timeout
    ends the row there (the source is replaced, so nothing of it lingers). Never hangs. `cells`, where
    given, is filled as cells finish (what an interrupted sweep still has); `cfg.current` names the cell
    running now."""
    runner = CellRunner(fleet, cfg, say)
    cells = [] if cells is None else cells
    all_records: list[RequestRecord] = []
    contexts: Sequence[int | None] = cfg.contexts or [None]
    for context in contexts:
        wl = workload
        if context is not None:
            from presets import Workload as WL

            n = max(1, context - cfg.max_tokens)
            wl = WL(f"context-{context}", f"synthetic prompt of {n} tokens + {cfg.max_tokens} generated",
                    synthetic_tokens=n)
        blocked: tuple[int, int, str, str] | None = None  # (k, b, status, reason) at which the row stopped
        for b in cfg.bs:
            for k in cfg.ks:
                if blocked and k >= blocked[0] and b >= blocked[1]:
                    cells.append(skipped_cell(k, b, context, blocked[2], f"after {blocked[3]}"))
                    continue
                seq_ctx = context or cfg.ctx
                users = closed_loop_users(cfg.mode, k, b, cfg.users)
                closed = not (cfg.sessions or cfg.arrivals or cfg.rate)
                if why := runner.oom_refusal(cfg.mode, k, b):
                    say(f"K={k} B={b}" + (f" context {context}" if context else "") + f": {why}")
                    cells.append(skipped_cell(k, b, context, "refused", why))
                    continue
                if why := runner.budget_refusal(cfg.mode, k, b, seq_ctx):
                    say(f"K={k} B={b}" + (f" context {context}" if context else "") + f": {why}")
                    cells.append(skipped_cell(k, b, context, "refused", why))
                    blocked = (k, b, "refused", f"K={k} B={b} refused")
                    continue
                cfg.current = (k, b, context)
                # a closed loop's or the sessions' users told to the source: it may otherwise follow its slots
                # (B × endpoints), and sessions of --users 4 ran B × endpoints users
                runner.start(cfg.mode, k, b, seq_ctx, users if cfg.sessions or (closed and cfg.users) else None)
                cell_records: list[RequestRecord] = []
                status = None
                for rep in range(cfg.reps):
                    fleet.rep = rep
                    arrivals: ClosedLoop | Poisson | Schedule | Segment | Sessions = (
                        cfg.sessions.make(users, cfg.requests, rep) if cfg.sessions
                        else cfg.arrivals.make(cfg.requests, rep) if cfg.arrivals
                        else Poisson(cfg.rate, total=cfg.requests, seed=rep) if cfg.rate
                        else ClosedLoop(users, cfg.requests))
                    if cfg.client is not None:  # this client's segment of the schedule, from the asked start
                        arrivals = cfg.client.wrap(arrivals)
                        _idle_until(cfg.client.t0_ns, runner)
                    t0 = time.monotonic()
                    say(f"K={k} B={b}" + (f" context {context}" if context else "")
                        + f" rep {rep + 1}/{cfg.reps}: {cfg.requests} requests, {arrivals.describe()} …")
                    try:
                        recs = runner.load(wl, arrivals)
                    except CellStopped as stop:
                        cell_records += stop.records
                        status = ("wall", f"memory wall: {stop}")
                    except TimeoutError as exc:
                        status = ("timeout", str(exc))
                    if status:
                        say(f"  {status[0]}: {status[1]}")
                        break
                    cell_records += recs
                    errs = sum(1 for r in recs if r.error)
                    say(f"  done in {time.monotonic() - t0:.1f} s" + (f", {errs} errors" if errs else ""))
                all_records += cell_records
                if status:
                    cells.append(skipped_cell(k, b, context, *status))
                    blocked = (k, b, status[0], f"K={k} B={b} {status[0]}")
                    if new_fleet:  # whatever the stopped cell left running goes with the old fleet
                        fleet.close()
                        fleet = runner.source = finite(new_fleet())
                    continue
                cell = runner.finish(cell_records, wl, cfg.mode, k, b, context=context)
                if cfg.arrivals:
                    cell.arrivals = cfg.arrivals.describe()
                if cfg.sessions:
                    cell.sessions = cfg.sessions.describe()
                runner.learn(cell, cfg.mode, k, b, seq_ctx)
                cells.append(cell)
    add_scaling([c for c in cells if c.ok])
    cfg.current = None
    return cells, all_records, runner.source  # the fleet (or the last one it was replaced by), as a finite source


def _fmt(v: float | None, spec: str = ".1f", none: str = "—") -> str:
    return none if v is None else format(v, spec)


def _pred(c: Cell) -> str:
    if c.predicted_by != "roofline":
        return "—"
    e1, e2 = c.error_tpot, c.error_output_throughput
    return (f"{c.predicted_tpot_ms:.1f}ms{'' if e1 is None else f' {e1:+.0%}'} "
            f"{c.predicted_output_throughput:.0f}{'' if e2 is None else f' {e2:+.0%}'}")


def answer_notes(c: Cell) -> str:
    """A cell's notes on what its answers were: answers that ended before max_tokens although EOS was to be
    ignored; a reasoning model's time to the first answer token beside TTFT (TTFT is to its first thinking
    token)."""
    note = ""
    if c.stopped_early:
        note += (f" STOPPED EARLY {c.stopped_early}/{'?' if c.completed is None else c.completed} (answers ended "
                 "before max_tokens although ignore_eos was sent: does the server honour it?)")
    if c.reasoning_tokens:
        note += (f" TTFAT p50/p99 {_fmt(c.median_ttfat_ms, '.0f')}/{M.p99_mark(c.completed)}"
                 f"{_fmt(c.p99_ttfat_ms, '.0f')} ms"
                 f" (first answer token; {c.reasoning_tokens} reasoning tokens counted)")
    return note


def client_note(c: Cell) -> str:
    """HTTP: requests that waited for a free client stream (the client's own queue, inside their TTFT)."""
    if not c.client_waited:
        return ""
    return (f" CLIENT QUEUE: {c.client_waited} requests waited for a free stream, p50/p99 "
            f"{_fmt(c.client_wait_p50_ms, '.0f')}/{M.p99_mark(c.completed)}{_fmt(c.client_wait_p99_ms, '.0f')} ms "
            "(inside their TTFT: the client's queue, not the server's; a larger --b, or no --b with an open loop)")


def format_table(cells: list[Cell]) -> str:
    head = (f"{'K':>3} {'B':>3} {'conc':>5} {'tok/s':>8} {'TPOT p50':>9} {'TTFT p50':>9} {'TTFT p99':>9} "
            f"{'RSS sum':>8} {'BW GB/s':>8} {'×K=1':>6} {'×B=1':>6} {'CV':>6} {'predicted TPOT, tok/s':>24}  note")
    lines = [head, "-" * len(head)]
    for c in cells:
        if not c.ok:
            ctx = f" context {c.context}" if c.context else ""
            why = c.reason or f"{c.errors or 0} errors, no request completed"
            assert c.status is not None  # a cell not ok says why: refused, wall, timeout, failed …
            lines.append(f"{c.k:>3} {c.b:>3} {c.status.upper():>8}{ctx}: {why[:110]}")
            continue
        note = ("NOISY" if c.noisy else "") + answer_notes(c) + turn_note(c) + cache_note(c)
        for cls, v in (c.ttft_by_class or {}).items():
            note += f" {cls} TTFT p50/p99 {v['median_ttft_ms']:.0f}/{M.p99_mark(v.get('n'))}{v['p99_ttft_ms']:.0f} ms"
        if c.context:
            note += f" context {c.context}"
        if c.errors:
            note += f" {c.errors} errors"
        if c.arrivals or c.behind_schedule:
            note += (f" {(c.arrivals or '') + ','} late p50/p99 {_fmt(c.lateness_p50_ms)}/"
                     f"{_fmt(c.lateness_p99_ms)} ms" + (" BEHIND SCHEDULE" if c.behind_schedule else ""))
        note += client_note(c)
        if c.prediction_caveat:
            note += f" PREDICTION: {c.prediction_caveat}"
        if c.k_served_min:
            note += f" K={c.k_served_min} after a worker died"
        if c.oom_killed:
            note += " OOM-KILLED"
        if c.goodput_tps is not None:
            note += f" goodput {c.goodput_tps:.1f} tok/s ({c.slo_attainment:.0%} in SLO)"
        for d in (c.server_check or {}).get("disagreements", []):
            note += f" SERVER DISAGREES {d}"
        for e in c.endpoints or []:
            note += (f" [{e['endpoint']}: {_fmt(e['output_throughput'])} tok/s, TTFT {_fmt(e['median_ttft_ms'], '.0f')}"
                     f" ms, {e['requests']} req" + (f", {e['errors']} err" if e["errors"] else "") + "]")
        lines.append(
            f"{c.k:>3} {c.b:>3} {_fmt(c.achieved_concurrency, '.2f'):>5} {_fmt(c.output_throughput):>8} "
            f"{_fmt(c.median_tpot_ms):>7}ms {_fmt(c.median_ttft_ms, '.0f'):>7}ms "
            f"{M.p99_mark(c.completed) + _fmt(c.p99_ttft_ms, '.0f'):>7}ms "
            f"{_fmt(c.rss_gb_sum, '.2f'):>6}GB {_fmt(c.bandwidth_gbps, '.2f'):>8} "
            f"{_fmt(c.scaling_vs_k1, '.2f'):>6} {_fmt(c.scaling_vs_b1, '.2f'):>6} "
            f"{_fmt(c.cv, '.3f'):>6} {_pred(c):>24}  {note.strip()}"
        )
    formula = next((c.bandwidth_formula for c in cells if c.bandwidth_formula), M.BANDWIDTH_FORMULA_INSTANCES)
    lines.append("conc: achieved concurrency = Σ (done − started) ÷ wall time, the streams actually served; tok/s: "
                 "output tokens ÷ (first scheduled → last done), mean over reps;")
    lines.append(f"TTFT queue-inclusive (first token − scheduled); TPOT = (t_last − t_first)/(N − 1); "
                 f"{M.P99_LEGEND}; late: sent − scheduled by the load generator (open loop; inside TTFT);")
    lines.append(f"BW = {formula}; "
                 f"CV over reps, NOISY above {M.NOISY_CV:.2f}; predicted: the roofline (inference-top probe), "
                 "error = (predicted − measured) ÷ measured")
    return "\n".join(lines)


def write_summary(out_dir: Path, cells: list[Cell]) -> None:
    """summary.json: a list of cells (vLLM's field names where they exist); summary.csv: the same, flat."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [c.to_dict() for c in cells]
    (out_dir / "summary.json").write_text(json.dumps(rows, indent=2))
    cols = [k for k in rows[0] if not isinstance(rows[0][k], list)] if rows else []
    with (out_dir / "summary.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for c in rows:
            w.writerow(c)


__all__ = ["SweepConfig", "run_sweep", "cell_summary", "CellRunner", "Cell", "format_table", "write_summary",
           "SourceError"]
