"""`inference-top`: the dashboard by default; `bench` for headless sweeps.

Every bad input ends in one line on stderr that says what was wrong and what to do, and exit code 2;
the measurement core is imported lazily so `bench` never loads textual.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tui.options import (BENCH_MAX_TOKENS, DASH_MAX_TOKENS, EXIT_FAILED, OneLineParser, build_parser, fail, int_list,
                         llama_server_bin, positive_int, run_plan, shown_argv, sigterm_to_exit,
                         writable)
from tui.signals import hold

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE

if TYPE_CHECKING:
    from measure.control.bench.cell import Cell
    from measure.machine.ray_cluster import ClusterSpec


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


def tune_main(argv: list[str]) -> int:
    """tune: the best configuration of the chosen engines, measured (tui/tune_cmd.py, docs/design/tune.md)."""
    from tui.tune_cmd import tune_main as run

    return run(argv)


def plan_main(argv: list[str]) -> int:
    """plan: what fits in memory, no engine started (tui/plan_cmd.py, docs/design/model-reads.md)."""
    from tui.plan_cmd import plan_main as run

    return run(argv)


def compare_main(argv: list[str]) -> int:
    """compare: is B slower than A, beyond this machine's noise (tui/compare_cmd.py, docs/design/compare.md)."""
    from tui.compare_cmd import compare_main as run

    return run(argv)


def _server_vs_engine_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="inference-top server-vs-engine", description="For one model file: the engine's own "
                      "batched decode in-process (bench's batch mode), then a server at the same concurrency (same "
                      "prompts, lengths and seed, prefix cache off); per B the server's tok/s ÷ the engine's, TPOT "
                      "and TTFT side by side, and a verdict: serialises, batches with X % overhead, batches fully (or "
                      "fails streams). Ends with one JSON line; writes both sweeps' cells as bench does (report draws "
                      "them)")
    p.add_argument("--url", help="the server's API base, already serving the same model "
                   "(e.g. http://127.0.0.1:8080/v1)")
    p.add_argument("--serve", choices=["llama-server", "llama_cpp.server", "mlx_lm.server"], help="start this "
                   "server on a free loopback port for the run (llama-server with -np = the largest B), then stop it")
    p.add_argument("--engine", choices=["llama", "mlx"], default=None, help="the in-process engine (default llama; "
                   "mlx with --serve mlx_lm.server)")
    p.add_argument("--model", help="the model file (.gguf; an mlx-lm folder for mlx); default: the embedded one")
    p.add_argument("--b", type=int_list, default=[1, 2, 4, 8], help="concurrency levels, comma list (default 1,2,4,8)")
    p.add_argument("--requests", type=positive_int, default=16, help="requests per cell on each side (default 16)")
    p.add_argument("--max-tokens", type=positive_int, default=64, help="tokens per answer (default 64)")
    p.add_argument("--threads", type=positive_int, help="threads for the engine and the server (default: physical "
                   "cores)")
    p.add_argument("--ctx", type=positive_int, default=512, help="context per sequence (default 512)")
    p.add_argument("--workload", default="default", help="workload preset or synthetic:N (as bench)")
    p.add_argument("--seed", type=int, default=0, help="seed of the drawn lengths (default 0)")
    p.add_argument("--out", help="output folder (default ./out/server-vs-engine-YYYYmmdd-HHMMSS)")
    p.add_argument("--engine-from", metavar="OUT", help="reuse the engine sweep of an earlier server-vs-engine output "
                   "made with the same options (another server against the same engine figures)")
    return p


def _sub_bench(argv: list[str], what: str) -> None:
    """One bench sweep in this process; a sweep that fails ends the command with its own line."""
    try:
        rc = bench_main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else EXIT_FAILED
    if rc:
        fail(f"the {what} sweep failed (exit {rc}); its output is above", EXIT_FAILED)


