"""`inference-top`: the dashboard by default; `bench` for headless sweeps.

Every bad input ends in one line on stderr that says what was wrong and what to do, and exit code 2;
the measurement core is imported lazily so `bench` never loads textual.
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

EXIT_USAGE = 2
EXIT_FAILED = 1


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's default prints the whole usage block
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return v


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text} must be greater than 0")
    return v


def int_list(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        try:
            v = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} must be whole numbers separated by commas, e.g. 1,2,4") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{v} in {text!r} must be at least 1")
        out.append(v)
    return out


def common_args(p: argparse.ArgumentParser, lists: bool) -> None:
    p.add_argument("--engine", default="llama", choices=["llama", "mlx", "http"],
                   help="llama (llama-cpp-python workers), mlx (mlx-lm workers) or http (an OpenAI-compatible "
                   "server at --url)")
    p.add_argument("--url", help="http engine: the API base, e.g. http://127.0.0.1:8080/v1")
    p.add_argument("--endpoint", default="completions", choices=["completions", "chat"],
                   help="http engine: /v1/completions (default) or /v1/chat/completions")
    p.add_argument("--api-key-env", help="http engine: the environment variable holding the API key")
    p.add_argument("--stall-timeout", type=positive_float, default=60.0,
                   help="http engine: seconds without data before a stream counts as stalled")
    p.add_argument("--model", help="a .gguf file (llama); an mlx-lm folder, or a Gemma 3 .gguf converted once "
                   "(mlx); default: the embedded Gemma 3 270M")
    p.add_argument("--k", type=int_list if lists else positive_int, default=[1] if lists else 1,
                   help="engine instances (worker processes)" + (", comma list" if lists else ""))
    p.add_argument("--b", type=int_list if lists else positive_int, default=None,
                   help="sequences batched in one engine (continuous batching; turns batch mode on)"
                   + (", comma list" if lists else ""))
    p.add_argument("--max-b", type=positive_int, default=16,
                   help="sequences one batch context holds (default 16, or the largest --b)")
    p.add_argument("--threads", type=positive_int, help="threads per worker (default: physical cores ÷ K)")
    p.add_argument("--ctx", type=positive_int, default=2048, help="context length per worker (tokens)")
    p.add_argument("--max-tokens", type=positive_int, default=None, help="tokens generated per request")
    p.add_argument("--workload", default="default", help="workload preset or synthetic:N")
    p.add_argument("--rate", type=positive_float, help="open-loop Poisson arrivals (requests/s); default closed loop")
    p.add_argument("--users", type=positive_int, help="closed-loop users (default K × B)")
    p.add_argument("--chip", help="chip preset (see presets/chips.toml); default: detected")
    p.add_argument("--bandwidth", type=positive_float, help="the chip's bandwidth in GB/s (overrides the preset)")
    p.add_argument("--stop-at-eos", action="store_true", help="end a request at EOS (default: ignore EOS)")
    p.add_argument("--no-flash-attn", action="store_true", help="turn llama.cpp's flash attention off")
    p.add_argument("--memory-budget", help="refuse steps whose estimated footprint exceeds this: a fraction of "
                   "physical memory (0.85, the default) or a size (20G)")
    p.add_argument("--force", action="store_true", help="go ahead with steps over the memory budget")


def build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    dash = OneLineParser(prog="inference-top", description="Live dashboard of local LLM serving limits. "
                         "Subcommands: bench (headless sweep), plan (what fits in memory), replay FILE, report PATH…. "
                         "Run 'inference-top bench --help'.")
    common_args(dash, lists=False)
    dash.add_argument("--refresh", type=positive_float, default=1.0, help="chart redraws per second (default 1)")
    dash.add_argument("--record", help="record the session to this JSONL file")
    dash.add_argument("--no-brake", action="store_true", help="at the memory wall only warn; do not undo the step")
    bench = OneLineParser(prog="inference-top bench", description="Headless sweep over K (and B); "
                          "writes records.jsonl, summary.json and summary.csv")
    common_args(bench, lists=True)
    bench.add_argument("--requests", type=positive_int, default=16, help="requests per rep and cell")
    bench.add_argument("--reps", type=positive_int, default=1, help="repetitions per cell (CV across them)")
    bench.add_argument("--out", help="output folder (default ./out/bench-YYYYmmdd-HHMMSS)")
    bench.add_argument("--cell-timeout", type=positive_float, default=1800.0, help="seconds per rep before giving up")
    bench.add_argument("--contexts", type=int_list, help="rows of context lengths: a synthetic prompt of "
                       "context − max_tokens tokens per request")
    return dash, bench


def fail(msg: str, code: int = EXIT_USAGE):
    print(f"inference-top: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def _sigterm_to_exit() -> None:
    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def memory_budget(text: str | None) -> int | None:
    """--memory-budget: None (85 % of physical memory), a fraction, or a size like 20G."""
    if text is None:
        return None
    from bench.guard import GuardError, parse_size
    from bench.probes import total_memory_bytes

    try:
        v = float(text)
    except ValueError:
        v = None
    if v is not None and 0 < v <= 1:
        return int(v * total_memory_bytes())
    try:
        return parse_size(text)
    except GuardError as exc:
        fail(f"--memory-budget: {exc} (or a fraction such as 0.85)")


def resolve_bandwidth(args) -> tuple[str, float | None, str]:
    """(chip name, β GB/s or None, where β came from): --bandwidth, else --chip preset, else detected."""
    from bench.probes import detect_chip
    from presets import PresetError, chip

    if args.chip:
        try:
            c = chip(args.chip)
        except PresetError as exc:
            fail(str(exc))
        name, beta, src = c.name, c.bandwidth_gbps, "spec"
    else:
        name, c = detect_chip()
        beta, src = (c.bandwidth_gbps, "spec") if c else (None, "unknown")
        name = c.name if c else name
    if args.bandwidth:
        beta, src = args.bandwidth, "--bandwidth"
    return name, beta, src if beta else "unknown"


def bench_main(argv: list[str]) -> int:
    _, parser = build_parser()
    args = parser.parse_args(argv)
    from bench.fleet import Fleet, FleetError
    from bench.probes import total_memory_bytes
    from bench.recorder import Recorder
    from bench.session import build_spec, resolve_model, run_header, run_meta
    from bench.sweep import SweepConfig, run_sweep
    from engines.base import EngineError
    from presets import PresetError, workload

    if args.engine == "http":
        return http_bench(args, argv)
    mode = "batch" if args.b else "instances"
    bs = args.b or [1]
    max_tokens = args.max_tokens or 256
    if args.contexts and min(args.contexts) <= max_tokens:
        fail(f"--contexts {min(args.contexts)} leaves no room for a prompt with --max-tokens {max_tokens}; "
             "give contexts above max_tokens")
    ctx = max([args.ctx, *(args.contexts or [])])
    try:
        wl = workload(args.workload)
        choice = resolve_model(args.engine, args.model)
        spec = build_spec(args.engine, choice, args.threads, ctx, max(args.k), not args.no_flash_attn)
    except (EngineError, PresetError) as exc:
        fail(str(exc))
    chip_name, beta, beta_src = resolve_bandwidth(args)
    budget = memory_budget(args.memory_budget) or int(0.85 * total_memory_bytes())
    out = Path(args.out or f"out/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    cfg = SweepConfig(ks=args.k, bs=bs, mode=mode, requests=args.requests, max_tokens=max_tokens, reps=args.reps,
                      rate=args.rate, ignore_eos=not args.stop_at_eos, bandwidth_gbps=beta,
                      cell_timeout_s=args.cell_timeout, out_dir=out, contexts=args.contexts, ctx=ctx,
                      kv_bytes_per_token=choice.kv_bytes_per_token(),
                      memory_budget=budget, force=args.force)
    header = run_header(choice, spec, {
        "command": "bench", "argv": argv, "ks": args.k, "bs": bs, "mode": mode, "requests": args.requests,
        "max_tokens": cfg.max_tokens, "reps": args.reps, "workload": wl.key, "rate": args.rate,
        "contexts": args.contexts, "memory_budget": budget, "force": args.force,
        "threads": args.threads or "auto (physical cores ÷ K)", "chip": chip_name, "bandwidth_gbps": beta,
        "bandwidth_source": beta_src, "ignore_eos": cfg.ignore_eos,
    })
    recorder = Recorder(out / "records.jsonl", header)

    def new_fleet() -> Fleet:
        # the sweep sets each cell's mode, B and batch context itself (made for exactly that cell)
        f = Fleet(spec, run_meta(args.engine, choice, "instances", 1), k=args.k[0], threads=args.threads,
                  on_record=recorder.record, events=False)
        f.start()
        return f

    _sigterm_to_exit()
    say = lambda m: print(m, flush=True)  # noqa: E731
    say(f"{choice.name} ({choice.file_bytes / 1e9:.3f} GB) on {chip_name}, β = "
        f"{f'{beta:g} GB/s ({beta_src})' if beta else 'unknown (pass --bandwidth)'}; records → {out}/records.jsonl")
    cells = []
    fleet = None
    try:
        say(f"starting {args.k[0]} worker(s): load + 2 warmup requests each …")
        fleet = new_fleet()
        cells, _, fleet = run_sweep(fleet, wl, cfg, say, new_fleet=new_fleet)
    except FleetError as exc:
        fail(f"{exc} (records so far are in {out}/records.jsonl)", EXIT_FAILED)
    except KeyboardInterrupt:
        fail(f"interrupted; records so far are in {out}/records.jsonl", 130)
    finally:
        if fleet is not None:
            fleet.close()
        recorder.close()
    return finish_bench(out, cells, say)


def finish_bench(out: Path, cells: list[dict], say) -> int:
    """summary.json and summary.csv beside records.jsonl, and the table on stdout."""
    from bench.sweep import format_table, write_summary

    write_summary(out, cells)
    say("")
    say(format_table(cells))
    say(f"\nwrote {out}/records.jsonl, {out}/summary.json, {out}/summary.csv")
    return 0


def check_url(args) -> None:
    if not args.url:
        fail("--engine http needs --url, the server's API base (e.g. http://127.0.0.1:8080/v1)")
    if not args.url.startswith(("http://", "https://")):
        fail(f"--url {args.url!r} must start with http:// or https://")


def http_bench(args, argv) -> int:
    """bench --engine http: B concurrent streams per cell against a server; no process is spawned."""
    from bench.envinfo import environment
    from bench.fleet import FleetError, RunMeta
    from bench.http_fleet import HttpFleet
    from bench.recorder import Recorder
    from bench.sweep import SweepConfig, run_sweep
    from presets import PresetError, workload

    check_url(args)
    try:
        wl = workload(args.workload)
    except PresetError as exc:
        fail(str(exc))
    bs = args.b or [1]
    out = Path(args.out or f"out/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    cfg = SweepConfig(ks=[1], bs=bs, mode="http", requests=args.requests, max_tokens=args.max_tokens or 256,
                      reps=args.reps, rate=args.rate, ignore_eos=not args.stop_at_eos,
                      cell_timeout_s=args.cell_timeout, out_dir=out)
    header = {"command": "bench", "argv": argv, "engine": "http", "url": args.url, "endpoint": args.endpoint,
              "model": args.model, "model_bytes": 0, "bs": bs, "mode": "http", "requests": args.requests,
              "max_tokens": cfg.max_tokens, "reps": args.reps, "workload": wl.key, "rate": args.rate,
              "ignore_eos": cfg.ignore_eos, "environment": environment(), "simulated": False,
              "api_key_env": args.api_key_env}  # the variable's name only, never the key
    recorder = Recorder(out / "records.jsonl", header)
    fleet = HttpFleet(args.url, RunMeta(engine="http", model=args.model or "?", model_bytes=0), b=bs[0],
                      endpoint=args.endpoint, model=args.model, api_key_env=args.api_key_env,
                      stall_s=args.stall_timeout, on_record=recorder.record, events=False)
    _sigterm_to_exit()
    say = lambda m: print(m, flush=True)  # noqa: E731
    cells = []
    try:
        fleet.start()
        say(f"{args.url} ({fleet.model}); records → {out}/records.jsonl")
        cells, _, fleet = run_sweep(fleet, wl, cfg, say)
    except FleetError as exc:
        fail(str(exc), EXIT_FAILED)
    except KeyboardInterrupt:
        fail(f"interrupted; records so far are in {out}/records.jsonl", 130)
    finally:
        fleet.close()
        recorder.close()
    return finish_bench(out, cells, say)


def plan_main(argv: list[str]) -> int:
    p = OneLineParser(prog="inference-top plan", description="What fits in memory: KV bytes per token, KV per "
                      "request at each context, the largest B and K under the budget. No engine starts.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="a Hugging Face / mlx-lm config.json")
    src.add_argument("--model", help="a GGUF file")
    src.add_argument("--preset", help="a model preset (presets/models.toml)")
    p.add_argument("--context", type=int_list, default=[2048], help="context lengths, comma list")
    p.add_argument("--users", type=positive_int, help="concurrent users: the context at which they stop fitting")
    p.add_argument("--memory", help="memory to plan for, e.g. 48G (default: this machine's)")
    p.add_argument("--memory-budget", type=float, default=0.85, help="fraction of memory usable (default 0.85)")
    p.add_argument("--kv-dtype", default=None, help="KV cache dtype: f16, bf16, q8_0, fp8 … (default: model's)")
    p.add_argument("--kv-cache-tokens", type=positive_int, help="a server's KV cache in tokens (vLLM's log line)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = p.parse_args(argv)
    from bench.guard import GuardError, parse_size, shape_from_config, shape_from_gguf, shape_from_preset
    from bench.plan import format_plan, plan
    from bench.probes import total_memory_bytes
    from engines.base import EngineError
    from presets import PresetError, model

    if not 0 < args.memory_budget <= 1:
        fail(f"--memory-budget {args.memory_budget} must be a fraction in (0, 1], e.g. 0.85")
    try:
        if args.config:
            shape = shape_from_config(args.config)
        elif args.model:
            shape = shape_from_gguf(args.model)
        else:
            shape = shape_from_preset(args.preset)
        dtype = args.kv_dtype or (model(args.preset).kv_dtype if args.preset else "f16")
        memory = parse_size(args.memory) if args.memory else total_memory_bytes()
        result = plan(shape, args.context, memory, dtype, args.users, args.memory_budget, args.kv_cache_tokens)
    except (GuardError, EngineError, PresetError) as exc:
        fail(str(exc))
    if args.json:
        import json

        print(json.dumps(result, indent=2))
    else:
        print(format_plan(result, shape))
    return 0


def report_main(argv: list[str]) -> int:
    p = OneLineParser(prog="inference-top report", description="PNG charts and a Markdown summary from bench "
                      "outputs (--out folders) and dashboard recordings; two or more are drawn side by side.")
    p.add_argument("paths", nargs="+", help="bench output folders, summary.json or records.jsonl, or recordings")
    p.add_argument("--out", default="out/report", help="output folder (default out/report)")
    a = p.parse_args(argv)
    from bench.report import ReportError, report

    try:
        files, md, warns = report(a.paths, Path(a.out))
    except ReportError as exc:
        fail(str(exc))
    for w in warns:
        print(f"inference-top report: warning: {w}", file=sys.stderr)
    for f in files:
        print(f"wrote {f}")
    print(f"wrote {md}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        return bench_main(argv[1:])
    if argv and argv[0] == "plan":
        return plan_main(argv[1:])
    if argv and argv[0] == "replay":
        p = OneLineParser(prog="inference-top replay", description="Play a recorded session back in the "
                          "dashboard (no engine starts): p pause, > / < speed, ← / → seek 10 s.")
        p.add_argument("file", help="a recording made with inference-top --record FILE")
        p.add_argument("--speed", type=positive_float, default=1.0, help="playback speed (default 1)")
        a = p.parse_args(argv[1:])
        from tui.app import run_replay

        return run_replay(a.file, a.speed)
    if argv and argv[0] == "report":
        return report_main(argv[1:])
    dash, _ = build_parser()
    args = dash.parse_args(argv)
    from tui.app import run_dashboard

    return run_dashboard(args)


if __name__ == "__main__":
    sys.exit(main())
