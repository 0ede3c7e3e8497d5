"""The commands that read what was written: `report` (PNG charts and a Markdown summary from bench outputs and
recordings: measure/control/reports.py), `probe` (this machine's ceilings, measured and cached: measure/machine/
ceilings.py) and `replay` (a recording played back in the dashboard: measure/control/live/replay.py, tui/app.py).
Every bad input is one line and exit 2."""
from __future__ import annotations

import sys
from pathlib import Path

from tui.options import EXIT_FAILED, OneLineParser, fail, positive_float


def report_main(argv: list[str]) -> int:
    """report: charts and a summary of bench outputs and recordings, side by side."""
    p = OneLineParser(prog="inference-top report", description="PNG charts and a Markdown summary from bench "
                      "outputs (--out folders) and dashboard recordings; two or more are drawn side by side.")
    p.add_argument("paths", nargs="+", help="bench output folders, summary.json or records.jsonl, or recordings")
    p.add_argument("--out", default="out/report", help="output folder (default out/report)")
    p.add_argument("--crossover", action="store_true", help="two runs with costs: draw $/Mtok vs concurrency and "
                   "mark the concurrency at which the second becomes cheaper than the first")
    p.add_argument("--combine", action="store_true", help="the paths are several clients' outputs of one load "
                   "(one inference-top per client machine, started together): report them as one run, "
                   "throughput summed per cell and latencies pooled")
    a = p.parse_args(argv)
    from measure.control.reports import report
    from measure.control.bench.runs import ReportError

    if a.combine and a.crossover:
        fail("--combine and --crossover do not go together: combine the clients first, then compare")
    try:
        files, md, warns = report(a.paths, Path(a.out), a.crossover, a.combine)
    except ReportError as exc:
        fail(str(exc))
    for w in warns:
        print(f"inference-top report: warning: {w}", file=sys.stderr)
    for f in files:
        print(f"wrote {f}")
    print(f"wrote {md}")
    return 0


def probe_main(argv: list[str]) -> int:
    """probe: this machine's ceilings (memory read bandwidth, the engine's decode and prefill rates), cached."""
    p = OneLineParser(prog="inference-top probe", description="Measure this machine's ceilings (memory read "
                      "bandwidth, the engine's decode and prefill rates); cached per machine. Seconds.")
    p.add_argument("--rerun", action="store_true", help="measure again even when a result is cached")
    p.add_argument("--json", action="store_true", help="print JSON")
    a = p.parse_args(argv)
    from dataclasses import asdict

    from measure.machine import ceilings

    try:
        c = ceilings.get(rerun=a.rerun, say=lambda t: print(t, file=sys.stderr, flush=True))
    except ceilings.ProbeError as exc:
        fail(str(exc), EXIT_FAILED)
    if a.json:
        import json

        print(json.dumps(asdict(c), indent=2))
    else:
        print(c.describe())
    return 0


def replay_main(argv: list[str]) -> int:
    """replay: a recording played back in the dashboard; no engine starts (docs/design/record.md)."""
    p = OneLineParser(prog="inference-top replay", description="Play a recorded session back in the "
                      "dashboard (no engine starts): p pause, > / < speed, ← / → seek 10 s.")
    p.add_argument("file", help="a recording made with inference-top --record FILE")
    p.add_argument("--speed", type=positive_float, default=1.0, help="playback speed (default 1)")
    a = p.parse_args(argv)
    from measure.control.live.replay import Recording, RecordingError

    try:
        rec = Recording.load(a.file)
    except RecordingError as exc:
        fail(str(exc))
    for w in rec.warnings:
        print(f"inference-top replay: warning: {w}", file=sys.stderr)
    from tui.app import run_replay

    return run_replay(rec, a.speed)
