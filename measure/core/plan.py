"""`inference-top plan`: what fits before any process starts — KV per token, per request, largest B and K."""
from __future__ import annotations

from typing import Any

from measure.core.guard import DEFAULT_BUDGET_FRACTION, DEFAULT_OVERHEAD_BYTES, KVShape, dtype_bytes, largest_fitting
from measure.core.units import fmt_bytes  # memory sizes in binary units (docs/design.md §12)


def plan(shape: KVShape, contexts: list[int], memory: int, kv_dtype: str = "f16", users: int | None = None,
         budget_fraction: float = DEFAULT_BUDGET_FRACTION, kv_cache_tokens: int | None = None,
         overhead: int = DEFAULT_OVERHEAD_BYTES) -> dict[str, Any]:
    """The numbers; every one from KV bytes/token = 2 × layers × kv_heads × head_dim × bytes/element."""
    kvb = shape.per_token(kv_dtype)
    budget = int(memory * budget_fraction)
    rows = []
    for ctx in contexts:
        per_req = ctx * kvb
        rows.append({
            "context": ctx,
            "kv_per_request": per_req,
            "max_b_one_engine": largest_fitting(budget, per_req, shape.weight_bytes + overhead),
            "max_k_one_seq_each": largest_fitting(budget, shape.weight_bytes + overhead + per_req),
            "concurrency_in_kv_cache": kv_cache_tokens / ctx if kv_cache_tokens else None,
            "users_fit": None if users is None else
            shape.weight_bytes + overhead + users * per_req <= budget,
        })
    out = {
        "model": shape.name, "source": shape.source, "kv_dtype": kv_dtype, "kv_bytes_per_token": kvb,
        "weights": shape.weight_bytes, "memory": memory, "budget": budget, "budget_fraction": budget_fraction,
        "overhead": overhead, "rows": rows, "users": users,
    }
    if users:
        room = budget - shape.weight_bytes - overhead
        out["max_context_for_users"] = int(room // (users * kvb)) if room > 0 else 0
    return out


def format_plan(p: dict[str, Any], shape: KVShape) -> str:
    kvb = p["kv_bytes_per_token"]
    lines = [
        f"model {p['model']} ({p['source']}), KV dtype {p['kv_dtype']}",
        f"KV per token: {kvb:,.0f} B ({fmt_bytes(kvb)}) = 2 × {shape.layers} layers × {shape.kv_heads} KV heads × "
        f"{shape.head_dim} head_dim × {dtype_bytes(p['kv_dtype']):g} B",
        f"weights: {fmt_bytes(p['weights'])}; runtime overhead assumed {fmt_bytes(p['overhead'])} per engine",
        f"memory {fmt_bytes(p['memory'])}, budget {p['budget_fraction']:.0%} = {fmt_bytes(p['budget'])}",
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
    if p.get("users"):
        lines.append(f"\n{p['users']} users (B={p['users']} in one engine) stop fitting above a context of "
                     f"{p['max_context_for_users']:,} tokens")
    return "\n".join(lines)
