"""The run plan: what a run measures, decided once (engine, model, chip and β with its source, memory budget,
workload, arrivals, endpoints), and what follows from it alone: its mode and meta, the run header, the starting
level's admission, the model's work and the roofline. control/builder.py makes it from the command line's
choices; control/wiring.py makes its load source, control/live/start.py the live dashboard's parts."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from engines.base import EngineSpec
from engines.registry import declared
from engines.spec import EngineDecl
from measure.core.arrivals import ArrivalSpec
from measure.core.cost import Cost
from measure.core.datasets import header_info
from measure.core.records import Mode, RunMeta
from measure.core.sessions import SessionSpec
from measure.core.units import fmt_gib
from measure.core.workload import PrefixCache
from measure.machine.envinfo import environment
from measure.machine.model_choice import ModelChoice, engine_label, gpu_share, llama_placement, run_header, run_meta
from measure.sources.warmup import Warmup
from presets import SLO, Workload

if TYPE_CHECKING:
    from measure.core.roofline import Roofline
    from measure.core.work import WorkModel
    from measure.sources.http import Endpoint


def remote_engine(engine: str) -> bool:
    """The one test of --engine for "a server of its own, reached at --url" (http); its records' mode is the one
    records.is_remote names."""
    return declared(engine).remote


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
    served: WorkModel | None = None  # http: the served model's work, where --model-bytes named its config or GGUF
    endpoint: str = "completions"
    api_key_env: str | None = None
    stall_s: float = 60.0
    model_name: str | None = None  # http: --model, the name the server knows
    prefix_cache: PrefixCache = PrefixCache()
    tokenizer: str | None = None  # http: a GGUF whose tokenizer makes the prompt ids, where the server agrees
    engine_baseline: dict[int, float] | None = None  # http: B → the engine's own batched tok/s (--baseline, docs/design/compare.md)
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
    def decl(self) -> EngineDecl:
        """The engine's declaration (engines/registry.py): what the plan asks of an engine it asks here."""
        return declared(self.engine)

    @property
    def engine_is_remote(self) -> bool:
        """A server of its own at --url (remote_engine): no model, memory or workers of ours."""
        return self.decl.remote

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
            return 1  # (a trace's follow-ups wait for their parents' answers: one process sees both)
        return client_procs(self.client_procs, max(self.bs or [1]))

    def http_header(self) -> dict[str, Any]:
        """A bench's records header over HTTP: the client processes its streams went through and each level's
        warmup rule (sources/warmup.py); {} for a local engine."""
        if not self.engine_is_remote:
            return {}
        return {"client_procs": self.client_processes(events=False), "warmup": self.warmup.describe()}

    def work(self) -> WorkModel | None:
        """The work model of the local model (core/work.py); a server's where --model-bytes named its config.json
        or GGUF (`served`), else None."""
        from measure.core import work as W
        from measure.machine.model_files import work_from_config

        if self.engine_is_remote:
            return self.served
        if self.choice is None:
            return None
        try:
            if self.decl.work_model == "config":
                return work_from_config(self.choice.path / "config.json")
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
        if work is None or self.engine_is_remote:  # a server's machine is not this one: no probe predicts it
            return None
        rates = self.decl.probe == "engine-rates"  # the probe's kernels are this engine's
        own = self.choice if rates and self.choice and not self.choice.embedded else None
        def said(line: str) -> None:  # a stale probe measured again: why, kept in the dashboard's log
            say(line)
            if line.endswith(ceilings.AGAIN):
                self.notes.append(line.removesuffix(ceilings.AGAIN) + "measured again")

        try:
            c = ceilings.get(say=said, model=own)  # the engine's rates on this very model (its kernels, its experts)
        except ceilings.ProbeError as exc:  # no figure of this machine: no prediction, said where the log keeps it
            why = f"no roofline: {exc}"
            say(f"warning: {why}")
            self.warnings.append(why)
            return None
        warning = c.busy_warning()
        if warning and warning not in self.warnings:  # said at the start, and kept in the dashboard's log
            say(f"warning: {warning}")
            self.warnings.append(warning)
        if rates:
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
        from measure.core.guard import DEFAULT_OVERHEAD_BYTES, EngineMemory, admit, engine_footprint

        b = (self.bs or [1])[0]
        fp = engine_footprint(self.mode, self.ks[0], b, EngineMemory(
            b_cap=max(self.max_b, b), seq_ctx=self.ctx, ctx=self.ctx, weight_bytes=self.choice.file_bytes,
            kv_per_token=self.choice.kv_bytes_per_token(self.ctx) or 0.0, overhead_bytes=DEFAULT_OVERHEAD_BYTES))
        why = admit(fp, self.memory_budget)
        return f"the starting level: {why}" if why else None

    def engine_on_gpu(self) -> bool:
        """Whether the engine's layers run on a GPU (its thermal state is then the GPU's): model_choice.gpu_share."""
        return gpu_share(self.engine, self.spec.n_gpu_layers if self.spec else None) > 0

    def placement(self) -> str:
        """Where the engine's layers run (the llama engine: asked of llama.cpp; docs/design/model-reads.md)."""
        if self.decl.gpu != "layers" or self.spec is None:
            return ""
        return llama_placement(self.spec.n_gpu_layers)

    def header(self, extra: Mapping[str, object]) -> dict[str, Any]:
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
                    **({"read_bytes_per_token": self.served.read_bytes(1), "work": self.served.describe(),
                        "served": asdict(self.served)} if self.served else {}), **common}
        assert self.choice is not None and self.spec is not None  # a local engine's plan has both (make_plan)
        work = self.work()  # what a token reads (docs/design/model-reads.md): the bandwidth product's W, recomputable
        return run_header(self.choice, self.spec, {
            "memory_budget": self.memory_budget, "memory_budget_source": self.memory_budget_source,
            "force": self.force, "threads": self.threads or "auto (physical cores ÷ K)",
            **({"read_bytes_per_token": work.read_bytes(1), "work": work.describe()} if work else {}),
            "residency": self.residency_header(), **common})

    def residency_header(self) -> dict[str, Any]:
        """The header's residency at the start (machine/residency.header_fields; docs/residency.md)."""
        from measure.machine.residency import header_fields

        assert self.choice is not None and self.spec is not None
        # a GGUF's engine (llama.cpp) maps its file unless told not to; mlx loads its safetensors
        mmapped = self.decl.work_model != "config" and bool(self.spec.options.get("use_mmap", True))
        return header_fields(mmapped, (self.choice.kv_bytes_per_token(self.ctx) or 0.0) * self.ctx)  # a request's KV

    def describe_beta(self) -> str:
        if self.bandwidth_gbps:
            return f"β = {self.bandwidth_gbps:g} GB/s ({self.bandwidth_source})"
        return "β unknown (pass --bandwidth)"


__all__ = ["RunPlan", "StartError", "remote_engine"]
