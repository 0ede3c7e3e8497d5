"""Start-up in one place: parsed command-line arguments → a RunPlan (engine, model, chip and β with its
source, memory budget, workload, URL settings), and from the plan the load source, the live settings and
the run header. The dashboard, `bench` and their tests all start here; nothing in it parses argv."""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.base import EngineError, EngineSpec
from measure.control.live.controller import LiveSettings
from measure.machine.envinfo import environment
from measure.core.guard import GuardError, parse_size
from measure.machine.host import default_budget
from measure.machine.model_choice import (ModelChoice, build_spec, engine_label, gpu_share, llama_placement, resolve_model,
                                          run_header, run_meta)
from measure.machine.probes import detect_chip, effective_memory
from measure.core.records import Mode, RequestRecord, RunMeta
from measure.core.units import fmt_gib
from measure.core.arrivals import ArrivalSpec, parse_arrivals
from measure.core.datasets import CHECK_DRAWS, Dataset, DatasetError, check_fits, header_info
from measure.machine.workloads import resolve as resolve_workload
from measure.core.sessions import SessionError, SessionSpec, parse_think
from measure.core.traces import after_of
from measure.core.workload import PrefixCache
from measure.sources.base import FiniteLoadSource
from measure.sources.warmup import Warmup
from measure.core.cost import Cost
from presets import SLO, Chip, PresetError, Workload, chip
from presets import slo as preset_slo

if TYPE_CHECKING:
    from engines.tokenizer import GGUFTokenizer
    from measure.core.roofline import Roofline
    from measure.core.work import WorkModel
    from measure.sources.http import Endpoint


@dataclass
class LiveRun:
    """What the live dashboard drives, started by RunPlan.start_live: the controller, the screen's title, the
    other clients watched (--peer: control/live/peers.Peers) and the /metrics server (--prometheus: control/
    prometheus.serve's (server, thread)); close() stops the three in that order."""

    controller: Any
    title: str
    peers: Any = None
    metrics_server: Any = None

    def close(self) -> None:
        self.controller.close()
        if self.peers:
            self.peers.close()
        if self.metrics_server:  # prometheus.serve's (server, thread)
            self.metrics_server[0].shutdown()


def remote_engine(engine: str) -> bool:
    """The one test of --engine for "a server of its own, reached at --url" (http); its records' mode is the one
    records.is_remote names."""
    return engine == "http"


class StartError(ValueError):
    """A bad input found before anything starts: one line saying what was wrong and what to do."""


