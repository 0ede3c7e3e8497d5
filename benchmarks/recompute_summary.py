"""Recompute a bench output's summary from its records.jsonl, independently of measure/core/metrics.py
(plain json and numpy only), and compare every cell with summary.json.

    python benchmarks/recompute_summary.py out/bench-…      (the --out folder of `inference-top bench`)

Per cell (records grouped by k, b): median and p99 queue-inclusive TTFT, median TPOT, aggregate tok/s
(tokens ÷ (first scheduled → last done), mean over reps; a sweep with --contexts rows is not split by row here) and achieved concurrency (Σ (done − started) ÷
that span, mean over reps). Prints the largest relative difference; the last line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def recompute(records: list[dict]) -> dict:
    good = [r for r in records if r["error"] is None and r["t_first_token_ns"] is not None]
    ttft = [(r["t_first_token_ns"] - r["t_scheduled_ns"]) / 1e9 for r in good]
    tpot = [(r["token_ns"][-1] - r["token_ns"][0]) / (len(r["token_ns"]) - 1) / 1e9
            for r in good if len(r["token_ns"]) > 1]
    tps, conc = [], []
    for rep in sorted({r["rep"] for r in records}):
        rs = [r for r in records if r["rep"] == rep]
        a = min(r["t_scheduled_ns"] for r in rs)
        b = max(r["t_done_ns"] for r in rs) + 1  # the window [a, b) holds the last token
        tokens = sum(1 for r in good if r["rep"] == rep for t in r["token_ns"] if a <= t < b)
        tps.append(tokens / ((b - a) / 1e9))
        busy = sum(min(r["t_done_ns"], b) - max(r["t_started_ns"], a) for r in rs
                   if r["t_started_ns"] is not None and r["t_done_ns"] is not None)
        conc.append(busy / (b - a))
    return {"median_ttft_ms": float(np.percentile(ttft, 50)) * 1e3, "p99_ttft_ms": float(np.percentile(ttft, 99)) * 1e3,
            "median_tpot_ms": float(np.percentile(tpot, 50)) * 1e3, "output_throughput": float(np.mean(tps)),
            "achieved_concurrency": float(np.mean(conc))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the --out folder of `inference-top bench` (records.jsonl, summary.json)")
    out = ap.parse_args().out
    try:
        lines = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines() if x.strip()]
        cells = [c for c in json.loads((out / "summary.json").read_text()) if c.get("status") == "ok"]
    except (OSError, ValueError) as e:
        print(f"recompute_summary.py: cannot read a bench output in {out}: {e}; pass the --out folder of "
              "`inference-top bench`", file=sys.stderr)
        return 2
    records = [x for x in lines if x.get("kind", "request") == "request"]
    worst = 0.0
    print(f"{'K':>3} {'B':>3} {'figure':<22} {'summary.json':>14} {'recomputed':>14} {'rel diff':>10}")
    for c in cells:
        mine = [r for r in records if r["k"] == c["k"] and r["b"] == c["b"]]
        again = recompute(mine)
        for key, v in again.items():
            rel = abs(v - c[key]) / abs(c[key]) if c[key] else abs(v)
            worst = max(worst, rel)
            print(f"{c['k']:>3} {c['b']:>3} {key:<22} {c[key]:>14.6f} {v:>14.6f} {rel:>10.2e}")
    print(f"\nlargest relative difference: {worst:.2e} (goal ≤ 1e-6)")
    print(json.dumps({"cells": len(cells), "max_rel_diff": worst}))
    return 0 if worst <= 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
