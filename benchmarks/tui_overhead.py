"""What does the dashboard cost, with plotext's charts and with the braille renderer it replaced? One run measures
the same load headless and with each build of the dashboard open, side by side.

Each round runs K workers on the embedded model, closed loop K users, for --seconds of steady state:
  headless:  inference-top bench (the same fleet, no UI)
  plotext:   the dashboard as it is (tui/charts.py draws with plotext) in a tmux pane of each --sizes (160×48
             by default; 80×24 has its own layout: tui/layout.py), recording
  braille:   the same dashboard drawing with the hand-written braille renderer it replaced (draw() of
             tui/charts.py as it stood at --braille-rev; every other file as it is now), from a copy of tui/
The two dashboards take turns first from one round to the next (and the sizes, each dashboard at each size). Prints
each dashboard process's CPU % of one core (its own threads, workers excluded), aggregate tok/s with it ÷ headless,
plotext's CPU ÷ braille's, and each renderer's in-process CPU for drawing the three live charts once (180 s at
2 Hz, 94 × 12 cells); the last line is JSON (a size other than the first: its figures under "plotext@80x24").
Goals: ≤ 3 % of a core and ≥ 0.97 (docs/design/charts.md), at 80×24 no more CPU than at 160×48. Both dashboards
redraw their charts at --refresh (the dashboard's default, 0.5: every other 1 Hz repaint of the numbers).

    python benchmarks/tui_overhead.py [--rounds 2] [--seconds 40] [--k 2] [--refresh 0.5] [--renderers plotext,braille]
                                      [--sizes 160x48,80x24]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
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
from measure.machine.recorder import read_jsonl  # noqa: E402

EXE = str(Path(sys.executable).parent / "inference-top")
START_S = 600.0  # seconds a dashboard has to serve its first K requests (the probe, twice on a busy machine)
BRAILLE_REV = "1f0385a"  # the last commit whose tui/charts.py drew its own braille (before plotext came back)


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


def braille_tree(rev: str, tmp: Path) -> Path:
    """A copy of tui/ whose charts draw with the braille renderer: tui/charts.py as it stood at `rev` is
    tui/_braille_charts.py, and today's tui/charts.py takes its draw() (the widgets, the row-by-row repaint and
    every other file stay as they are now: only the renderer differs). A folder to run the dashboard from."""
    where = tmp / f"braille-{rev}"
    shutil.copytree(ROOT / "tui", where / "tui", ignore=shutil.ignore_patterns("__pycache__"))
    p = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:tui/charts.py"], capture_output=True, text=True)
    if p.returncode != 0 or "class Grid" not in p.stdout:
        sys.exit(f"tui_overhead: no braille renderer in tui/charts.py at {rev} ({p.stderr.strip() or 'no Grid'}): "
                 f"run it in a git clone of the project, or give --braille-rev a commit that has it")
    (where / "tui" / "_braille_charts.py").write_text(p.stdout)
    with open(where / "tui" / "charts.py", "a") as f:
        f.write("\nfrom tui._braille_charts import draw  # noqa: E402,F811  (tui_overhead: the braille renderer)\n")
    return where


def dashboard(k: int, seconds: float, max_tokens: int, refresh: float, tmp: Path, path: Path,
              size: tuple[int, int] = (160, 48)) -> tuple[float, float]:
    """The dashboard run with `path` first on PYTHONPATH (the project root, or the braille copy of tui/) in a
    tmux pane of `size` (columns, rows): (its process's CPU % of one core over `seconds` of steady load, its
    recording's steady tok/s)."""
    rec = tmp / f"dash-{time.monotonic_ns()}.jsonl"
    name = f"tuiov{os.getpid()}"
    env = f"PYTHONPATH={path}" + "".join(f" {k}={os.environ[k]}" for k in ("INFERENCE_TOP_CACHE", "INFERENCE_TOP_LOGS")
                                          if k in os.environ)  # a tmux server started elsewhere has not these
    cmd = (f"env {env} {sys.executable} -m tui.cli --k {k} --max-tokens {max_tokens} --refresh {refresh} "
           f"--record {rec}")
    # started in `path`: `python -m` puts the working folder first on sys.path, so its tui/ is the one imported
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", str(size[0]), "-y", str(size[1]), "-c", str(path),
                    cmd], check=True)
    subprocess.run(["tmux", "set-option", "-t", name, "remain-on-exit", "on"], check=True)  # to show a crash
    try:
        # wait for the app process and for every worker to be ready and serving
        deadline = time.monotonic() + START_S
        app, serving = None, False
        while time.monotonic() < deadline:
            if subprocess.run(["tmux", "display", "-p", "-t", name, "#{pane_dead}"], capture_output=True,
                              text=True).stdout.strip() == "1":
                screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", name], capture_output=True,
                                        text=True).stdout.strip()
                sys.exit(f"tui_overhead: the dashboard run from {path} exited:\n{screen[-2000:]}")
            pane_pid = int(subprocess.run(["tmux", "display", "-p", "-t", name, "#{pane_pid}"],
                                          capture_output=True, text=True).stdout.strip())
            pp = psutil.Process(pane_pid)
            app = pp if "tui.cli" in " ".join(pp.cmdline()) else next(
                (c for c in pp.children(recursive=True) if "tui.cli" in " ".join(c.cmdline())), None)
            serving = bool(app and rec.exists() and rec.read_text().count('"kind":"request"') >= k)
            if serving:
                break
            time.sleep(0.5)
        if not serving:  # (measured before, its CPU was the probe's and its recording had no request)
            sys.exit(f"tui_overhead: the dashboard was not serving {k} requests within {START_S:g} s "
                     "(a busy machine probes twice at start: give it a quieter moment)")
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


