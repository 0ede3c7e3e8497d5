"""The composition root of a run's load: a RunPlan (control/plan.py) → its load source, not started: K local workers
(sources/fleet.py) or B streams against the endpoints (sources/http_pool.py: one process or several), with the
tokenizer the prompts are made with. A bench (control/bench/start.py), the live dashboard (control/live/start.py)
and the client actors on a Ray cluster all make their source here."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from engines.base import EngineError
from measure.control.plan import RunPlan
from measure.core.records import RequestRecord
from measure.machine.model_choice import run_meta
from measure.sources.base import FiniteLoadSource
from measure.sources.warmup import Warmup

if TYPE_CHECKING:
    from engines.tokenizer import GGUFTokenizer


def make_source(plan: RunPlan, events: bool = True, on_record: Callable[[RequestRecord], None] | None = None,
                k: int | None = None, per_cell: bool = False) -> FiniteLoadSource:
    """The load source, not started: K local workers, or B streams against --url. `per_cell`: a sweep
    sets each cell's mode, B and batch context itself, so the workers start plain (no batch context made
    for the largest B before the memory guard has seen it)."""
    if plan.engine_is_remote:
        from measure.sources.http_pool import http_source

        make = http_source(plan.client_processes(events), max(plan.bs or [1]))
        src: FiniteLoadSource  # HttpSource or HttpPool (http_source gives the class untyped)
        src = make(plan.endpoints or plan.url, plan.meta(), b=(plan.bs or [1])[0], endpoint=plan.endpoint,
                         model=plan.model_name, api_key_env=plan.api_key_env, stall_s=plan.stall_s,
                         on_record=on_record, events=events, prefix_cache=plan.prefix_cache,
                         tokenizer=tokenizer(plan), routing=plan.routing, cap_open_loop=plan.cap_open_loop,
                         warmup=Warmup(requests=0) if events else plan.warmup)
        if k is not None or len(plan.endpoints) > 1:
            src.scale_to(k or plan.ks[0])
        return src
    from measure.sources.fleet import Fleet

    assert plan.spec is not None and plan.choice is not None  # a local engine's plan has both (builder.make_plan)
    if per_cell:
        return Fleet(plan.spec, run_meta(plan.engine, plan.choice, "instances", 1), k=k or plan.ks[0],
                     threads=plan.threads, on_record=on_record, b_cap=1, events=events)
    return Fleet(plan.spec, plan.meta(), k=k or plan.ks[0], threads=plan.threads, on_record=on_record,
                 b_cap=max(plan.max_b, max(plan.bs or [1])), events=events)

def tokenizer(plan: RunPlan) -> GGUFTokenizer | None:
    """--tokenizer's GGUF tokenizer, or None (no file, or one that cannot be read: a note says so, prompts go as text)."""
    if not plan.tokenizer:
        return None
    from engines.tokenizer import GGUFTokenizer

    try:
        return GGUFTokenizer(plan.tokenizer)
    except (EngineError, ValueError, OSError) as exc:
        plan.notes.append(f"no local tokenizer ({exc}): prompts go as text")
        return None


__all__ = ["make_source", "tokenizer"]
