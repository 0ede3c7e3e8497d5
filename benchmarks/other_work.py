"""Threads beside other work (docs/design/wall.md "Threads beside other work"): does the thread count the bench note
and the dashboard's cores wall suggest beat the default, with other work on the machine?

Three runs of `inference-top bench --k 1` on the embedded model (or --model), each as a user runs it: alone on
the default threads (every core), then beside N busy loops (default: half the cores) on the default threads, then
beside them on the threads the second run's note says to keep (its `other_work`: "… try --threads T"). Per run:
tok/s, TPOT p50, the cores other work held (the cell's `other_work_cores`) and the note; then the ratio of the
suggested threads' tok/s to the default's beside the loops. Ends with one JSON line.

    python benchmarks/other_work.py                       # 1 loop on 2 cores, 16 requests of 32 tokens
    python benchmarks/other_work.py --loops 1 --requests 8
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from measure.machine.probes import physical_cores  # noqa: E402


def bench(args: argparse.Namespace, out: Path, threads: int | None) -> dict[str, Any]:
    """One `bench --k 1` run's cell (summary.json's first) and the run's exit status."""
    cmd = [sys.executable, "-m", "tui.cli", "bench", "--k", "1", "--requests", str(args.requests), "--max-tokens",
           str(args.max_tokens), "--out", str(out)]
    if threads:
        cmd += ["--threads", str(threads)]
    if args.model:
        cmd += ["--model", args.model]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"bench failed ({' '.join(cmd[2:])}): {p.stderr.strip().splitlines()[-1:]}")
    cell = json.loads((out / "summary.json").read_text())[0]
    return {"threads": threads or physical_cores(), "tok_s": cell.get("output_throughput"),
            "tpot_p50_ms": cell.get("median_tpot_ms"), "other_work_cores": cell.get("other_work_cores"),
            "other_work": cell.get("other_work")}


def beside_loops(n: int, run: Any) -> Any:
    """`run()` with `n` busy loops (plain Python, one core each) running beside it; the loops ended after."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        return run()
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def line(name: str, r: dict[str, Any]) -> str:
    return (f"{name:<34} threads {r['threads']:>2}  {r['tok_s']:7.1f} tok/s  TPOT p50 {r['tpot_p50_ms']:7.1f} ms  "
            f"other work {r['other_work_cores'] if r['other_work_cores'] is not None else '—'} cores"
            + (f"  note: {r['other_work']}" if r.get("other_work") else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--loops", type=int, default=max(1, physical_cores() // 2), help="busy loops beside the bench")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", help="a GGUF (default: the embedded model)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a bench run may take")
    a = ap.parse_args()
    if a.loops < 1:
        raise SystemExit(f"--loops {a.loops}: give 1 or more busy loops (the point is other work beside the bench)")
    with tempfile.TemporaryDirectory(prefix="other-work-") as tmp:
        alone = bench(a, Path(tmp) / "alone", None)
        print(line("alone", alone), flush=True)
        busy = beside_loops(a.loops, lambda: bench(a, Path(tmp) / "busy", None))
        print(line(f"beside {a.loops} busy loop(s)", busy), flush=True)
        m = re.search(r"try --threads (\d+)", busy.get("other_work") or "")
        if m is None:
            print("the bench's note suggested no other thread count: nothing to compare")
            print(json.dumps({"alone": alone, "busy": busy, "suggested": None, "ratio": None}))
            return
        kept = beside_loops(a.loops, lambda: bench(a, Path(tmp) / "kept", int(m.group(1))))
        print(line(f"beside them on --threads {m.group(1)}", kept), flush=True)
    ratio = kept["tok_s"] / busy["tok_s"] if busy["tok_s"] else None
    print(f"the suggested threads' tok/s ÷ the default's beside the loops: {ratio:.2f}" if ratio else "no ratio")
    print(json.dumps({"alone": alone, "busy": busy, "suggested": kept, "ratio": round(ratio, 3) if ratio else None}))


if __name__ == "__main__":
    main()
