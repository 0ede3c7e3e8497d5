"""The headless sweep: one fleet, scaled cell by cell, `requests` per rep, raw records + a summary."""
from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import metrics as M
from bench.fleet import Fleet, FleetError
from bench.records import RequestRecord
from bench.workload import ClosedLoop, Poisson
from presets import Workload


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
    bandwidth_gbps: float | None = None
    cell_timeout_s: float = 1800.0
    out_dir: Path | None = None
    extra: dict = field(default_factory=dict)


def cell_summary(records: Sequence[RequestRecord], k: int, b: int, weight_bytes: int,
                 bandwidth_gbps: float | None = None, mode: str = "instances",
                 kv_bytes_per_token: float | None = None) -> dict:
    """One cell's figures, every one recomputable from its records with DESIGN section 4."""
    reps = sorted({r.rep for r in records})
    per_rep = [M.output_throughput([r for r in records if r.rep == rep]) for rep in reps]
    per_rep = [x for x in per_rep if x is not None]
    s = M.summarize(records)
    tpot_ms = s["median_tpot_ms"]
    per_stream = 1000.0 / tpot_ms if tpot_ms else None
    cv = M.cv(per_rep)
    out = {
        "k": k,
        "b": b,
        "reps": len(reps),
        "output_throughput": M.mean(per_rep),
        "output_throughput_per_rep": per_rep,
        **s,
        "per_stream_tps": per_stream,
        "rss_gb_sum": M.rss_sum_bytes(records) / 1e9,
        **_bandwidth(records, k, per_stream, weight_bytes, mode, kv_bytes_per_token),
        "mode": mode,
        "predicted_tpot_ms": M.predicted_tpot(k, weight_bytes, bandwidth_gbps) * 1e3 if bandwidth_gbps else None,
        "cv": cv,
        "noisy": M.is_noisy(cv),
        "status": "ok" if s["completed"] else "failed",
    }
    return out


def _bandwidth(records, k, per_stream, weight_bytes, mode, kvb) -> dict:
    if mode != "batch":
        return {"bandwidth_gbps": M.bandwidth_product_instances(per_stream, weight_bytes, k) if per_stream else None,
                "bandwidth_formula": M.BANDWIDTH_FORMULA_INSTANCES}
    good = M.ok(records)
    span = M.run_span_ns(good)
    if not good or span is None or span[1] <= span[0]:
        return {"bandwidth_gbps": None, "bandwidth_formula": M.BANDWIDTH_FORMULA_BATCH, "steps_per_s": None}
    secs = (span[1] - span[0]) / 1e9
    # every token of one step shares the step's timestamp: distinct (worker, rep, t) are the steps
    steps = len({(r.worker, r.pid, t) for r in good for t in r.token_ns})
    kv_per_s = None
    if kvb:
        # the step that produced a sequence's i-th token read its prompt and i − 1 generated tokens of KV
        kv_per_s = sum((r.prompt_tokens + i) * kvb for r in good for i in range(len(r.token_ns))) / secs
    gbps = (steps / secs * weight_bytes + (kv_per_s or 0.0)) / 1e9
    return {"bandwidth_gbps": gbps, "bandwidth_formula": M.BANDWIDTH_FORMULA_BATCH if kvb else
            M.BANDWIDTH_FORMULA_BATCH_LIVE, "steps_per_s": steps / secs,
            "kv_read_gbps": None if kv_per_s is None else kv_per_s / 1e9}


def add_scaling(cells: list[dict]) -> None:
    """scaling = output_throughput ÷ that of K=1 at the same B (None where K=1 was not run)."""
    base_k = {c["b"]: c["output_throughput"] for c in cells if c["k"] == 1 and c["output_throughput"]}
    base_b = {c["k"]: c["output_throughput"] for c in cells if c["b"] == 1 and c["output_throughput"]}
    for c in cells:
        ref = base_k.get(c["b"])
        c["scaling_vs_k1"] = c["output_throughput"] / ref if ref and c["output_throughput"] else None
        ref = base_b.get(c["k"])
        c["scaling_vs_b1"] = c["output_throughput"] / ref if ref and c["output_throughput"] else None


