"""The run plans the benchmarks load, built from measure/ as a library (benchmarks/ imports no tui: the import
contract in pyproject.toml). Each states its configuration in full; it is what `bench` makes of the options named
in its docstring (builder.make_plan over the CLI's defaults), checked field by field when written."""
from __future__ import annotations

from engines.http_openai import public_url
from measure.control.builder import check_url, resolve_bandwidth, resolve_budget
from measure.control.plan import RunPlan
from measure.core.arrivals import parse_arrivals
from measure.core.cost import Cost
from measure.machine.model_choice import build_spec, gpu_share, resolve_model
from measure.machine.workloads import resolve as resolve_workload
from measure.sources.http import Endpoint
from measure.sources.warmup import Warmup

CTX, MAX_B = 2048, 16  # bench's --ctx and --max-b defaults


def http_plan(url: str, rate: float, requests: int, tokens: int, procs: int, seed: int = 1) -> RunPlan:
    """`bench --engine http --url URL --rate RATE --arrivals poisson --requests N --max-tokens T --tokenizer none
    --workload synthetic:16 --seed 1 --client-procs P`: one server, a seeded Poisson schedule."""
    wl = resolve_workload("synthetic:16", prompt_len=None, output_len=None, max_tokens=tokens, seed=seed,
                          turns=False, model_filter=None)
    budget, budget_src = resolve_budget(None, gpu_share=gpu_share("http", None))
    return RunPlan(engine="http", workload=wl, ks=[1], bs=None, max_b=MAX_B, ctx=CTX, threads=None,
                   max_tokens=tokens, rate=rate, users=None, ignore_eos=True, force=False,
                   chip="server at " + public_url(url), bandwidth_gbps=None, bandwidth_source="unknown", memory_budget=budget,
                   memory_budget_source=budget_src, url=check_url(url), endpoints=[Endpoint(check_url(url), None, None, None)],
                   cost=Cost(None, None, None, None, None), arrivals=parse_arrivals("poisson", rate, seed=seed),
                   client_procs=procs, warmup=Warmup.parse("auto"))


def local_plan(engine: str, max_tokens: int) -> RunPlan:
    """`bench --engine ENGINE --max-tokens T`: its default model, K = 1 worker, the default workload, a closed
    loop (compare's null side is the embedded llama plan's: `--engine null` → `--engine llama`)."""
    wl = resolve_workload("default", prompt_len=None, output_len=None, max_tokens=max_tokens, seed=0, turns=False,
                          model_filter=None)
    budget, budget_src = resolve_budget(None, gpu_share=gpu_share(engine, None))
    chip_name, beta, beta_src = resolve_bandwidth(None, None)
    choice = resolve_model(engine, None, lambda m: None)
    spec = build_spec(engine, choice, None, CTX, 1, True, lambda m: None, n_gpu_layers=None)
    return RunPlan(engine=engine, workload=wl, ks=[1], bs=None, max_b=MAX_B, ctx=CTX, threads=None,
                   max_tokens=max_tokens, rate=None, users=None, ignore_eos=True, force=False, chip=chip_name,
                   bandwidth_gbps=beta, bandwidth_source=beta_src, memory_budget=budget,
                   memory_budget_source=budget_src, cost=Cost(None, None, None, None, None), choice=choice, spec=spec)
