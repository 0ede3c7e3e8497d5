"""`inference-top bench`: headless sweeps. The options checked here (bench's own refusals, --segment and
--start-at), the sweep's settings made from the plan (SweepConfig.from_plan), then the bench's composition root
(measure/control/bench/start.py: the sweep or --find's knee search, the summary and the table) or --ray's client
actors on a Ray cluster (measure/control/bench/cluster.py); what it ran said in one last line where it did not
finish. Every bad input is one line and exit 2; a run that fails is one line and exit 1. The measurement core is
imported lazily (--help loads none of it)."""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from tui.options import (BENCH_MAX_TOKENS, EXIT_FAILED, build_parser, fail, run_plan, shown_argv, sigterm_to_exit,
                         writable)
from tui.signals import hold


def bench_main(argv: list[str]) -> int:
    _, parser = build_parser()
    args = parser.parse_args(argv)
    from measure.control.bench.start import BenchIO, Find, client_share, run_bench
    from measure.control.bench.sweep import SweepConfig
    from measure.sources.base import SourceError

    plan = run_plan(args, default_max_tokens=BENCH_MAX_TOKENS)
    ks = _bench_checks(args, plan)
    client = _client_args(args, plan, ks) if args.segment or args.start_at else None
    out = Path(args.out or f"out/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    writable(out, "--out", folder=True)
    cfg = SweepConfig.from_plan(plan, ks, out, args.requests, args.reps, args.contexts, args.cell_timeout)
    if args.ray or args.clients or args.weights:
        return ray_bench(args, plan, cfg, out, argv)
    clients_header = client_share(plan, cfg, *client) if client else {}
    header = {"command": "bench", "argv": shown_argv(argv), "ks": cfg.ks, "bs": cfg.bs, "mode": plan.mode,
              "requests": args.requests, "reps": args.reps, "contexts": args.contexts, **clients_header,
              **plan.http_header()}
    sigterm_to_exit()
    io = BenchIO(say=lambda m: print(m, flush=True), on_interrupt=hold,  # a second Ctrl-C must not cut the cleanup
                 warn=lambda m: print(f"inference-top: warning: {m}", file=sys.stderr, flush=True))
    try:
        run = run_bench(plan, cfg, header, io, Find(args.find, args.target, args.rate) if args.find else None,
                        clients_header)
    except SourceError as exc:
        fail(f"{exc} (records so far are in {out}/records.jsonl)", EXIT_FAILED)
    if run.interrupted:
        code, why = run.interrupted
        fail(f"interrupted ({why}): {sum(c.ok for c in run.cells)} finished cells in "
             f"{out}/summary.json, the cut one marked; records so far in {out}/records.jsonl", code)
    if run.problems:
        fail("; ".join(run.problems), EXIT_FAILED)
    return 0


def _bench_checks(args, plan) -> list[int]:
    """bench's own refusals (--find's, too few --requests), --requests' default, --find's default SLO; the Ks."""
    if args.find and (args.arrivals or args.speed or getattr(plan.workload, "times_s", None) is not None
                      or plan.sessions):
        fail("--find sets its own arrivals (users, or Poisson rates): drop --arrivals, --speed, --turns and trace:")
    args.requests = args.requests or len(getattr(plan.workload, "times_s", None) or ()) or 16
    ks = plan.sweep_ks
    most = args.users or max(ks) * max(plan.bs or [1])
    if args.find and not 0 < args.target <= 1:
        fail(f"--target {args.target:g} must be a share of requests in (0, 1], e.g. 0.9")
    if args.find and plan.slo is None:
        from presets import slo

        plan.slo = slo("interactive")
    if args.requests < most and not args.force and not plan.arrivals and not args.find:
        fail(f"--requests {args.requests} is fewer than K × B = {most}: the largest cell could never run "
             f"{most} streams at once; give --requests {most} or more (or --force to run it anyway, labelled "
             "with its achieved concurrency)")
    return ks


def ray_bench(args, plan, cfg, out: Path, argv: list[str]) -> int:
    """bench --ray: the load from client actors on a Ray cluster (measure/control/bench/cluster.py, docs/design/ray.md)."""
    from measure.control.bench.cluster import ClusterError, parse_weights, refusal
    from measure.control.bench.start import run_ray_bench
    from measure.machine.ray_cluster import ClusterSpec

    if not args.ray:
        fail("--clients and --weights go with --ray ADDRESS|auto (the Ray cluster the client actors run on)")
    if args.segment or args.start_at:
        fail("--ray splits the schedule and starts the clients itself: drop --segment and --start-at")
    cells = len(cfg.ks) * len(cfg.bs) * len(args.contexts or [None])
    if why := refusal(plan, cells, args.reps, bool(args.find)):
        fail(why)
    say = lambda m: print(m, flush=True)  # noqa: E731
    sigterm_to_exit()
    got: list[int] = []  # the signal, kept: inside a Ray call its SystemExit comes back as SystemExit(1)
    on_term = signal.getsignal(signal.SIGTERM)

    def note(signum, frame):
        got.append(signum)
        if callable(on_term):  # (sigterm_to_exit's: SystemExit)
            on_term(signum, frame)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, note)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, note)
    try:
        weights = parse_weights(args.weights, args.clients)
        n = args.clients or (len(weights) if weights else None)  # None: one per node of the cluster
        header = {"command": "bench", "argv": shown_argv(argv), "ks": cfg.ks, "bs": cfg.bs, "mode": plan.mode,
                  "requests": args.requests, "reps": 1, "contexts": None, "seed": getattr(plan.arrivals, "seed", None)}
        run = run_ray_bench(ClusterSpec(args.ray, n, weights), plan, cfg, header, say)
    except ClusterError as exc:
        fail(str(exc))
    except (KeyboardInterrupt, SystemExit) as exc:  # the actors were stopped on the way out (run_cluster)
        hold()
        code = 130 if isinstance(exc, KeyboardInterrupt) else 128 + got[-1] if got else \
            (exc.code if isinstance(exc.code, int) else 1)
        fail(f"interrupted: the client actors stopped; the records that had arrived are in {out}/records.jsonl", code)
    if run.problems:
        fail("; ".join(run.problems), EXIT_FAILED)
    return 0


def _client_args(args, plan, ks) -> tuple[tuple[int, int], float | None]:
    """--segment and --start-at checked: ((i, N), the start in unix seconds or None). One line on a bad one."""
    from measure.core.clients import parse_segment, parse_start_at

    try:
        seg = parse_segment(args.segment) if args.segment else (1, 1)
        start = parse_start_at(args.start_at) if args.start_at else None
    except ValueError as exc:
        fail(str(exc))
    if args.find or getattr(plan, "sessions", None):
        fail("--segment and --start-at run a sweep's load: not with --find or --turns")
    if seg[1] > 1 and getattr(plan.arrivals, "after", None) is not None:
        fail(f"--segment: --workload {plan.workload.key}'s follow-ups wait for their parents' answers, which one "
             "client sees only for its own requests: run it from one client")
    if seg[1] > 1:
        if not plan.arrivals:
            fail(f"--segment {args.segment} splits an open-loop schedule (--rate, --arrivals or a trace:): in a closed "
                 "loop each client's users make their own times; run the clients without --segment (report --combine "
                 "sums them)")
        cells = len(ks) * len(plan.bs or [1]) * len(args.contexts or [None])
        if cells > 1 or args.reps > 1:
            fail(f"--segment splits one load: one cell and one rep (this asks {cells} cells × {args.reps} reps); run "
                 "one bench per cell, each with its own --start-at")
    return seg, start