@dataclass
class RunPlan:
    engine: str  # llama | mlx | http
    workload: Workload
    ks: list[int]
    bs: list[int] | None  # None: instances mode
    max_b: int
    ctx: int
    threads: int | None
    max_tokens: int
    rate: float | None
    users: int | None
    ignore_eos: bool
    force: bool
    chip: str
    bandwidth_gbps: float | None
    bandwidth_source: str  # spec | --bandwidth | unknown
    memory_budget: int  # bytes
    memory_budget_source: str
    choice: ModelChoice | None = None  # local engines
    spec: EngineSpec | None = None
    url: str | None = None  # http: the first endpoint's API base
    endpoints: list[Endpoint] = field(default_factory=list)  # http: one per server behind the queue
    routing: str = "least"  # http: least (outstanding requests) | round-robin
    model_bytes: int = 0  # http: W of the served model where the user gave it (--model-bytes)
    endpoint: str = "completions"
    api_key_env: str | None = None
    stall_s: float = 60.0
    model_name: str | None = None  # http: --model, the name the server knows
    prefix_cache: PrefixCache = PrefixCache()
    tokenizer: str | None = None  # http: a GGUF whose tokenizer makes the prompt ids, where the server agrees
    engine_baseline: dict[int, float] | None = None  # http: B → the engine's own batched tok/s (--baseline, §27)
    slo: SLO | None = None
    cost: Cost | None = None
    notes: list[str] = field(default_factory=list)  # lines to log at start
    warnings: list[str] = field(default_factory=list)  # …and warnings (a probe taken on a busy machine)
    arrivals: ArrivalSpec | None = None  # an open-loop pattern or a trace's times; None:
    # closed loop (bench), or --rate's Poisson (the dashboard)
    sessions: SessionSpec | None = None  # bench --turns: users in multi-turn sessions
    client_procs: int | None = 1  # http bench: processes its streams spread over (None: http_pool.auto_procs)
    cap_open_loop: bool = False  # http, --b given: an open loop waits for one of the B streams (else never capped)
    warmup: Warmup = Warmup(requests=0)  # http bench: each level's warmup (--warmup; default auto)

    @property
    def engine_is_remote(self) -> bool:
        """A server of its own at --url (remote_engine): no model, memory or workers of ours."""
        return remote_engine(self.engine)

    @property
    def sweep_ks(self) -> list[int]:
        """The Ks a sweep steps through: K engines here or K endpoints; one server has no K (B are its streams)."""
        return self.ks if not self.engine_is_remote or len(self.endpoints) > 1 else [1]

    @property
    def find_k(self) -> int:
        """The K a --find search runs at: the first --k; over HTTP that is every endpoint given unless --k says fewer
        (a level's users or rate spread over them, not the first endpoint's alone)."""
        return min(self.ks[0], max(1, len(self.endpoints))) if self.engine_is_remote else self.ks[0]

    def start_lines(self, records: str) -> list[str]:
        """What a bench says as it starts: what is measured, where the records go (`records`), the budget."""
        if self.engine_is_remote or self.choice is None:
            return [f"{self.chip}; records → {records}"]
        return [f"{self.choice.name} ({self.choice.file_bytes / 1e9:.3f} GB) on {self.chip}, {self.describe_beta()}; "
                f"records → {records}",
                f"memory budget {fmt_gib(self.memory_budget)}: {self.memory_budget_source}",
                f"starting {self.ks[0]} worker(s): load + 2 warmup requests each …"]

    @property
    def mode(self) -> Mode:
        return "http" if self.engine_is_remote else "batch" if self.bs else "instances"

    def meta(self) -> RunMeta:
        if self.engine_is_remote:
            return RunMeta(engine=engine_label(self.engine), model=self.model_name or "?",
                           model_bytes=self.model_bytes, mode="http", b=(self.bs or [1])[0])
        assert self.choice is not None  # a local engine's plan has its model (make_plan)
        return run_meta(self.engine, self.choice, self.mode, (self.bs or [1])[0])

    def client_processes(self, events: bool) -> int:
        """The client processes an HTTP load's streams spread over (one asyncio loop each, one schedule): a
        bench's --client-procs (auto: http_pool.auto_procs of its largest B), never more than its streams; the
        dashboard (`events`) and multi-turn sessions keep one."""
        from measure.sources.http_pool import client_procs

        if events or self.sessions is not None or (self.arrivals is not None and self.arrivals.after is not None):
            return 1  # (a Bailian trace's follow-ups wait for their parents' answers: one process sees both)
        return client_procs(self.client_procs, max(self.bs or [1]))

    def http_header(self) -> dict[str, Any]:
        """A bench's records header over HTTP: the client processes its streams went through and each level's
        warmup rule (sources/warmup.py); {} for a local engine."""
        if not self.engine_is_remote:
            return {}
        return {"client_procs": self.client_processes(events=False), "warmup": self.warmup.describe()}

    def make_source(self, events: bool = True, on_record: Callable[[RequestRecord], None] | None = None,
                    k: int | None = None, per_cell: bool = False) -> FiniteLoadSource:
        """The load source, not started: K local workers, or B streams against --url. `per_cell`: a sweep
        sets each cell's mode, B and batch context itself, so the workers start plain (no batch context made
        for the largest B before the memory guard has seen it)."""
        if self.engine_is_remote:
            from measure.sources.http_pool import http_source

            make = http_source(self.client_processes(events), max(self.bs or [1]))
            src: FiniteLoadSource  # HttpSource or HttpPool (http_source gives the class untyped)
            src = make(self.endpoints or self.url, self.meta(), b=(self.bs or [1])[0], endpoint=self.endpoint,
                             model=self.model_name, api_key_env=self.api_key_env, stall_s=self.stall_s,
                             on_record=on_record, events=events, prefix_cache=self.prefix_cache,
                             tokenizer=self._tokenizer(), routing=self.routing, cap_open_loop=self.cap_open_loop,
                             warmup=Warmup(requests=0) if events else self.warmup)
            if k is not None or len(self.endpoints) > 1:
                src.scale_to(k or self.ks[0])
            return src
        from measure.sources.fleet import Fleet

        assert self.spec is not None and self.choice is not None  # a local engine's plan has both (make_plan)
        if per_cell:
            return Fleet(self.spec, run_meta(self.engine, self.choice, "instances", 1), k=k or self.ks[0],
                         threads=self.threads, on_record=on_record, b_cap=1, events=events)
        return Fleet(self.spec, self.meta(), k=k or self.ks[0], threads=self.threads, on_record=on_record,
                     b_cap=max(self.max_b, max(self.bs or [1])), events=events)

    def _tokenizer(self) -> GGUFTokenizer | None:
        if not self.tokenizer:
            return None
        from engines.tokenizer import GGUFTokenizer

        try:
            return GGUFTokenizer(self.tokenizer)
        except (EngineError, ValueError, OSError) as exc:
            self.notes.append(f"no local tokenizer ({exc}): prompts go as text")
            return None

    def work(self) -> WorkModel | None:
        """The work model of the local model (core/work.py), or None (a server's model is not ours)."""
        from measure.core import work as W

        if self.engine_is_remote or self.choice is None:
            return None
        try:
            if self.engine == "mlx":
                return W.from_config(self.choice.path / "config.json")
            assert self.choice.info is not None  # a GGUF's, read when the model was resolved
            return W.from_gguf(self.choice.info, self.choice.kv_element_bytes)
        except (ValueError, KeyError, OSError):
            return None

    def roofline(self, say: Callable[[str], None] = print) -> Roofline | None:
        """The predictor for the live view: this machine's probe (measured once, cached), the model's work.
        The probe's engine rates are llama.cpp's: another engine gets the bandwidth ceiling only."""
        from measure.machine import ceilings
        from measure.core.roofline import Machine, Roofline

        work = self.work()
        if work is None:
            return None
        own = self.choice if self.engine == "llama" and self.choice and not self.choice.embedded else None
        c = ceilings.get(say=say, model=own)  # the engine's rates on this very model (its kernels, its experts)
        warning = c.busy_warning()
        if warning and warning not in self.warnings:  # said at the start, and kept in the dashboard's log
            say(f"warning: {warning}")
            self.warnings.append(warning)
        if self.engine == "llama":
            m = Machine.from_ceilings(c, work)
        else:
            m = Machine(c.chip, c.attainable_gbps, "attainable (probe)", cores=c.cores,
                        notes=(f"the probe's engine rates are llama.cpp's, not {self.engine}'s: bandwidth only",))
        return Roofline(work, m, c.attainable_gbps)

    def start_refusal(self) -> str | None:
        """The dashboard's first level checked like any step: refused with the numbers unless it fits the budget
        or --force is given (--k 1000 must not spawn 1000 workers)."""
        if self.engine_is_remote or self.force or self.choice is None:
            return None
        from measure.core.guard import DEFAULT_OVERHEAD_BYTES, admit, engine_footprint

        b = (self.bs or [1])[0]
        fp = engine_footprint(self.mode, self.ks[0], b, b_cap=max(self.max_b, b), seq_ctx=self.ctx, ctx=self.ctx,
                              weight_bytes=self.choice.file_bytes,
                              kv_per_token=self.choice.kv_bytes_per_token(self.ctx) or 0.0,
                              overhead_bytes=DEFAULT_OVERHEAD_BYTES)
        why = admit(fp, self.memory_budget)
        return f"the starting level: {why}" if why else None

    def live_settings(self, brake: bool = True) -> LiveSettings:
        return LiveSettings(max_tokens=self.max_tokens, rate=self.rate, users=self.users,
                            bandwidth_gbps=self.bandwidth_gbps, bandwidth_source=self.bandwidth_source,
                            chip=self.chip, ignore_eos=self.ignore_eos, memory_budget=self.memory_budget,
                            kv_bytes_per_token=self.choice.kv_bytes_per_token(self.ctx) if self.choice else None,
                            memory_budget_source=self.memory_budget_source,
                            ctx=self.ctx, force=self.force, brake=brake and not self.engine_is_remote, slo=self.slo,
                            cost=self.cost, placement=self._placement(), engine_on_gpu=self.engine_on_gpu(),
                            engine_baseline=self.engine_baseline)

    def engine_on_gpu(self) -> bool:
        """Whether the engine's layers run on a GPU (its thermal state is then the GPU's): model_choice.gpu_share."""
        return gpu_share(self.engine, self.spec.n_gpu_layers if self.spec else None) > 0

    def _placement(self) -> str:
        """Where the engine's layers run (the llama engine: asked of llama.cpp; docs/design.md §26)."""
        if self.engine != "llama" or self.spec is None:
            return ""
        return llama_placement(self.spec.n_gpu_layers)

    def header(self, extra: dict[str, Any]) -> dict[str, Any]:
        """The first line of every records file and recording: environment, engine settings, model, plan."""
        common = {"workload": self.workload.key, "chip": self.chip, "bandwidth_gbps": self.bandwidth_gbps,
                  "slo": self.slo.describe() if self.slo else None,
                  "cost": self.cost.describe() if self.cost and self.cost.set else None,
                  "bandwidth_source": self.bandwidth_source, "rate": self.rate, "ignore_eos": self.ignore_eos,
                  "max_tokens": self.max_tokens, "started_unix": round(time.time(), 3),
                  "arrivals": self.arrivals.describe() if self.arrivals else None, **header_info(self.workload),
                  **({"sessions": self.sessions.describe()} if self.sessions else {}),
                  **extra}
        if self.engine_is_remote:  # the key's variable name only, never the key
            from engines.http_openai import public_url

            assert self.url is not None  # the first endpoint's (make_plan)
            return {"environment": environment(), "engine": self.engine, "url": public_url(self.url),
                    "endpoints": [{"url": e.shown(), "chip": e.chip, "label": e.name(),
                                   "bandwidth_gbps": e.bandwidth_gbps} for e in self.endpoints],
                    "routing": self.routing, "endpoint": self.endpoint,
                    "model": self.model_name, "model_bytes": self.model_bytes, "simulated": False,
                    "api_key_env": self.api_key_env, "prefix_cache": self.prefix_cache.describe(),
                    "tokenizer": self.tokenizer,
                    "open_loop_streams": "capped at B (--b)" if self.cap_open_loop else "not capped by the client",
                    **common}
        assert self.choice is not None and self.spec is not None  # a local engine's plan has both (make_plan)
        work = self.work()  # what a token reads (docs/design.md §26): the bandwidth product's W, recomputable
        return run_header(self.choice, self.spec, {
            "memory_budget": self.memory_budget, "memory_budget_source": self.memory_budget_source,
            "force": self.force, "threads": self.threads or "auto (physical cores ÷ K)",
            **({"read_bytes_per_token": work.read_bytes(1), "work": work.describe()} if work else {}), **common})

    def start_live(self, record: str | None = None, brake: bool = True,
                   prometheus: tuple[str, int] | None = None, peers: list[str] | None = None,
                   ray: tuple[str, int | None, list[int] | None] | None = None) -> LiveRun:
        """The live dashboard's parts, started: the source (a remote one checked before the screen takes over:
        SourceError when nothing answers), the recording, the roofline, the controller and its notes, the
        /metrics server (--prometheus) and the other clients watched (--peer)."""
        from measure.control.live.controller import LiveController
        from measure.machine.recorder import Recorder

        settings = self.live_settings(brake)
        source: Any
        if ray is not None:  # --ray: the load from client actors (sources/ray_clients.py)
            from measure.sources.ray_clients import RayClients

            source = RayClients(self, *ray, say=lambda t: print(t, flush=True))
        else:
            source = self.make_source(k=self.ks[0])
        if self.engine_is_remote:
            source.start()  # nothing answers: one line before the screen takes over
        recorder = None
        if record:
            from dataclasses import asdict

            extra = {"ray": source.header()} if ray is not None else {}
            recorder = Recorder(record, self.header({"command": "dashboard", "k": self.ks[0],
                                                     "settings": asdict(settings), **extra}))
        roofline = self.roofline(say=lambda t: print(t, flush=True))
        controller = LiveController(source, self.workload, settings, recorder=recorder, roofline=roofline)
        if recorder:
            recorder.on_error = lambda m: controller.log("error", f"{m}: the recording stops here, the dashboard "
                                                                  "goes on")
        controller.start()
        for note in self.notes:
            controller.log("info", note)
        for warning in self.warnings:
            controller.log("warn", warning)
        metrics_server = None
        if prometheus:
            from measure.control.live.prometheus import serve

            addr, port = prometheus
            try:
                metrics_server = serve(controller, port, addr)
                controller.log("info", f"/metrics at http://{addr}:{port}/metrics")
            except OSError as exc:
                controller.log("error", f"--prometheus {port}: cannot listen on {addr}:{port} ({exc.strerror or exc})")
        watch: Any = source if ray is not None else None  # one row per client actor
        if peers:
            from measure.control.live.peers import Peers

            watch = Peers(peers)
            watch.start()
            controller.log("info", f"watching {len(peers)} other client(s)' /metrics: "
                           f"{', '.join(r.label for r in watch.readings())}")
        title = self.choice.name if self.choice else source.meta.model
        return LiveRun(controller, title, watch, metrics_server)

    def describe_beta(self) -> str:
        if self.bandwidth_gbps:
            return f"β = {self.bandwidth_gbps:g} GB/s ({self.bandwidth_source})"
        return "β unknown (pass --bandwidth)"


