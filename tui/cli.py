"""`inference-top`: the dashboard by default; `bench` for headless sweeps.

Every bad input ends in one line on stderr that says what was wrong and what to do, and exit code 2;
the measurement core is imported lazily so `bench` never loads textual.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tui.options import (DASH_MAX_TOKENS, EXIT_FAILED, OneLineParser, build_parser, fail, int_list,
                         llama_server_bin, positive_int, run_plan, shown_argv, writable)

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE

if TYPE_CHECKING:
    from measure.machine.ray_cluster import ClusterSpec


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
    from tui.bench_cmd import bench_main

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
        from tui.bench_cmd import bench_main

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
