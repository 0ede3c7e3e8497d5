"""`inference-top`: the dashboard by default (its options checked here, then tui/app.py over the live composition
root, measure/control/live/start.py); a subcommand (bench, tune, compare, plan, server-vs-engine, report, probe,
replay) is handed to its own module (`command`: tui/*_cmd.py).

Every bad input ends in one line on stderr that says what was wrong and what to do, and exit code 2;
the measurement core is imported lazily so `bench` never loads textual.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tui.options import DASH_MAX_TOKENS, EXIT_FAILED, build_parser, fail, run_plan, writable

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE

if TYPE_CHECKING:
    from measure.machine.ray_cluster import ClusterSpec


def command(name: str) -> Callable[[list[str]], int] | None:
    """The subcommand `name`'s entry (None: not a subcommand, the dashboard's options), its module imported only
    when it runs: each subcommand is its own module (tui/*_cmd.py), and --help or a bench loads no other's."""
    if name == "bench":
        from tui.bench_cmd import bench_main as run
    elif name == "tune":  # docs/design/tune.md
        from tui.tune_cmd import tune_main as run
    elif name == "compare":  # docs/design/compare.md
        from tui.compare_cmd import compare_main as run
    elif name == "plan":  # docs/design/model-reads.md
        from tui.plan_cmd import plan_main as run
    elif name == "server-vs-engine":  # docs/design/server-vs-engine.md
        from tui.server_vs_engine_cmd import server_vs_engine_main as run
    elif name == "report":
        from tui.report_cmd import report_main as run
    elif name == "probe":
        from tui.report_cmd import probe_main as run
    elif name == "replay":
        from tui.report_cmd import replay_main as run
    else:
        return None
    return run


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # stdout's reader went away (`inference-top plan | head -3`, `| grep -q KV`): stop without a traceback, with
        # the status a tool killed by SIGPIPE has (128 + 13), and point stdout at /dev/null so that the interpreter's
        # last flush at exit cannot raise again (the recipe of Python's signal module documentation)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and (run := command(argv[0])) is not None:
        return run(argv[1:])
    dash, _ = build_parser()
    args = dash.parse_args(argv)
    if args.record:
        writable(Path(args.record), "--record", folder=False)
    plan = run_plan(args, default_max_tokens=DASH_MAX_TOKENS)
    if args.arrivals or args.speed or getattr(plan.workload, "times_s", None) is not None:
        fail("--arrivals, --speed and trace: workloads are bench's (a level of N requests): run inference-top "
             "bench with them; the dashboard takes --rate (Poisson) or closed-loop users")
    if refusal := plan.start_refusal():
        fail(refusal)
    plan.engine_baseline = _baseline(args.baseline, plan.engine_is_remote) if args.baseline else None
    _check_peers(args.peer)
    ray = _live_ray(args, plan)
    from measure.sources.base import SourceError
    from tui.app import run_dashboard

    try:
        return run_dashboard(plan, refresh_hz=args.refresh, record=args.record, brake=not args.no_brake,
                             prometheus=(args.prometheus_addr, args.prometheus) if args.prometheus else None,
                             peers=args.peer, ray=ray)
    except SourceError as exc:
        fail(str(exc), EXIT_FAILED)
    except ValueError as exc:  # cluster.ClusterError: no Ray, no cluster at --ray, the clients not placed
        fail(str(exc))


def _check_peers(peers: list[str] | None) -> None:
    from measure.control.live.peers import peer_url

    for u in peers or ():
        try:
            peer_url(u)
        except ValueError as exc:
            fail(str(exc))


def _baseline(path: str, remote: bool) -> dict[int, float]:
    from measure.control.bench.server_vs_engine import engine_baseline

    if not remote:
        fail("--baseline compares a server with its engine: give --engine http --url …")
    try:
        return engine_baseline(path)
    except ValueError as exc:
        fail(str(exc))


def _live_ray(args, plan) -> ClusterSpec | None:
    """The dashboard's --ray, --clients, --weights checked: the address, N (None: a client per node), weights."""
    if not (args.ray or args.clients or args.weights):
        return None
    from measure.control.bench.cluster import ClusterError, parse_weights
    from measure.machine.ray_cluster import ClusterSpec

    if not args.ray:
        fail("--clients and --weights go with --ray ADDRESS|auto (the Ray cluster the client actors run on)")
    if not plan.engine_is_remote:
        fail("--ray drives clients of a server: give --engine http --url … (the server every node can reach)")
    if args.peer:
        fail("--ray shows one row per client actor itself: drop --peer")
    try:
        weights = parse_weights(args.weights, args.clients)
    except ClusterError as exc:
        fail(str(exc))
    return ClusterSpec(args.ray, args.clients or (len(weights) if weights else None), weights)


if __name__ == "__main__":
    sys.exit(main())
