"""`inference-top server-vs-engine`: for one model file, the engine's own batched decode in-process (a bench sweep
in batch mode), then a server at the same concurrency (another bench sweep over HTTP: same prompts, lengths and seed,
prefix cache off), paired per B with a verdict (measure/control/bench/server_vs_engine.py,
docs/design/server-vs-engine.md). Every bad input is one line and exit 2; a sweep that fails, one line and exit 1."""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from tui.options import (EXIT_FAILED, OneLineParser, fail, int_list, llama_server_bin, positive_int, shown_argv,
                         writable)


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
            proc = SVE.start_serving(cmd, port, out / "server.log")
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