def run_sweep(fleet: Fleet, workload: Workload, cfg: SweepConfig,
              say: Callable[[str], None] = print) -> tuple[list[dict], list[RequestRecord]]:
    cells: list[dict] = []
    all_records: list[RequestRecord] = []
    for b in cfg.bs:
        for k in cfg.ks:
            fleet.scale_to(k)
            fleet.set_batch(cfg.mode, b)
            fleet.wait_ready()
            cell_records: list[RequestRecord] = []
            for rep in range(cfg.reps):
                fleet.rep = rep
                users = k * (b if cfg.mode == "batch" else 1)
                arrivals = Poisson(cfg.rate, total=cfg.requests, seed=rep) if cfg.rate else ClosedLoop(users, cfg.requests)
                t0 = time.monotonic()
                say(f"K={k} B={b} rep {rep + 1}/{cfg.reps}: {cfg.requests} requests, {arrivals.describe()} …")
                recs = fleet.run_requests(workload, arrivals, cfg.max_tokens, cfg.ignore_eos,
                                          timeout=cfg.cell_timeout_s)
                cell_records += recs
                errs = sum(1 for r in recs if r.error)
                say(f"  done in {time.monotonic() - t0:.1f} s" + (f", {errs} errors" if errs else ""))
            cells.append(cell_summary(cell_records, k, b, fleet.meta.model_bytes, cfg.bandwidth_gbps, cfg.mode,
                                      cfg.kv_bytes_per_token))
            all_records += cell_records
    add_scaling(cells)
    return cells, all_records


def _fmt(v, spec=".1f", none="—"):
    return none if v is None else format(v, spec)


def format_table(cells: list[dict]) -> str:
    head = (f"{'K':>3} {'B':>3} {'tok/s':>8} {'TPOT p50':>9} {'TTFT p50':>9} {'TTFT p99':>9} "
            f"{'RSS sum':>8} {'BW GB/s':>8} {'×K=1':>6} {'×B=1':>6} {'CV':>6}  note")
    lines = [head, "-" * len(head)]
    for c in cells:
        note = "NOISY" if c["noisy"] else ""
        if c["errors"]:
            note += f" {c['errors']} errors"
        lines.append(
            f"{c['k']:>3} {c['b']:>3} {_fmt(c['output_throughput']):>8} {_fmt(c['median_tpot_ms']):>7}ms "
            f"{_fmt(c['median_ttft_ms'], '.0f'):>7}ms {_fmt(c['p99_ttft_ms'], '.0f'):>7}ms "
            f"{_fmt(c['rss_gb_sum'], '.2f'):>6}GB {_fmt(c['bandwidth_gbps'], '.2f'):>8} "
            f"{_fmt(c.get('scaling_vs_k1'), '.2f'):>6} {_fmt(c.get('scaling_vs_b1'), '.2f'):>6} "
            f"{_fmt(c['cv'], '.3f'):>6}  {note.strip()}"
        )
    lines.append("tok/s: output tokens ÷ (first scheduled → last done), mean over reps; TTFT queue-inclusive "
                 "(first token − scheduled); TPOT = (t_last − t_first)/(N − 1);")
    lines.append(f"BW = {cells[0]['bandwidth_formula'] if cells else M.BANDWIDTH_FORMULA_INSTANCES}; "
                 f"CV over reps, NOISY above {M.NOISY_CV:.2f}")
    return "\n".join(lines)


def write_summary(out_dir: Path, cells: list[dict]) -> None:
    """summary.json: a list of cells (vLLM's field names where they exist); summary.csv: the same, flat."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(cells, indent=2))
    cols = [k for k in cells[0] if not isinstance(cells[0][k], list)] if cells else []
    with (out_dir / "summary.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for c in cells:
            w.writerow(c)


__all__ = ["SweepConfig", "run_sweep", "cell_summary", "format_table", "write_summary", "FleetError"]