def resolve_budget(text: str | None, total: int | None = None, limit_name: str | None = None,
                   gpu_share: float = 1.0) -> tuple[int, str]:
    """--memory-budget: None (the default fraction of the tightest memory limit: physical memory, a cgroup's,
    an rlimit), a fraction of it, or a size (48G = 48 GiB). The source names the limit that set it. `gpu_share`:
    the part of the footprint the GPU wires (the llama engine's layers offloaded; docs/design.md §26)."""
    if total is None:
        total, limit_name = effective_memory()
    limit_name = limit_name or "physical memory"
    if text is None:  # on a Mac: the GPU's working set less what macOS holds (docs/design.md §21)
        return default_budget(total, limit_name, gpu_share)
    try:
        v = float(text)
    except ValueError:
        v = None
    if v is not None and 0 < v <= 1:
        return int(v * total), f"{v:.0%} of {fmt_gib(total)} ({limit_name})"
    try:
        n = parse_size(text)
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


def http_endpoints(args: argparse.Namespace) -> list[Endpoint]:
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

    out = [Endpoint(check_url(u), args.chip, None, beta_of(args.chip, "--chip")) for u in (args.url or [])]
    if args.urls:
        try:
            lines = Path(args.urls).read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise StartError(f"--urls {args.urls}: cannot read it ({type(exc).__name__}: {exc})") from None
        for i, line in enumerate(lines, 1):
            parts = line.split("#", 1)[0].split(None, 2)
            if not parts:
                continue
            where = f"--urls {args.urls} line {i}"
            if not parts[0].startswith(("http://", "https://")):
                raise StartError(f"{where}: {parts[0][:60]!r} is not a URL; each line is URL [chip] [label] "
                                 "(chip '-' for none)")
            key = parts[1] if len(parts) > 1 and parts[1] != "-" else args.chip
            out.append(Endpoint(parts[0], key, parts[2].strip() if len(parts) > 2 else None, beta_of(key, where)))
        if not out:
            raise StartError(f"--urls {args.urls} lists no endpoint; each line is URL [chip] [label]")
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


