"""The run-to-run noise compare's statistics are tested against (docs/design.md §27): N runs of one
configuration in a row, each the closed loop compare runs, their figures written to a JSON file.

    python benchmarks/compare_noise.py [--runs 40] [--options "--engine null --null-ttft-ms 5 --null-itl-ms 2"]
                                       [--requests 8] [--max-tokens 16] [--out tests/data/compare_null_noise.json]

The default is the null engine (SIMULATED: a fixed schedule; what moves between its runs is this machine's
harness: its scheduler, sleeps and queues), the configuration tests/test_compare.py's CLI run uses;
tests/test_compare.py draws its simulated per-run figures from the file's relative deviations. It prints the
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
    ap.add_argument("--options", default="--engine null --null-ttft-ms 5 --null-itl-ms 2")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--metric", default="tok/s")
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "compare_null_noise.json"))
    a = ap.parse_args(argv)
    from measure.control.bench.compare import LiveSides, metric
    from tui.compare_cmd import _side

    m = metric(a.metric)
    side, _ = _side("A", ["--max-tokens", str(a.max_tokens)], a.options)
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
