"""What does the dashboard cost? The same load headless and with the dashboard open, in one run.

Each round runs K workers on the embedded model, closed loop K users, for --seconds of steady state:
  headless:  inference-top bench (the same fleet, no UI)
  dashboard: inference-top in a 160×48 tmux pane, recording its requests (--record)
Prints the dashboard process's CPU % of one core (its own threads, workers excluded) and
aggregate tok/s with the dashboard ÷ headless. Goals: ≤ 3 % (issue 23) and ≥ 0.97.

    python benchmarks/tui_overhead.py [--rounds 2] [--seconds 40] [--k 2] [--refresh 1]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure.core import metrics as M  # noqa: E402
from measure.core.recorder import read_jsonl  # noqa: E402

EXE = str(Path(sys.executable).parent / "inference-top")


def steady_throughput(records, skip_s: float) -> float:
    """Tokens ÷ time between the first token after `skip_s` of load and the last token."""
    toks = sorted(t for r in records if r.error is None for t in r.token_ns)
    a = toks[0] + int(skip_s * 1e9)
    b = toks[-1]
    return M.aggregate_tps_from_times(toks, a, b)


def headless(k: int, seconds: float, max_tokens: int, tmp: Path) -> float:
    out = tmp / f"headless-{time.monotonic_ns()}"
    # requests sized to run ≈ `seconds` at the measured rate (≈ 60 tok/s on 2 cores)
    n = max(4, int(seconds * 60 / max_tokens))
    subprocess.run([EXE, "bench", "--k", str(k), "--requests", str(n), "--max-tokens", str(max_tokens),
                    "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    _, recs, _ = read_jsonl(out / "records.jsonl")
    return steady_throughput(recs, 3.0)


def dashboard(k: int, seconds: float, max_tokens: int, refresh: float, tmp: Path) -> tuple[float, float]:
    rec = tmp / f"dash-{time.monotonic_ns()}.jsonl"
    name = f"tuiov{os.getpid()}"
    cmd = f"{EXE} --k {k} --max-tokens {max_tokens} --refresh {refresh} --record {rec}"
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "48", cmd], check=True)
    try:
        # wait for the app process and for every worker to be ready and serving
        deadline = time.monotonic() + 120
        app = None
        while time.monotonic() < deadline:
            pane_pid = int(subprocess.run(["tmux", "display", "-p", "-t", name, "#{pane_pid}"],
                                          capture_output=True, text=True).stdout.strip())
            pp = psutil.Process(pane_pid)
            app = pp if "inference-top" in " ".join(pp.cmdline()) else next(
                (c for c in pp.children() if "inference-top" in " ".join(c.cmdline())), None)
            if app and rec.exists() and rec.read_text().count('"kind":"request"') >= k:
                break
            time.sleep(0.5)
        time.sleep(3.0)
        c0 = app.cpu_times()
        t0 = time.monotonic()
        time.sleep(seconds)
        c1 = app.cpu_times()
        cpu = ((c1.user - c0.user) + (c1.system - c0.system)) / (time.monotonic() - t0) * 100
        subprocess.run(["tmux", "send-keys", "-t", name, "q"])
        time.sleep(3)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], stderr=subprocess.DEVNULL)
    _, recs, _ = read_jsonl(rec)
    return cpu, steady_throughput(recs, 3.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--refresh", type=float, default=1.0)
    a = ap.parse_args()
    if not shutil.which("tmux"):
        sys.exit("tui_overhead: tmux is needed (apt-get install tmux)")
    tmp = Path(tempfile.mkdtemp(prefix="tui-overhead-"))
    rows = []
    for r in range(a.rounds):
        h = headless(a.k, a.seconds, a.max_tokens, tmp)
        cpu, d = dashboard(a.k, a.seconds, a.max_tokens, a.refresh, tmp)
        rows.append((h, d, cpu))
        print(f"round {r + 1}: headless {h:6.1f} tok/s   dashboard {d:6.1f} tok/s   ratio {d / h:.3f}   "
              f"dashboard CPU {cpu:.1f} % of one core", flush=True)
    h = statistics.median(x[0] for x in rows)
    d = statistics.median(x[1] for x in rows)
    cpu = statistics.median(x[2] for x in rows)
    print(f"\nK={a.k}, {a.rounds} rounds, 160×48, charts at {a.refresh:g} Hz")
    print(f"dashboard process CPU: {cpu:.1f} % of one core (goal ≤ 3 %)")
    print(f"aggregate tok/s with dashboard ÷ headless: {d / h:.3f} (goal ≥ 0.97)")
    print(json.dumps({"cpu_percent": cpu, "ratio": d / h, "headless_tps": h, "dashboard_tps": d}))


if __name__ == "__main__":
    main()
