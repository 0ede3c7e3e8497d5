"""A mixture of experts on this machine: the roofline's tok/s against the measured, in batch mode at B = 1, 2, 4,
8 and as K = 1, 2 instances (docs/design/model-reads.md).

The model is made here (engines/gguf_synth.py: llama.cpp's Mixtral layout, random Q8_0 weights, 16 experts of which
2 a token, 8 layers, 0.45 GB; speed does not depend on the weights' values) and never committed. Each run
probes llama.cpp on this model (its own kernels and its own batch: a probe per model, cached), then runs
`inference-top bench` over it, whose summary carries the roofline's predicted tok/s beside the measured. The last
line is one JSON object: per level the predicted and measured tok/s and the error, the worst error, and the
bandwidth product (the bytes a token really reads × tok/s) against the attainable line.

Goal (issue 42): |predicted − measured| ÷ measured ≤ 15 % at B = 1..8. The machine must be quiet: llama.cpp's
threads wait on each other every step, so another process on a core slows a step several times over.

    python benchmarks/moe.py [--out DIR] [--requests 8] [--max-tokens 48] [--reps 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engines.gguf_synth import SynthShape, write_model  # noqa: E402


def bench(model: Path, out: Path, a: argparse.Namespace, *level: str) -> list[dict]:
    cmd = [sys.executable, "-m", "tui.cli", "bench", "--model", str(model), "--requests", str(a.requests),
           "--max-tokens", str(a.max_tokens), "--reps", str(a.reps), "--out", str(out), *level]
    print("$", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    rows: list[dict] = json.loads((out / "summary.json").read_text())
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="out/moe", help="where the model and the runs go (default out/moe)")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--reps", type=int, default=2)
    a = p.parse_args()
    out = Path(a.out)
    model = out / "moe-16x1024-top2.gguf"
    if not model.exists():
        write_model(model, SynthShape())
    levels = {}
    for r in bench(model, out / "batch", a, "--k", "1", "--b", "1,2,4,8"):
        levels[f"B={r['b']}"] = r
    for r in bench(model, out / "instances", a, "--k", "1,2"):
        levels[f"K={r['k']}"] = r
    rows, worst = {}, 0.0
    for name, r in levels.items():
        pred, meas = r.get("predicted_output_throughput"), r.get("output_throughput")
        err = (pred - meas) / meas if pred and meas else None
        if err is not None and name.startswith("B="):
            worst = max(worst, abs(err))
        rows[name] = {"predicted_tps": pred, "measured_tps": meas, "error": None if err is None else round(err, 4),
                      "tpot_ms": r.get("median_tpot_ms"), "predicted_tpot_ms": r.get("predicted_tpot_ms"),
                      "bandwidth_gbps": r.get("bandwidth_gbps"), "cv": r.get("cv")}
        print(f"{name:>5}: predicted {pred or 0:7.1f} tok/s, measured {meas or 0:7.1f}"
              + (f" ({err:+.1%})" if err is not None else "") + f", bandwidth {r.get('bandwidth_gbps') or 0:.2f} GB/s")
    from measure.machine import ceilings

    att = ceilings.get().attainable_gbps
    top_bw = max((r["bandwidth_gbps"] or 0.0) for r in rows.values())
    print(json.dumps({"model": str(model), "levels": rows, "worst_error_b1_8": round(worst, 4),
                      "goal": {"worst_error": 0.15, "met": worst <= 0.15},
                      "attainable_gbps": att, "max_bandwidth_gbps": top_bw,
                      "bandwidth_below_attainable": bool(att and top_bw <= att)}))


if __name__ == "__main__":
    main()