def make_plan(args: argparse.Namespace, *, default_max_tokens: int,
              progress: Callable[[str], None] | None = None) -> RunPlan:
    """The one place command-line choices become a plan. StartError: one line, nothing started."""
    ks = args.k if isinstance(args.k, list) else [args.k or 1]  # None (not given): 1, or every endpoint given
    bs = args.b if isinstance(args.b, list) or args.b is None else [args.b]
    seed = getattr(args, "seed", None) or 0
    turns = getattr(args, "turns", None)
    wl, arrivals = _workload(args, seed, turns)
    sessions = _sessions(args, turns, arrivals, seed)
    contexts = getattr(args, "contexts", None) or []
    max_tokens = args.max_tokens or default_max_tokens
    ctx = _check_lengths(args, wl, contexts, max_tokens)
    budget, budget_src = resolve_budget(args.memory_budget, gpu_share=gpu_share(args.engine, args.n_gpu_layers))
    slo, cost = _slo_and_cost(args)
    common = dict(workload=wl, ks=ks, bs=bs, max_b=args.max_b, ctx=ctx, threads=args.threads,
                  max_tokens=max_tokens, rate=args.rate, users=args.users, ignore_eos=not args.stop_at_eos,
                  force=args.force, memory_budget=budget, memory_budget_source=budget_src, slo=slo, cost=cost,
                  arrivals=arrivals, sessions=sessions)
    if remote_engine(args.engine):
        return _remote_plan(args, common, progress)
    return _local_plan(args, common, progress)


