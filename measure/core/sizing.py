"""`inference-top plan`: what fits before any process starts — KV per token, per request, largest B and K —
and, on a chip, what each K and B would do (the roofline) and how many machines N users need."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple, TypedDict

from measure.core.guard import (DEFAULT_BUDGET_FRACTION, DEFAULT_OVERHEAD_BYTES, KVShape, dtype_bytes,
                                largest_fitting, mac_budget)
from measure.core.readings import Ceilings, is_mac
from measure.core import work as W
from measure.core.roofline import Lengths, Machine, Prediction, predict, prediction_table
from measure.core.units import fmt_bytes  # memory sizes in binary units (docs/design/units.md)


# How each engine holds a request's KV (work.KV_LAYOUTS, docs/design/model-reads.md): the in-process llama engine and
# llama-server make llama.cpp's reduced window cache (swa_full off); llama-cpp-python's own server keeps the bindings'
# default, the full-size cache; mlx-lm a rotating buffer of the window. The first is the one plan's sizes use.
ENGINE_KV = (("llama (in-process)", "llama.cpp-window"), ("llama-server", "llama.cpp-window"),
             ("llama_cpp.server", "llama.cpp-full"), ("mlx", "mlx"))


class PlanError(ValueError):
    """A plan the command cannot make: one line saying why."""


@dataclass(frozen=True)
class PlanMachine:
    """plan's machine: the runtime overhead an engine holds beside its weights (bytes), and whether its memory
    is unified (an Apple Silicon Mac)."""

    overhead: int = DEFAULT_OVERHEAD_BYTES
    unified: bool = False


class PlanRow(TypedDict):
    """plan's row for one context: KV a request holds (by engine too), and how many fit the budget."""

    context: int
    kv_per_request: float
    kv_by_engine: dict[str, float]
    engine_per_request: float  # unified memory: the prefill activations an mlx engine keeps a sequence
    max_b_one_engine: int
    max_k_one_seq_each: int
    concurrency_in_kv_cache: float | None
    users_fit: bool | None


class _Plan(TypedDict):
    model: str
    source: str
    kv_dtype: str
    kv_bytes_per_token: float
    weights: int
    memory: int
    budget: int
    budget_fraction: float | None
    budget_source: str
    unified: bool
    overhead: int
    rows: list[PlanRow]
    users: int | None


class Plan(_Plan, total=False):
    """plan's result (its --json): the budget, a row per context; with users, the longest context they fit at;
    with --chip, the roofline's predictions (added by the CLI)."""

    max_context_for_users: int
    predictions: list[dict[str, object]]  # roofline.Prediction's fields, as asdict wrote them
    read_bytes_per_token: float  # where the model's work is known: the weights one token's step reads
    work: str  # …what a step reads, in words (WorkModel.describe and its note)
    assumed: list[str]  # …what its source did not say and was assumed (WorkModel.assumed)


