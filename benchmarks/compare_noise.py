"""The run-to-run noise compare's statistics are tested against (docs/design/compare.md): N runs of one
configuration in a row, each the closed loop compare runs, their figures written to a JSON file.

    python benchmarks/compare_noise.py [--runs 40] [--engine null] [--null-ttft-ms 5] [--null-itl-ms 2]
                                       [--requests 8] [--max-tokens 16] [--out tests/data/compare_null_noise.json]

The default is the null engine (SIMULATED: a fixed schedule; what moves between its runs is this machine's
harness: its scheduler, sleeps and queues), the configuration tests/integration/test_compare.py's CLI run uses;
tests/integration/test_compare.py draws its simulated per-run figures from the file's relative deviations. It prints the
runs' CV and the spread (max ÷ min) of the figure.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--engine", default="null", choices=["null", "llama", "mlx"],
                    help="compare's side: its engine with its default model, K = 1 (null: SIMULATED, a fixed schedule)")
    ap.add_argument("--null-ttft-ms", type=float, default=5.0)
    ap.add_argument("--null-itl-ms", type=float, default=2.0)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--metric", default="tok/s")
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "compare_null_noise.json"))
    a = ap.parse_args(argv)
    from engines.registry import ENGINES
    from measure.control.bench.compare import LiveSides, Side, metric
    from plans import local_plan

    m = metric(a.metric)
    e = ENGINES[a.engine]
    null = e.simulated  # compare's null side: the plan of the engine it stands in for, the null engine's schedule
    a.options = f"--engine {a.engine}" + (f" --null-ttft-ms {a.null_ttft_ms:g} --null-itl-ms {a.null_itl_ms:g}"
                                          if null else "")
    side = Side("A", a.options, local_plan(e.plan_engine if null else a.engine, a.max_tokens),
                {"ttft_s": a.null_ttft_ms / 1e3, "itl_s": a.null_itl_ms / 1e3} if null else None)
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        sides = LiveSides([side], 1, a.requests, Path(tmp), m, lambda line: None)
        try:
            t0 = time.monotonic()
            for i in range(a.runs):
                figures.append(sides.run_one("A", i))
            took = time.monotonic() - t0
        finally:
            sides.close()
    mean = statistics.fmean(figures)
    cv = statistics.stdev(figures) / mean
    res = {"what": f"{a.runs} runs in a row of compare's closed loop: 1 user × {a.requests} requests × "
                   f"{a.max_tokens} tokens, {a.options}" + (" (SIMULATED engine)" if "null" in a.options else ""),
           "metric": m.name, "figures": [round(x, 4) for x in figures], "mean": round(mean, 4), "cv": round(cv, 5),
           "seconds": round(took, 1), "machine": platform.platform(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                            time.gmtime())}
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"{a.runs} runs of {a.options}: {m.name} mean {mean:.4g}, CV {cv:.2%}, max ÷ min "
          f"{max(figures) / min(figures):.3f}, {took:.1f} s → {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