def _workload(args: argparse.Namespace, seed: int, turns: int | None) -> tuple[Workload, ArrivalSpec | None]:
    """The workload and its arrival process (None: a closed loop)."""
    try:
        wl = resolve_workload(args.workload, prompt_len=getattr(args, "prompt_len", None),
                              output_len=getattr(args, "output_len", None), max_tokens=args.max_tokens, seed=seed,
                              turns=bool(turns), model_filter=getattr(args, "model_filter", None))
        arrivals = parse_arrivals(getattr(args, "arrivals", None), args.rate, speed=getattr(args, "speed", None),
                                  trace_times=getattr(wl, "times_s", None), seed=seed, trace_after=after_of(wl))
    except (DatasetError, ValueError) as exc:
        raise StartError(str(exc)) from None
    if arrivals is not None and arrivals.after is not None and not remote_engine(args.engine):
        raise StartError(f"--workload {wl.key}: its follow-ups are sent after their parents' answers, which only a "
                         "server's stream tells: run it with --engine http --url …")
    return wl, arrivals


def _sessions(args: argparse.Namespace, turns: int | None, arrivals: ArrivalSpec | None, seed: int
              ) -> SessionSpec | None:
    """--turns: multi-turn sessions against a server, closed loop only."""
    if getattr(args, "think_time", None) is not None and not turns:
        raise StartError("--think-time is the pause between a session's turns: give --turns N with it")
    if not turns:
        return None
    if not remote_engine(args.engine):
        raise StartError("--turns runs multi-turn sessions against a server (--engine http --url …): a local "
                         "engine clears its KV cache before every request, so there is no prefix cache to show")
    if arrivals is not None:
        raise StartError("--turns: a user sends its next turn after the last answer (a closed loop): drop "
                         "--rate, --arrivals and trace: workloads")
    if getattr(args, "contexts", None):
        raise StartError("--turns: a turn's prompt is the conversation so far: drop --contexts")
    try:
        return SessionSpec(turns, parse_think(args.think_time), seed)
    except SessionError as exc:
        raise StartError(str(exc)) from None