def plan(shape: KVShape, contexts: list[int], memory: int, kv_dtype: str = "f16", users: int | None = None,
         budget_fraction: float | None = None, kv_cache_tokens: int | None = None,
         machine: PlanMachine = PlanMachine()) -> Plan:
    """The numbers; every one from KV bytes/token = 2 × layers × kv_heads × head_dim × bytes/element.
    `unified`: an Apple Silicon Mac (docs/design/unified-memory.md): the budget is the GPU's working set less what the
    OS holds (guard.mac_budget) unless a fraction was given (None: the default), and each sequence also
    holds the prefill activations an mlx engine keeps (guard.mlx_prefill_bytes, at a prompt as long as the
    context)."""
    overhead, unified = machine.overhead, machine.unified
    kvb = shape.per_token(kv_dtype)
    if unified and budget_fraction is None:
        budget, budget_source = mac_budget(memory)
    else:
        budget_fraction = DEFAULT_BUDGET_FRACTION if budget_fraction is None else budget_fraction
        budget = int(memory * budget_fraction)
        budget_source = f"{budget_fraction:.0%} of {fmt_bytes(memory)}"
    rows: list[PlanRow] = []
    for ctx in contexts:
        per_req = shape.per_request(ctx, kv_dtype, ENGINE_KV[0][1])
        extra = shape.prefill_bytes_per_seq(ctx) if unified else 0.0
        rows.append({
            "context": ctx,
            "kv_per_request": per_req,
            "kv_by_engine": {name: shape.per_request(ctx, kv_dtype, layout) for name, layout in ENGINE_KV},
            "engine_per_request": extra,
            "max_b_one_engine": largest_fitting(budget, per_req + extra, shape.weight_bytes + overhead),
            "max_k_one_seq_each": largest_fitting(budget, shape.weight_bytes + overhead + per_req + extra),
            "concurrency_in_kv_cache": kv_cache_tokens / ctx if kv_cache_tokens else None,
            "users_fit": None if users is None else
            shape.weight_bytes + overhead + users * (per_req + extra) <= budget,
        })
    out: Plan = {
        "model": shape.name, "source": shape.source, "kv_dtype": kv_dtype, "kv_bytes_per_token": kvb,
        "weights": shape.weight_bytes, "memory": memory, "budget": budget, "budget_fraction": budget_fraction,
        "budget_source": budget_source, "unified": unified,
        "overhead": overhead, "rows": rows, "users": users,
    }
    if users:
        room = budget - shape.weight_bytes - overhead
        out["max_context_for_users"] = int(room // (users * kvb)) if room > 0 else 0
    if shape.work is not None:
        out["read_bytes_per_token"] = shape.work.read_bytes(1)
        out["work"] = f"{shape.work.describe()} ({shape.work.note})"
        out["assumed"] = list(shape.work.assumed)
    return out


def format_plan(p: Plan, shape: KVShape) -> str:
    kvb = p["kv_bytes_per_token"]
    lines = [
        f"model {p['model']} ({p['source']}), KV dtype {p['kv_dtype']}",
        f"KV per token: {kvb:,.0f} B ({fmt_bytes(kvb)}) = 2 × {shape.layers} layers × {shape.kv_heads} KV heads × "
        f"{shape.head_dim} head_dim × {dtype_bytes(p['kv_dtype']):g} B"
        + (" while a context is within every window (windowed layers hold at most theirs: the table)"
           if shape.layouts_differ else ""),
        f"weights: {fmt_bytes(p['weights'])}; runtime overhead assumed {fmt_bytes(p['overhead'])} per engine",
        *([f"a token's step reads {fmt_bytes(p['read_bytes_per_token'])} of weights"
           f" ({p['read_bytes_per_token']:,.0f} B)"] if "work" in p else []),
        *(f"  assumed: {a}" for a in p.get("assumed", ())),
        f"memory {fmt_bytes(p['memory'])}, budget {fmt_bytes(p['budget'])}: {p['budget_source']}" if p.get("unified")
        and p["budget_fraction"] is None else
        f"memory {fmt_bytes(p['memory'])}, budget {p['budget_fraction']:.0%} = {fmt_bytes(p['budget'])}",
        *([f"unified memory: each sequence also holds ≈ {fmt_bytes(p['rows'][0]['engine_per_request'])} of prefill "
           "activations an mlx engine keeps cached (estimated; docs/design/unified-memory.md)"]
          if p.get("unified") and p["rows"] and p["rows"][0]["engine_per_request"] else []),
        "",
        f"{'context':>9} {'KV/request':>12} {'max B (1 engine)':>17} {'max K (1 seq each)':>19}"
        + (f" {'KV-cache concurrency':>21}" if p["rows"] and p["rows"][0]["concurrency_in_kv_cache"] else "")
        + (f" {'users ' + str(p['users']) + ' fit':>14}" if p["users"] else ""),
    ]
    for r in p["rows"]:
        line = (f"{r['context']:>9,} {fmt_bytes(r['kv_per_request']):>12} {r['max_b_one_engine']:>17,} "
                f"{r['max_k_one_seq_each']:>19,}")
        if r["concurrency_in_kv_cache"]:
            line += f" {r['concurrency_in_kv_cache']:>20.2f}×"
        if p["users"]:
            line += f" {'yes' if r['users_fit'] else 'NO':>14}"
        lines.append(line)
    if shape.layouts_differ and shape.work is not None:
        w = shape.work
        lines.append(f"\n{w.describe()}: KV a request holds, by engine (the table uses the first):")
        for r in p["rows"]:
            lines.append(f"{r['context']:>9,} " + ", ".join(f"{n} {fmt_bytes(v)}" for n, v in r["kv_by_engine"].items()))
    if p.get("users"):
        lines.append(f"\n{p['users']} users (B={p['users']} in one engine) stop fitting above a context of "
                     f"{p['max_context_for_users']:,} tokens")
    return "\n".join(lines)


def chip_memory(key: str | None) -> int | None:
    """The largest memory a preset chip comes with (plan --chip without --memory)."""
    if not key or key == "this":
        return None
    from presets import PresetError, chip

    try:
        c = chip(key)
    except PresetError:
        return None
    return max(c.memory_bytes) if c.memory_bytes else None


def unified_memory(chip_key: str | None) -> bool:
    """Whether plan sizes for unified memory: an Apple chip from presets, or this machine when it is a Mac."""
    from presets import PresetError, chip

    if not chip_key or chip_key == "this":
        return is_mac()
    try:
        return chip(chip_key).unified
    except PresetError:
        return False


def size_for_users(users: int, slo_spec: str | None, contexts: list[int], result: Plan, work: W.WorkModel,
                   machine: Machine, prompt: int, output: int) -> str:
    """plan --users N --chip C [--slo S]: memory needed at the longest context, whether it fits, the predicted
    per-user rate and TTFT with all N in one engine, and how many machines of this kind it takes."""
    from presets import PresetError, slo as preset_slo

    try:
        target = preset_slo(slo_spec) if slo_spec else None
    except PresetError as exc:
        raise PlanError(f"--slo: {exc}") from None
    ctx = max(contexts)
    row = next((r for r in result["rows"] if r["context"] == ctx), None)
    kv_req = row["kv_per_request"] if row else ctx * result["kv_bytes_per_token"]
    per_req = kv_req + (row["engine_per_request"] if row else 0.0)
    fixed = result["weights"] + result["overhead"]
    budget = result["budget"]

    def verdict(n: int) -> tuple[Prediction, float, bool, bool]:
        p = predict(work, machine, "batch", 1, n, None, at=Lengths(prompt, output, ctx))
        need = fixed + n * per_req
        ok_mem = need <= budget
        ok_slo = target is None or ((target.tpot_s is None or p.tpot_s <= target.tpot_s)
                                    and (target.ttft_s is None or p.ttft_s <= target.ttft_s))
        return p, need, ok_mem, ok_slo

    p, need, ok_mem, ok_slo = verdict(users)
    lines = [f"{users} users, {ctx:,} tokens each: KV {fmt_bytes(users * per_req)} "
             f"({fmt_bytes(per_req)} a request) + weights and runtime {fmt_bytes(fixed)} = "
             f"{fmt_bytes(need)} needed; budget {fmt_bytes(budget)}: " + ("fits" if ok_mem else "does NOT fit"),
             f"all {users} in one engine (B = {users}) on {machine.name}: {p.per_stream_tps:.1f} tok/s per "
             f"user, TPOT {p.tpot_s * 1e3:.1f} ms, TTFT ≈ {p.ttft_s:.2f} s when all {users} arrive at once "
             f"(the p99 of a burst; binding: {p.binding})"
             + (f" → {'within' if ok_slo else 'OUTSIDE'} {target.key}" if target else "")]
    for m in range(1, users + 1):
        share = -(-users // m)
        pm, need_m, mem_ok, slo_ok = verdict(share)
        if mem_ok and slo_ok:
            lines.append(f"machines of this kind (or server instances): {m}, {share} users each "
                         f"({fmt_bytes(need_m)}, {pm.per_stream_tps:.1f} tok/s per user, TPOT "
                         f"{pm.tpot_s * 1e3:.1f} ms, TTFT ≈ {pm.ttft_s:.2f} s)")
            break
    else:
        lines.append("machines of this kind: none serves even one user within the bounds at this context")
    return "\n".join(lines)


class ChipPredictions(NamedTuple):
    """plan --chip's roofline: the model's work, the machine and the rows predicted."""

    work: W.WorkModel
    machine: Machine
    rows: list[Prediction]


def chip_predictions(work: Callable[[], W.WorkModel], chip: str | Callable[[], Ceilings],
                     prompt: int, output: int, context: int | None = None, result: Plan | None = None
                     ) -> ChipPredictions:
    """(work, machine, rows) for plan --chip: the model's bytes per decode step (`work` reads its config.json,
    GGUF or preset: machine/model_files.work_model), the chip from presets (`chip` its key) or this machine's
    probe (plan --chip this: `chip` reads its Ceilings, machine/ceilings.get), and the roofline's rows, each
    step's KV read at `context` tokens a sequence (None: prompt + half the output). On unified memory (`result`
    of plan() with unified set) a level whose footprint is over plan's budget reads the excess back from swap
    each step (Machine.spill_bytes)."""
    from engines.base import EngineError
    from presets import PresetError, chip as preset_chip

    try:
        wm = work()
        if not isinstance(chip, str):
            m = Machine.from_ceilings(chip(), wm)
        else:
            c = preset_chip(chip)
            if not c.bandwidth_gbps:
                raise PlanError(f"chip {chip!r} has no verified bandwidth in presets; predict with a chip that "
                                "has one")
            m = Machine.from_chip(c)
    except PlanError:
        raise
    except (EngineError, PresetError, ValueError, KeyError, OSError) as exc:
        raise PlanError(str(exc)) from None
    if result and result.get("unified"):
        ctx = context or prompt + output // 2
        row = next((r for r in result["rows"] if r["context"] == ctx), None)
        m = replace(m, memory_budget=result["budget"], overhead_bytes=result["overhead"],
                    seq_extra_bytes=row["engine_per_request"] if row else 0.0,
                    notes=m.notes + (f"memory budget {fmt_bytes(result['budget'])} (unified memory): a level over it "
                                     f"reads the excess back from swap at {m.swap_gbps:g} GB/s (assumed) each step",))
    return ChipPredictions(wm, m, prediction_table(wm, m, prompt_tokens=prompt, output_tokens=output,
                                                   context=context))