def server_vs_engine_main(argv: list[str]) -> int:
    a = _server_vs_engine_parser().parse_args(argv)
    from measure.control.bench import server_vs_engine as SVE
    from measure.machine.model_choice import resolve_model
    from engines.base import EngineError
    from engines.registry import declared

    if bool(a.url) == bool(a.serve):
        fail("give the server as --url URL (already serving this model) or --serve llama-server|llama_cpp.server|"
             "mlx_lm.server (started here), one of them")
    if 1 not in a.b or max(a.b) < 2:
        fail("--b needs 1 (the baseline) and a level ≥ 2, e.g. 1,2,4,8")
    engine = a.engine or ("mlx" if a.serve == "mlx_lm.server" else "llama")
    try:
        model = resolve_model(engine, a.model)
    except EngineError as exc:
        fail(str(exc))
    out = Path(a.out or f"out/server-vs-engine-{time.strftime('%Y%m%d-%H%M%S')}")
    writable(out, "--out", folder=True)
    import psutil

    threads = a.threads or psutil.cpu_count(logical=False) or 1
    bs = ",".join(str(b) for b in sorted(set(a.b)))
    same = ["--model", str(model.path), "--b", bs, "--requests", str(a.requests), "--max-tokens", str(a.max_tokens),
            "--workload", a.workload, "--seed", str(a.seed), "--threads", str(threads), "--ctx", str(a.ctx)]
    engine_argv = ["--engine", engine, *same]
    if a.engine_from:
        _engine_from(SVE, Path(a.engine_from), engine_argv, out)
    else:
        print(f"server-vs-engine: {model.name}: the engine ({engine}, batch mode, B = {bs}) in-process", flush=True)
        _sub_bench([*engine_argv, "--out", str(out / "engine")], "engine")
    proc, url = None, a.url
    try:
        if a.serve:
            from engines.null_server import free_port

            port = free_port()
            cmd = SVE.server_command(a.serve, str(model.path), port, max(a.b), a.ctx, threads,
                                     llama_server_bin() if a.serve == "llama-server" else None)
            print(f"server-vs-engine: starting {' '.join(cmd)}", flush=True)
            proc = SVE.start_server(cmd, port, out / "server.log")
            url = f"http://127.0.0.1:{port}/v1"
        tok = ["--tokenizer", str(model.path)] if declared(engine).gguf_tokenizer else []
        _sub_bench(["--engine", "http", "--url", url, *same[2:], *tok, "--prefix-cache", "off",
                    "--out", str(out / "server")], "server")
    except SVE.ServeError as exc:
        fail(str(exc), EXIT_FAILED)
    finally:
        if proc is not None:
            from measure.machine.servers import stop_server

            stop_server(proc)
    return _server_vs_engine_end(SVE, out, {"model": model.name, "model_path": str(model.path), "engine": engine,
                                            "server": a.serve or shown_argv([url])[0], "threads": threads})


def _engine_from(SVE, earlier: Path, engine_argv: list[str], out: Path) -> None:
    try:
        SVE.reuse_engine(earlier, engine_argv, out)
    except ValueError as exc:
        fail(str(exc))
    print(f"server-vs-engine: the engine sweep of {earlier} reused (the same options)", flush=True)


def _server_vs_engine_end(SVE, out: Path, meta: dict) -> int:
    import json

    res, table = SVE.summary(out / "engine", out / "server", meta)
    (out / "server-vs-engine.json").write_text(json.dumps(res, indent=1) + "\n")
    for line in SVE.table_lines(table):
        print(line)
    print(f"verdict: the server {res['verdict']} ({res['why']})")
    print(f"cells: {out}/engine and {out}/server (inference-top report {out}/engine {out}/server)")
    print(json.dumps(res), flush=True)
    return 0


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
    if argv and argv[0] == "server-vs-engine":
        return server_vs_engine_main(argv[1:])
    if argv and argv[0] == "bench":
        return bench_main(argv[1:])
    if argv and argv[0] == "plan":
        return plan_main(argv[1:])
    if argv and argv[0] in ("tune", "compare"):
        return (tune_main if argv[0] == "tune" else compare_main)(argv[1:])
    if argv and argv[0] == "replay":
        from tui.report_cmd import replay_main

        return replay_main(argv[1:])
    if argv and argv[0] == "report":
        from tui.report_cmd import report_main

        return report_main(argv[1:])
    if argv and argv[0] == "probe":
        from tui.report_cmd import probe_main

        return probe_main(argv[1:])
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