def _check_lengths(args: argparse.Namespace, wl: Workload, contexts: list[int], max_tokens: int) -> int:
    """The context size (--ctx, or the largest of --contexts), once every prompt and answer fits in it."""
    if contexts and isinstance(wl, Dataset):
        raise StartError("--contexts makes its own synthetic prompts (context − max_tokens tokens each): it does not "
                         "combine with --workload FILE, --prompt-len or --output-len")
    if contexts and min(contexts) <= max_tokens:
        raise StartError(f"--contexts {min(contexts)} leaves no room for a prompt with --max-tokens {max_tokens}; "
                         "give contexts above max_tokens")
    ctx: int = max([args.ctx, *contexts])
    long_tokens = wl.long_tokens if wl.long_every else 0
    assert long_tokens is not None  # a mixed workload (long_every) gives its long prompts' length too
    longest = max(wl.synthetic_tokens or 0, long_tokens)
    if longest and not contexts and not remote_engine(args.engine) and longest + max_tokens > ctx:
        raise StartError(f"--workload {wl.key}: a prompt of {longest} tokens + --max-tokens {max_tokens} exceeds "
                         f"--ctx {ctx}; raise --ctx to {longest + max_tokens} or more, or shorten the prompt")
    if not remote_engine(args.engine) and not contexts:
        n = getattr(args, "requests", None) or max(len(getattr(wl, "items", ())), CHECK_DRAWS)
        if why := check_fits(wl, n, max_tokens, ctx):
            raise StartError(why)
    return ctx


