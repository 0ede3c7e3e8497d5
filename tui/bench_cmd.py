"""`inference-top bench`: headless sweeps (measure/control/bench/): the options checked (bench's own refusals,
--segment and --start-at), the sweep's settings, then the sweep, --find's knee search, or --ray's client actors on a
Ray cluster; summary.json and the table at the end, and an interrupted sweep's finished cells kept. Every bad input
is one line and exit 2; a run that fails is one line and exit 1. The measurement core is imported lazily (--help
loads none of it)."""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tui.options import (BENCH_MAX_TOKENS, EXIT_FAILED, build_parser, fail, run_plan, shown_argv, sigterm_to_exit,
                         writable)
from tui.signals import hold

if TYPE_CHECKING:
    from measure.control.bench.cell import Cell


def bench_main(argv: list[str]) -> int:
    _, parser = build_parser()
    args = parser.parse_args(argv)
    from measure.control.bench.sweep import run_sweep
    from measure.control.wiring import make_source
    from measure.machine.recorder import Recorder
    from measure.sources.base import SourceError

    plan = run_plan(args, default_max_tokens=BENCH_MAX_TOKENS)
    ks = _bench_checks(args, plan)
    client = _client_args(args, plan, ks) if args.segment or args.start_at else None
    out = Path(args.out or f"out/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    writable(out, "--out", folder=True)
    bs = plan.bs or [1]
    cfg = _sweep_config(args, plan, ks, out)
    if args.ray or args.clients or args.weights:
        return ray_bench(args, plan, cfg, out, argv)
    clients_header = _client_start(client, plan, cfg) if client else {}
    recorder = Recorder(out / "records.jsonl", plan.header({
        "command": "bench", "argv": shown_argv(argv), "ks": cfg.ks, "bs": bs, "mode": plan.mode,
        "requests": args.requests, "reps": args.reps, "contexts": args.contexts, **clients_header,
        **plan.http_header()}),
        on_error=lambda m: print(f"inference-top: warning: {m}; the sweep goes on, later records are not kept",
                                 file=sys.stderr, flush=True))

    def new_source():  # the sweep sets each cell's mode, B and batch context itself (made for exactly that cell)
        src = make_source(plan, events=False, on_record=recorder.record, per_cell=True)
        src.start()
        return src

    sigterm_to_exit()
    say = lambda m: print(m, flush=True)  # noqa: E731
    cfg.roofline = plan.roofline(say)
    for line in plan.start_lines(f"{out}/records.jsonl"):
        say(line)
    cells: list[Cell] = []
    source = None
    try:
        source = new_source()
        if args.find:
            return find_main(args, plan, cfg, source, out, say)
        if clients_header:
            _say_start(clients_header, say)
        cells, _, source = run_sweep(source, plan.workload, cfg, say,  # a local source's stuck workers: a fresh one
                                     new_fleet=new_source if source.capabilities().local else None, cells=cells)
    except SourceError as exc:
        fail(f"{exc} (records so far are in {out}/records.jsonl)", EXIT_FAILED)
    except (KeyboardInterrupt, SystemExit) as exc:
        hold()  # a second Ctrl-C must not cut the cleanup (tui/signals.py)
        _bench_interrupted(exc, cfg, cells, out)
    finally:
        if source is not None:
            source.close()
        recorder.close()
    problems = [p for p in (finish_bench(out, cells, say),
                            recorder.failed and f"{recorder.failed}: {recorder.lost} records were not kept (the lines "
                                                "written parse)") if p]
    if problems:
        fail("; ".join(problems), EXIT_FAILED)
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


def _sweep_config(args, plan, ks: list[int], out: Path):
    from measure.control.bench.sweep import SweepConfig

    return SweepConfig(ks=ks, bs=plan.bs or [1], mode=plan.mode, requests=args.requests,
                       max_tokens=plan.max_tokens, reps=args.reps, rate=plan.rate, ignore_eos=plan.ignore_eos,
                       bandwidth_gbps=plan.bandwidth_gbps, cell_timeout_s=args.cell_timeout, out_dir=out,
                       contexts=args.contexts, ctx=plan.ctx,
                       kv_bytes_per_token=plan.choice.kv_bytes_per_token() if plan.choice else None,
                       memory_budget=plan.memory_budget, force=plan.force, threads=plan.threads, slo=plan.slo,
                       max_b=plan.max_b, cost=plan.cost, arrivals=plan.arrivals, users=plan.users,
                       sessions=plan.sessions, engine_on_gpu=plan.engine_on_gpu(), served=plan.served)


def _bench_interrupted(exc: BaseException, cfg, cells: list[Cell], out: Path) -> None:
    """Ctrl-C or a signal during the sweep: the finished cells and the cut one in summary.json, said in one line."""
    code = 130 if isinstance(exc, KeyboardInterrupt) else (exc.code if isinstance(exc, SystemExit)
                                                           and isinstance(exc.code, int) else 1)
    why = "Ctrl-C" if code == 130 else f"signal {signal.Signals(code - 128).name}" if code > 128 else "exit"
    if cfg.current is not None:
        from measure.control.bench.sweep import skipped_cell

        k, b, ctx = cfg.current
        cells.append(skipped_cell(k, b, ctx, "cut", f"interrupted ({why}) while this cell ran"))
    _summary_quietly(out, cells)
    fail(f"interrupted ({why}): {sum(c.ok for c in cells)} finished cells in "
         f"{out}/summary.json, the cut one marked; records so far in {out}/records.jsonl", code)


def ray_bench(args, plan, cfg, out: Path, argv: list[str]) -> int:
    """bench --ray: the load from client actors on a Ray cluster (measure/control/bench/cluster.py, docs/design/ray.md)."""
    from measure.control.bench.cluster import ClusterError, parse_weights, refusal, run_cluster
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
        cfg.roofline = plan.roofline(say)
        header = plan.header({"command": "bench", "argv": shown_argv(argv), "ks": cfg.ks, "bs": cfg.bs,
                              "mode": plan.mode, "requests": args.requests, "reps": 1, "contexts": None,
                              "seed": getattr(plan.arrivals, "seed", None)})
        run = run_cluster(ClusterSpec(args.ray, n, weights), plan, cfg, header, out, say)
    except ClusterError as exc:
        fail(str(exc))
    except (KeyboardInterrupt, SystemExit) as exc:  # the actors were stopped on the way out (run_cluster)
        hold()
        code = 130 if isinstance(exc, KeyboardInterrupt) else 128 + got[-1] if got else \
            (exc.code if isinstance(exc.code, int) else 1)
        fail(f"interrupted: the client actors stopped; the records that had arrived are in {out}/records.jsonl", code)
    problems = [p for p in (finish_bench(out, run.cells, say),) if p]
    for w in run.warnings:
        say(f"warning: {w}")
    if run.failed:
        names = ", ".join(c.name for c in run.failed)
        problems.append(f"{len(run.failed)} of {len(run.clients)} clients did not finish ({names}): the summary "
                        "covers the records they left")
    if problems:
        fail("; ".join(problems), EXIT_FAILED)
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


def _client_start(client, plan, cfg) -> dict:
    """The run header's client fields, this clock checked against the server's, and the sweep's ClientShare."""
    from measure.core.clients import ClientShare, perf_ns_at
    from measure.machine.clock import clock_check

    seg, start = client
    out = {"segment": list(seg) if seg[1] > 1 else None, "seed": getattr(plan.arrivals, "seed", None),
           "start_at_unix": start}
    t0 = None
    if start is not None:
        if plan.url:  # a server's clock to compare with
            from engines.http_openai import api_headers

            out["clock_check"] = clock_check(plan.url, api_headers(plan.api_key_env))
        else:
            out["clock_check"] = {"offset_s": None, "why": "a local engine: no server clock to compare with"}
        t0, anchor = perf_ns_at(start)
        out.update(start_perf_ns=t0, clock_anchor=anchor)
        cfg.cell_timeout_s += max(0.0, start - time.time())  # the wait is not the cell's
    cfg.client = ClientShare(seg, t0)
    return out


def _say_start(fields: dict, say) -> None:
    from measure.core.clients import describe_clock
    from measure.core.lines import RunHeader

    h = RunHeader.of(fields)  # the header's client fields so far, typed
    if h.segment:
        i, n = h.segment
        say(f"segment {i}/{n} of one schedule (seed {h.seed}): the requests whose index ≡ {i - 1} (mod {n}), "
            "each with its id and at its scheduled time")
    if h.start_at_unix is not None:
        say(describe_clock(h.clock_check))
        from datetime import datetime

        at = datetime.fromtimestamp(h.start_at_unix).astimezone().isoformat(timespec="milliseconds")
        say(f"waiting until {at} (--start-at, {h.start_at_unix - time.time():.1f} s from now) …")


def find_main(args, plan, cfg, source, out: Path, say) -> int:
    """bench --find: the knee in one sentence, the levels it measured in summary.json."""
    from measure.control.bench.knee import find_knee, measure_levels
    from measure.control.bench.sweep import format_table

    if args.find == "users" and "batch" in source.capabilities().modes:
        cfg.mode = "batch"  # concurrent users, served the way a server serves them: batched in one engine
    cfg.cell_timeout_s = min(cfg.cell_timeout_s, 300.0)  # every level bounded
    run = measure_levels(source, plan.workload, args.find, cfg, say, k=plan.find_k,
                         target=args.target)
    start = args.rate or (0.5 if args.find == "rate" else 1)
    knee = find_knee(lambda lv: run(lv), args.find, start=start, limit=4096 if args.find == "rate" else 256)
    sentence = knee.sentence(plan.slo.key, knee.wall(cfg.roofline is not None))
    cells = knee.write(out, plan.slo, args.target, sentence)
    if cells:
        say("")
        say(format_table(cells))
    say(f"\n{sentence}")
    say(f"wrote {out}/records.jsonl, {out}/summary.json, {out}/knee.json")
    return 0


def _summary_quietly(out: Path, cells: list) -> None:
    from measure.control.bench.sweep import write_summary

    if cells:
        try:
            write_summary(out, cells)
        except OSError:
            pass


def finish_bench(out: Path, cells: list, say) -> str | None:
    """summary.json and summary.csv beside records.jsonl, and the table on stdout; a summary that cannot be
    written: the reason (None when written), for the caller's one line."""
    from measure.control.bench.sweep import format_table, write_summary

    say("")
    say(format_table(cells))
    try:
        write_summary(out, cells)
    except OSError as exc:
        return f"cannot write the summary in {out}: {exc.strerror or exc} (the table above is all of it)"
    say(f"\nwrote {out}/records.jsonl, {out}/summary.json, {out}/summary.csv")
    return None