def chart_ms(charts_py: Path, repeat: int = 30) -> float:
    """One renderer's draw() of the three live charts once (180 s at 2 Hz, 94 × 12 cells each, as at 160×48), in
    this process: the median of `repeat` drawings, milliseconds."""
    spec = importlib.util.spec_from_file_location(f"charts_{abs(hash(charts_py))}", charts_py)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    xs = [i * 0.5 for i in range(360)]
    tps = [60 + 8 * math.sin(x / 9) for x in xs]
    tpot = [28 + 3 * math.sin(x / 5) for x in xs]
    charts = [
        ("aggregate throughput [tok/s]", [("tok/s (5 s window)", xs, tps, "cyan", "line"),
                                          ("predicted", xs, [66.0] * 360, "red", "dash")], []),
        ("per-stream TPOT [ms]", [("p50", xs, tpot, "green", "line"), ("p90", xs, [t * 1.1 for t in tpot], "yellow",
                                                                              "line"),
                                  ("predicted", xs, [30.0] * 360, "red", "dash")], []),
        ("bandwidth product [GB/s]", [("GB/s", xs, [t * 0.25 for t in tps], "cyan", "line")],
         [(25.0, "spec 25 GB/s", "red"), (19.0, "attainable 19.0 GB/s", "yellow")]),
    ]
    times = []
    for _ in range(repeat):
        t0 = time.process_time()  # this process's CPU: other work on the machine does not count
        for title, series, hl in charts:
            mod.draw(94, 12, title, series, hl, [(60.0, "K=2")], (0.0, 180.0))
        times.append((time.process_time() - t0) * 1e3)
    return statistics.median(times)


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """"160x48,80x24" → [(160, 48), (80, 24)]; exits with one line on anything else."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        cols, _, rows = part.lower().replace("×", "x").partition("x")
        if not (cols.isdigit() and rows.isdigit() and int(cols) >= 40 and int(rows) >= 12):
            sys.exit(f"tui_overhead: --sizes {text!r}: give COLUMNSxROWS, e.g. 160x48,80x24 (at least 40x12)")
        out.append((int(cols), int(rows)))
    if not out:
        sys.exit(f"tui_overhead: --sizes {text!r}: give at least one COLUMNSxROWS")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--refresh", type=float, default=0.5, help="chart redraws a second (the dashboard's default 0.5)")
    ap.add_argument("--renderers", default="plotext,braille", help="which dashboards: plotext, braille or both")
    ap.add_argument("--braille-rev", default=BRAILLE_REV, help="the commit whose tui/charts.py is the braille one")
    ap.add_argument("--sizes", default="160x48", help="the terminal sizes each dashboard runs at, e.g. 160x48,80x24 "
                    "(the braille dashboard at the first only)")
    a = ap.parse_args()
    sizes = parse_sizes(a.sizes)
    names = [n.strip() for n in a.renderers.split(",") if n.strip()]
    if not names or any(n not in ("plotext", "braille") for n in names):
        sys.exit(f"tui_overhead: --renderers {a.renderers!r}: give plotext, braille or plotext,braille")
    if not shutil.which("tmux"):
        sys.exit("tui_overhead: tmux is needed (apt-get install tmux)")
    tmp = Path(tempfile.mkdtemp(prefix="tui-overhead-"))
    paths = {"plotext": ROOT}
    if "braille" in names:
        paths["braille"] = braille_tree(a.braille_rev, tmp)
    renderer = {"plotext": ROOT / "tui" / "charts.py", "braille": paths.get("braille", ROOT) / "tui" / "_braille_charts.py"}
    draw_ms = {n: chart_ms(renderer[n]) for n in names}
    for n in names:
        print(f"{n}: the three charts drawn once in {draw_ms[n]:.1f} ms (in-process, 94 × 12 cells each)", flush=True)
    # each (renderer, size) a run: the braille dashboard at the first size only (it is the old renderer's reference)
    todo = [(n, sizes[0]) for n in names] + [("plotext", sz) for sz in sizes[1:] if "plotext" in names]
    label = {(n, sz): n if sz == sizes[0] else f"{n}@{sz[0]}x{sz[1]}" for n, sz in todo}
    heads: list[float] = []
    runs: dict[str, list[tuple[float, float]]] = {label[t]: [] for t in todo}
    for r in range(a.rounds):
        h = headless(a.k, a.seconds, a.max_tokens, tmp)
        heads.append(h)
        line = f"round {r + 1}: headless {h:6.1f} tok/s"
        for n, sz in todo if r % 2 == 0 else todo[::-1]:  # each takes its turn first
            cpu, d = dashboard(a.k, a.seconds, a.max_tokens, a.refresh, tmp, paths[n], sz)
            runs[label[n, sz]].append((cpu, d))
            line += f" · {label[n, sz]} {d:6.1f} tok/s ({d / h:.3f}), CPU {cpu:.2f} %"
        print(line, flush=True)
    h = statistics.median(heads)
    first = f"{sizes[0][0]}x{sizes[0][1]}"
    out: dict[str, object] = {"k": a.k, "rounds": a.rounds, "seconds": a.seconds, "size": first,
                              "sizes": [f"{c}x{r}" for c, r in sizes], "refresh_hz": a.refresh, "headless_tps": h}
    print(f"\nK={a.k}, {a.rounds} rounds of {a.seconds:g} s, {first.replace('x', '×')}, charts at {a.refresh:g} Hz; "
          f"headless {h:.1f} tok/s")
    for n in names:
        cpu = statistics.median(x[0] for x in runs[n])
        d = statistics.median(x[1] for x in runs[n])
        out[n] = {"cpu_percent": round(cpu, 3), "dashboard_tps": round(d, 2), "ratio": round(d / h, 4),
                  "charts_ms": round(draw_ms[n], 2)}
        print(f"{n:8} dashboard CPU {cpu:.2f} % of one core (goal ≤ 3 %) · tok/s ÷ headless {d / h:.3f} "
              f"(goal ≥ 0.97) · charts {draw_ms[n]:.1f} ms a drawing")
    for key in runs:
        if key in names:
            continue
        cpu = statistics.median(x[0] for x in runs[key])
        d = statistics.median(x[1] for x in runs[key])
        out[key] = {"cpu_percent": round(cpu, 3), "dashboard_tps": round(d, 2), "ratio": round(d / h, 4)}
        print(f"{key:8} dashboard CPU {cpu:.2f} % of one core (goal ≤ 3 %, and no more than at {first}) · "
              f"tok/s ÷ headless {d / h:.3f} (goal ≥ 0.97)")
    if len(names) == 2:
        p, b = out["plotext"], out["braille"]
        assert isinstance(p, dict) and isinstance(b, dict)
        out["cpu_plotext_over_braille"] = round(p["cpu_percent"] / b["cpu_percent"], 3) if b["cpu_percent"] else None
        out["charts_plotext_over_braille"] = round(p["charts_ms"] / b["charts_ms"], 2)
        print(f"plotext ÷ braille: dashboard CPU ×{out['cpu_plotext_over_braille']}, "
              f"chart drawing ×{out['charts_plotext_over_braille']}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
