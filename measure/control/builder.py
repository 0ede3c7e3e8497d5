"""The run plan's builder: the choices a command line made (PlanOptions, typed; tui/options.py's plan_options makes it
from argparse) → a RunPlan (control/plan.py): engine, model, chip and β with its source, memory budget, workload,
arrivals, sessions, endpoints. Every bad input is a StartError, one line, before anything starts; nothing here
parses argv or starts a source (control/wiring.py does)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.base import EngineError
from measure.control.plan import RunPlan, StartError, remote_engine
from measure.core.arrivals import ArrivalSpec, parse_arrivals
from measure.core.cost import Cost
from measure.core.datasets import CHECK_DRAWS, Dataset, DatasetError, check_fits
from measure.core.guard import GuardError, parse_memory_size
from measure.core.sessions import SessionError, SessionSpec, parse_think
from measure.core.traces import after_of
from measure.core.units import fmt_gib
from measure.core.workload import PrefixCache
from measure.machine.host import default_budget
from measure.machine.model_choice import build_spec, gpu_share, resolve_model
from measure.machine.probes import detect_chip, effective_memory
from measure.machine.workloads import resolve as resolve_workload
from measure.sources.warmup import Warmup
from presets import SLO, Chip, PresetError, Workload, chip
from presets import slo as preset_slo

if TYPE_CHECKING:
    from measure.core.work import WorkModel
    from measure.sources.http import Endpoint


@dataclass(frozen=True)
class PlanOptions:
    """What a command line chose for a run, typed (the dashboard's, bench's and compare's options; tune sets some
    of bench's): the names are the options' (--max-tokens → max_tokens); one a command does not take keeps its
    default here. `k` and `b`: one value (the dashboard) or a list (bench); None where not given."""

    engine: str = "llama"
    model: str | None = None
    k: int | list[int] | None = None
    b: int | list[int] | None = None
    max_b: int = 16
    ctx: int = 2048
    threads: int | None = None
    n_gpu_layers: int | None = None
    no_flash_attn: bool = False
    max_tokens: int | None = None
    workload: str = "default"
    prompt_len: str | None = None
    output_len: str | None = None
    model_filter: str | None = None
    seed: int | None = 0
    requests: int | None = None
    contexts: list[int] | None = None
    rate: float | None = None
    arrivals: str | None = None
    speed: float | None = None
    users: int | None = None
    turns: int | None = None
    think_time: str | None = None
    stop_at_eos: bool = False
    force: bool = False
    memory_budget: str | None = None
    chip: str | None = None
    bandwidth: float | None = None
    slo: str | None = None
    watts: float | None = None
    price_per_hour: float | None = None
    hardware_cost: float | None = None
    lifetime: float | None = None
    kwh_price: float | None = None
    url: list[str] | None = None  # http: every --url
    urls: str | None = None  # http: --urls FILE
    model_bytes: str | None = None
    routing: str = "least"
    endpoint: str = "completions"
    api_key_env: str | None = None
    stall_timeout: float = 60.0
    prefix_cache: str | None = None
    tokenizer: str | None = None
    warmup: str | None = None
    client_procs: int | None = 1  # None: auto (http_pool.auto_procs)


def resolve_budget(text: str | None, total: int | None = None, limit_name: str | None = None,
                   gpu_share: float = 1.0) -> tuple[int, str]:
    """--memory-budget: None (the default fraction of the tightest memory limit: physical memory, a cgroup's,
    an rlimit), a fraction of it, or a size (48G = 48 GiB). The source names the limit that set it. `gpu_share`:
    the part of the footprint the GPU wires (the llama engine's layers offloaded; docs/design/model-reads.md)."""
    if total is None:
        total, limit_name = effective_memory()
    limit_name = limit_name or "physical memory"
    if text is None:  # on a Mac: the GPU's working set less what macOS holds (docs/design/unified-memory.md)
        return default_budget(total, limit_name, gpu_share)
    try:
        v = float(text)
    except ValueError:
        v = None
    if v is not None and 0 < v <= 1:
        return int(v * total), f"{v:.0%} of {fmt_gib(total)} ({limit_name})"
    try:
        n = parse_memory_size(text)
    except GuardError as exc:
        raise StartError(f"--memory-budget: {exc} (or a fraction such as 0.85)") from None
    return n, f"--memory-budget {text} = {fmt_gib(n)}"


def resolve_bandwidth(chip_key: str | None, bandwidth: float | None) -> tuple[str, float | None, str]:
    """(chip name, β GB/s or None, where β came from): --bandwidth, else --chip preset, else detected."""
    c: Chip | None
    if chip_key:
        try:
            c = chip(chip_key)
        except PresetError as exc:
            raise StartError(str(exc)) from None
        name, beta, src = c.name, c.bandwidth_gbps, "spec"
    else:
        name, c = detect_chip()
        beta, src = (c.bandwidth_gbps, "spec") if c else (None, "unknown")
        name = c.name if c else name
    if bandwidth:
        beta, src = bandwidth, "--bandwidth"
    return name, beta, src if beta else "unknown"


def http_endpoints(opts: PlanOptions) -> list[Endpoint]:
    """The endpoints of an HTTP run: every --url (with --chip, where given), then the lines of --urls FILE
    (`URL [chip] [label]`, '#' comments; '-' for no chip). StartError names the line that is wrong."""
    from measure.sources.http import Endpoint

    def beta_of(key: str | None, where: str) -> float | None:
        if not key:
            return None
        try:
            return chip(key).bandwidth_gbps
        except PresetError as exc:
            raise StartError(f"{where}: {exc}") from None

    out = [Endpoint(check_url(u), opts.chip, None, beta_of(opts.chip, "--chip")) for u in (opts.url or [])]
    if opts.urls:
        try:
            lines = Path(opts.urls).read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise StartError(f"--urls {opts.urls}: cannot read it ({type(exc).__name__}: {exc})") from None
        for i, line in enumerate(lines, 1):
            parts = line.split("#", 1)[0].split(None, 2)
            if not parts:
                continue
            where = f"--urls {opts.urls} line {i}"
            if not parts[0].startswith(("http://", "https://")):
                raise StartError(f"{where}: {parts[0][:60]!r} is not a URL; each line is URL [chip] [label] "
                                 "(chip '-' for none)")
            key = parts[1] if len(parts) > 1 and parts[1] != "-" else opts.chip
            out.append(Endpoint(parts[0], key, parts[2].strip() if len(parts) > 2 else None, beta_of(key, where)))
        if not out:
            raise StartError(f"--urls {opts.urls} lists no endpoint; each line is URL [chip] [label]")
    if not out:
        check_url(None)
    seen: set[str] = set()
    for e in out:
        u = e.url.rstrip("/")
        if u in seen:
            raise StartError(f"{e.shown()} is given twice: each endpoint once (K counts endpoints)")
        seen.add(u)
    return out


def check_url(url: str | None) -> str:
    if not url:
        raise StartError("--engine http needs --url, the server's API base (e.g. http://127.0.0.1:8080/v1); give "
                         "--url several times or --urls FILE for several servers behind one queue")
    if not url.startswith(("http://", "https://")):
        from engines.http_openai import public_url

        raise StartError(f"--url {public_url(url)!r} must start with http:// or https://")
    return url


def make_plan(opts: PlanOptions, *, default_max_tokens: int,
              progress: Callable[[str], None] | None = None) -> RunPlan:
    """The one place command-line choices become a plan. StartError: one line, nothing started."""
    ks = opts.k if isinstance(opts.k, list) else [opts.k or 1]  # None (not given): 1, or every endpoint given
    bs = opts.b if isinstance(opts.b, list) or opts.b is None else [opts.b]
    seed = opts.seed or 0
    turns = opts.turns
    wl, arrivals = _workload(opts, seed, turns)
    sessions = _sessions(opts, turns, arrivals, seed)
    contexts = opts.contexts or []
    max_tokens = opts.max_tokens or default_max_tokens
    ctx = _check_lengths(opts, wl, contexts, max_tokens)
    budget, budget_src = resolve_budget(opts.memory_budget, gpu_share=gpu_share(opts.engine, opts.n_gpu_layers))
    slo, cost = _slo_and_cost(opts)
    common = dict(workload=wl, ks=ks, bs=bs, max_b=opts.max_b, ctx=ctx, threads=opts.threads,
                  max_tokens=max_tokens, rate=opts.rate, users=opts.users, ignore_eos=not opts.stop_at_eos,
                  force=opts.force, memory_budget=budget, memory_budget_source=budget_src, slo=slo, cost=cost,
                  arrivals=arrivals, sessions=sessions)
    if remote_engine(opts.engine):
        return _remote_plan(opts, common, progress)
    return _local_plan(opts, common, progress)


def _workload(opts: PlanOptions, seed: int, turns: int | None) -> tuple[Workload, ArrivalSpec | None]:
    """The workload and its arrival process (None: a closed loop)."""
    try:
        wl = resolve_workload(opts.workload, prompt_len=opts.prompt_len,
                              output_len=opts.output_len, max_tokens=opts.max_tokens, seed=seed,
                              turns=bool(turns), model_filter=opts.model_filter)
        arrivals = parse_arrivals(opts.arrivals, opts.rate, speed=opts.speed,
                                  trace_times=getattr(wl, "times_s", None), seed=seed, trace_after=after_of(wl))
    except (DatasetError, ValueError) as exc:
        raise StartError(str(exc)) from None
    if arrivals is not None and arrivals.after is not None and not remote_engine(opts.engine):
        raise StartError(f"--workload {wl.key}: its follow-ups are sent after their parents' answers, which only a "
                         "server's stream tells: run it with --engine http --url …")
    return wl, arrivals


def _sessions(opts: PlanOptions, turns: int | None, arrivals: ArrivalSpec | None, seed: int
              ) -> SessionSpec | None:
    """--turns: multi-turn sessions against a server, closed loop only."""
    if opts.think_time is not None and not turns:
        raise StartError("--think-time is the pause between a session's turns: give --turns N with it")
    if not turns:
        return None
    if not remote_engine(opts.engine):
        raise StartError("--turns runs multi-turn sessions against a server (--engine http --url …): a local "
                         "engine clears its KV cache before every request, so there is no prefix cache to show")
    if arrivals is not None:
        raise StartError("--turns: a user sends its next turn after the last answer (a closed loop): drop "
                         "--rate, --arrivals and trace: workloads")
    if opts.contexts:
        raise StartError("--turns: a turn's prompt is the conversation so far: drop --contexts")
    try:
        return SessionSpec(turns, parse_think(opts.think_time), seed)
    except SessionError as exc:
        raise StartError(str(exc)) from None


def _check_lengths(opts: PlanOptions, wl: Workload, contexts: list[int], max_tokens: int) -> int:
    """The context size (--ctx, or the largest of --contexts), once every prompt and answer fits in it."""
    if contexts and isinstance(wl, Dataset):
        raise StartError("--contexts makes its own synthetic prompts (context − max_tokens tokens each): it does not "
                         "combine with --workload FILE, --prompt-len or --output-len")
    if contexts and min(contexts) <= max_tokens:
        raise StartError(f"--contexts {min(contexts)} leaves no room for a prompt with --max-tokens {max_tokens}; "
                         "give contexts above max_tokens")
    ctx: int = max([opts.ctx, *contexts])
    long_tokens = wl.long_tokens if wl.long_every else 0
    assert long_tokens is not None  # a mixed workload (long_every) gives its long prompts' length too
    longest = max(wl.synthetic_tokens or 0, long_tokens)
    if longest and not contexts and not remote_engine(opts.engine) and longest + max_tokens > ctx:
        raise StartError(f"--workload {wl.key}: a prompt of {longest} tokens + --max-tokens {max_tokens} exceeds "
                         f"--ctx {ctx}; raise --ctx to {longest + max_tokens} or more, or shorten the prompt")
    if not remote_engine(opts.engine) and not contexts:
        n = opts.requests or max(len(getattr(wl, "items", ())), CHECK_DRAWS)
        if why := check_fits(wl, n, max_tokens, ctx):
            raise StartError(why)
    return ctx


def _slo_and_cost(opts: PlanOptions) -> tuple[SLO | None, Cost]:
    try:
        slo = preset_slo(opts.slo) if opts.slo else None
    except PresetError as exc:
        raise StartError(f"--slo: {exc}") from None
    if (opts.hardware_cost is None) != (opts.lifetime is None):
        raise StartError("--hardware-cost and --lifetime go together (the price spread over the hours of service)")
    if opts.price_per_hour is not None and opts.hardware_cost is not None:
        raise StartError("give --price-per-hour (rented) or --hardware-cost with --lifetime (owned), not both")
    return slo, Cost(opts.price_per_hour, opts.hardware_cost, opts.lifetime, opts.kwh_price, opts.watts)


def _remote_plan(opts: PlanOptions, common: dict[str, Any], progress: Callable[[str], None] | None
                 ) -> RunPlan:
    """--engine http: the endpoints, K over them, the model's bytes, the prefix cache and the tokenizer."""
    endpoints = http_endpoints(opts)
    url = endpoints[0].url
    n = len(endpoints)
    ks = common["ks"]
    if opts.k is None:  # a user who lists several servers means all of them: K = the endpoints given
        common["ks"] = ks = [n]
    if n > 1 and max(ks) > n:
        raise StartError(f"--k {max(ks)}: only {n} endpoints were given (K = endpoints in use)")
    served = _served_work(opts.model_bytes)
    try:
        model_bytes = served.file_bytes if served else parse_memory_size(opts.model_bytes) if opts.model_bytes else 0
    except GuardError as exc:
        raise StartError(f"--model-bytes: {exc}") from None
    try:
        prefix = PrefixCache.parse(opts.prefix_cache or ("on" if getattr(common["workload"], "shares_prefixes", False)
                                                          else None))  # a trace's block ids: kept by default
    except ValueError as exc:
        raise StartError(str(exc)) from None
    try:
        warmup = Warmup.parse(opts.warmup or "auto")
    except ValueError as exc:
        raise StartError(str(exc)) from None
    tokenizer = opts.tokenizer
    if tokenizer in (None, "embedded"):
        from engines.embedded import embedded_model_path

        tokenizer = str(embedded_model_path(progress or (lambda m: None)))
    elif tokenizer == "none":
        tokenizer = None
    from engines.http_openai import public_url
    from measure.core.metrics import sum_gbps

    betas = [e.bandwidth_gbps for e in endpoints]
    where = ("server at " + public_url(url) if n == 1 else
             f"{n} endpoints ({', '.join(e.name() for e in endpoints)})")
    return RunPlan(engine=opts.engine,
                   chip=where + (f" on {endpoints[0].chip}" if n == 1 and endpoints[0].chip else ""),
                   bandwidth_gbps=sum_gbps(betas),
                   bandwidth_source="the endpoints' chips" if all(betas) else "unknown",
                   url=url, endpoints=endpoints, routing=opts.routing, model_bytes=model_bytes, served=served,
                   endpoint=opts.endpoint, api_key_env=opts.api_key_env, stall_s=opts.stall_timeout,
                   model_name=opts.model, prefix_cache=prefix, tokenizer=tokenizer,
                   client_procs=opts.client_procs, cap_open_loop=opts.b is not None, warmup=warmup,
                   **common)


def _served_work(given: str | None) -> WorkModel | None:
    """--model-bytes as the served model's config.json or GGUF (a file that exists): its work model, so the
    bandwidth product counts what a step's tokens read (an MoE: the experts they are routed to); a size: None."""
    from measure.machine.model_files import is_gguf, work_from_config, work_from_gguf

    if not given or not Path(given).is_file():
        return None
    try:
        return work_from_gguf(given) if is_gguf(Path(given)) else work_from_config(given)
    except (OSError, ValueError, KeyError, EngineError) as exc:
        raise StartError(f"--model-bytes {given}: neither a size nor a config.json or GGUF it can read ({exc})") \
            from None


def _local_plan(opts: PlanOptions, common: dict[str, Any], progress: Callable[[str], None] | None
                ) -> RunPlan:
    """A local engine: its model resolved and its launch spec built (K workers of --threads each)."""
    if opts.url or opts.urls or opts.model_bytes:
        raise StartError("--url, --urls and --model-bytes apply to --engine http")
    if opts.warmup is not None:
        raise StartError("--warmup applies to --engine http (a local worker warms up with 2 requests as it starts)")
    if opts.tokenizer is not None:
        raise StartError("--tokenizer applies to --engine http (a local engine tokenizes with its own model)")
    if opts.prefix_cache not in (None, "off"):
        raise StartError("--prefix-cache applies to --engine http (a local engine clears its KV cache before "
                         "every request, so nothing is reused)")
    chip_name, beta, beta_src = resolve_bandwidth(opts.chip, opts.bandwidth)
    try:
        choice = resolve_model(opts.engine, opts.model, progress)
        spec = build_spec(opts.engine, choice, opts.threads, common["ctx"], max(common["ks"]),
                          not opts.no_flash_attn, progress, n_gpu_layers=opts.n_gpu_layers)
    except (EngineError, GuardError) as exc:
        raise StartError(str(exc)) from None
    plan = RunPlan(engine=opts.engine, chip=chip_name, bandwidth_gbps=beta, bandwidth_source=beta_src,
                   choice=choice, spec=spec, **common)
    if spec.options.get("blas"):
        plan.notes.append(f"mlx BLAS: {spec.options['blas']}")
    return plan


__all__ = ["PlanOptions", "make_plan", "resolve_budget", "resolve_bandwidth", "http_endpoints", "check_url"]
