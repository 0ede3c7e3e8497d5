"""A soak: the dashboard for --minutes (default 20) at K=2 in a 160×48 tmux pane, stepping K every few
minutes (+ then −), recording the session. Prints the dashboard process's RSS growth after warmup and its
CPU (% of one core, workers excluded) over the first and the last minute. Goals (issue 17): RSS growth
≤ 10 MB, CPU ≤ 3 % throughout (issue 23). Also checks that no worker is left after `q` and that the recording parses.

    python benchmarks/soak.py [--minutes 20] [--step-every 4] [--k 2]

The last line is one JSON object: {"rss_growth_mb": …, "cpu_start": …, "cpu_end": …, "orphans": …}.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure.machine.recorder import read_jsonl  # noqa: E402

EXE = str(Path(sys.executable).parent / "inference-top")


def app_process(session: str, rec: Path, k: int) -> psutil.Process:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pane = int(subprocess.run(["tmux", "display", "-p", "-t", session, "#{pane_pid}"], capture_output=True,
                                  text=True).stdout.strip())
        pp = psutil.Process(pane)
        app = pp if "inference-top" in " ".join(pp.cmdline()) else next(
            (c for c in pp.children() if "inference-top" in " ".join(c.cmdline())), None)
        if app and rec.exists() and rec.read_text().count('"kind":"request"') >= k:
            return app
        time.sleep(0.5)
    raise SystemExit("the dashboard did not start serving within 120 s")


def cpu_over(p: psutil.Process, seconds: float) -> float:
    c0, t0 = p.cpu_times(), time.monotonic()
    time.sleep(seconds)
    c1 = p.cpu_times()
    return ((c1.user - c0.user) + (c1.system - c0.system)) / (time.monotonic() - t0) * 100


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--step-every", type=float, default=4.0, help="minutes between K steps (default 4)")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="it-soak-"))
    rec = tmp / "soak.jsonl"
    session = f"soak{os.getpid()}"
    cmd = f"{EXE} --k {a.k} --max-tokens {a.max_tokens} --record {rec}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "48", cmd], check=True)
    try:
        app = app_process(session, rec, a.k)
        time.sleep(30)  # warmup: charts filled, caches made
        rss0 = app.memory_info().rss
        cpu_start = cpu_over(app, 60)
        end = time.monotonic() + a.minutes * 60 - 90
        next_step, up = time.monotonic() + a.step_every * 60, True
        rss_max = rss0
        while time.monotonic() < end - 60:
            time.sleep(5)
            rss_max = max(rss_max, app.memory_info().rss)
            if time.monotonic() >= next_step:
                subprocess.run(["tmux", "send-keys", "-t", session, "+" if up else "-"])
                up, next_step = not up, time.monotonic() + a.step_every * 60
        cpu_end = cpu_over(app, 60)
        rss1 = app.memory_info().rss
        kids = app.children(recursive=True)
        subprocess.run(["tmux", "send-keys", "-t", session, "q"])
        time.sleep(4)
        orphans = sum(1 for c in kids if c.is_running() and c.status() != psutil.STATUS_ZOMBIE
                      and "resource_tracker" not in " ".join(c.cmdline()))
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], stderr=subprocess.DEVNULL)
    lines = read_jsonl(rec)
    growth = (rss1 - rss0) / 1e6
    print(f"{a.minutes:g} min at K={a.k} (K stepped every {a.step_every:g} min), {len(lines.records)} requests recorded, "
          f"{len(lines.samples)} samples")
    print(f"dashboard RSS after warmup {rss0 / 1e6:.1f} MB → end {rss1 / 1e6:.1f} MB (growth {growth:+.1f} MB, "
          f"peak {rss_max / 1e6:.1f} MB; goal ≤ 10 MB)")
    print(f"dashboard CPU: first minute {cpu_start:.1f} %, last minute {cpu_end:.1f} % of one core (goal ≤ 3 %)")
    print(f"processes left after q: {orphans}")
    print(json.dumps({"rss_growth_mb": round(growth, 2), "rss_peak_mb": round(rss_max / 1e6, 1),
                      "cpu_start": round(cpu_start, 2), "cpu_end": round(cpu_end, 2), "orphans": orphans,
                      "requests": len(lines.records)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