def _slo_and_cost(args: argparse.Namespace) -> tuple[SLO | None, Cost]:
    try:
        slo = preset_slo(args.slo) if args.slo else None
    except PresetError as exc:
        raise StartError(f"--slo: {exc}") from None
    if (args.hardware_cost is None) != (args.lifetime is None):
        raise StartError("--hardware-cost and --lifetime go together (the price spread over the hours of service)")
    if args.price_per_hour is not None and args.hardware_cost is not None:
        raise StartError("give --price-per-hour (rented) or --hardware-cost with --lifetime (owned), not both")
    return slo, Cost(args.price_per_hour, args.hardware_cost, args.lifetime, args.kwh_price, args.watts)


def _remote_plan(args: argparse.Namespace, common: dict[str, Any], progress: Callable[[str], None] | None
                 ) -> RunPlan:
    """--engine http: the endpoints, K over them, the model's bytes, the prefix cache and the tokenizer."""
    endpoints = http_endpoints(args)
    url = endpoints[0].url
    n = len(endpoints)
    ks = common["ks"]
    if args.k is None:  # a user who lists several servers means all of them: K = the endpoints given
        common["ks"] = ks = [n]
    if n > 1 and max(ks) > n:
        raise StartError(f"--k {max(ks)}: only {n} endpoints were given (K = endpoints in use)")
    try:
        model_bytes = parse_size(args.model_bytes) if args.model_bytes else 0
    except GuardError as exc:
        raise StartError(f"--model-bytes: {exc}") from None
    try:
        prefix = PrefixCache.parse(args.prefix_cache or ("on" if getattr(common["workload"], "shares_prefixes", False)
                                                          else None))  # a trace's block ids: kept by default
    except ValueError as exc:
        raise StartError(str(exc)) from None
    try:
        warmup = Warmup.parse(getattr(args, "warmup", None) or "auto")
    except ValueError as exc:
        raise StartError(str(exc)) from None
    tokenizer = args.tokenizer
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
    return RunPlan(engine=args.engine,
                   chip=where + (f" on {endpoints[0].chip}" if n == 1 and endpoints[0].chip else ""),
                   bandwidth_gbps=sum_gbps(betas),
                   bandwidth_source="the endpoints' chips" if all(betas) else "unknown",
                   url=url, endpoints=endpoints, routing=args.routing, model_bytes=model_bytes,
                   endpoint=args.endpoint, api_key_env=args.api_key_env, stall_s=args.stall_timeout,
                   model_name=args.model, prefix_cache=prefix, tokenizer=tokenizer,
                   client_procs=getattr(args, "client_procs", 1), cap_open_loop=args.b is not None, warmup=warmup,
                   **common)


def _local_plan(args: argparse.Namespace, common: dict[str, Any], progress: Callable[[str], None] | None
                ) -> RunPlan:
    """A local engine: its model resolved and its launch spec built (K workers of --threads each)."""
    if args.url or args.urls or args.model_bytes:
        raise StartError("--url, --urls and --model-bytes apply to --engine http")
    if getattr(args, "warmup", None) is not None:
        raise StartError("--warmup applies to --engine http (a local worker warms up with 2 requests as it starts)")
    if args.tokenizer is not None:
        raise StartError("--tokenizer applies to --engine http (a local engine tokenizes with its own model)")
    if args.prefix_cache not in (None, "off"):
        raise StartError("--prefix-cache applies to --engine http (a local engine clears its KV cache before "
                         "every request, so nothing is reused)")
    chip_name, beta, beta_src = resolve_bandwidth(args.chip, args.bandwidth)
    try:
        choice = resolve_model(args.engine, args.model, progress)
        spec = build_spec(args.engine, choice, args.threads, common["ctx"], max(common["ks"]),
                          not args.no_flash_attn, progress, n_gpu_layers=args.n_gpu_layers)
    except (EngineError, GuardError) as exc:
        raise StartError(str(exc)) from None
    plan = RunPlan(engine=args.engine, chip=chip_name, bandwidth_gbps=beta, bandwidth_source=beta_src,
                   choice=choice, spec=spec, **common)
    if spec.options.get("blas"):
        plan.notes.append(f"mlx BLAS: {spec.options['blas']}")
    return plan


__all__ = ["RunPlan", "LiveRun", "StartError", "make_plan", "resolve_budget", "resolve_bandwidth", "check_url"]
