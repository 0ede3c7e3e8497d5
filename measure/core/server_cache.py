"""What a server says about its prefix cache, its speculative decoding and its KV cache, per cell
(docs/design/traces.md): read from each response where it is sent, else from its Prometheus counters' rise.

- **Prefix-cache hit rate** = prompt tokens served from the cache ÷ prompt tokens: from each response's
  `usage.prompt_tokens_details.cached_tokens` (vLLM, SGLang, mlx_lm.server, llama-server; `extra.cached_tokens`
  in the record), else llama-server's `timings.cache_n ÷ (cache_n + prompt_n)`, else vLLM's
  `prefix_cache_hits_total ÷ prefix_cache_queries_total` (their rise between the first and the last scrape a
  record carried).
- **Speculative-decoding acceptance** = draft tokens accepted ÷ draft tokens proposed: llama-server's
  `timings.draft_n_accepted ÷ draft_n` summed over responses, else vLLM's `spec_decode_num_accepted_tokens_total
  ÷ spec_decode_num_draft_tokens_total` (rise); vLLM's mean acceptance length = 1 + accepted ÷ drafts.
- **KV use**: the highest `kv_cache_usage` the scrapes showed (vLLM's gauge; llama-server's /slots).

A figure a server does not give is absent (never 0).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from measure.core import metrics as M
from measure.core.records import RequestRecord


def _rise(records: Sequence[RequestRecord], *keys: str) -> tuple[float, ...] | None:
    """The counters' rise from the scrape before the load (a record's `load_start`: its endpoint's first) or,
    in a recording without one, the first scrape the records carried, to the last (by their end), or None.
    Without the scrape before the load the first wave of requests is left out of the rise."""
    views = sorted(((r.t_done_ns or 0, r.server_view) for r in records if isinstance(r.server_view, dict)),
                   key=lambda v: v[0])
    starts = [s for _, v in views if isinstance(s := v.get("load_start"), dict) and s]
    if len(views) < (1 if starts else 2):
        return None
    first, last = (starts[0] if starts else views[0][1]), views[-1][1]
    if not all(isinstance(first.get(k), (int, float)) and isinstance(last.get(k), (int, float)) for k in keys):
        return None
    return tuple(last[k] - first[k] for k in keys)


def cache_figures(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """prefix_cache_hit_rate (+ its source and the tokens it counts), spec_acceptance_rate (+ source, draft
    tokens), kv_cache_usage_max: those the server gave."""
    ok = M.ok(records)
    out: dict[str, Any] = {}
    timings = [t for t in ((r.server_view or {}).get("timings") for r in ok) if isinstance(t, dict)]
    usage = [((r.extra or {})["cached_tokens"], r.prompt_tokens) for r in ok
             if isinstance((r.extra or {}).get("cached_tokens"), int) and r.prompt_tokens]
    if usage:
        total = sum(p for _, p in usage)
        out.update(prefix_cache_hit_rate=sum(c for c, _ in usage) / total, prefix_cache_tokens=total,
                   prefix_cache_source="usage.prompt_tokens_details.cached_tokens")
    elif pairs := [(t["cache_n"], t["prompt_n"]) for t in timings
                   if isinstance(t.get("cache_n"), int) and isinstance(t.get("prompt_n"), int)]:
        total = sum(c + p for c, p in pairs)
        if total:
            out.update(prefix_cache_hit_rate=sum(c for c, _ in pairs) / total, prefix_cache_tokens=total,
                       prefix_cache_source="llama-server timings.cache_n")
    elif (rise := _rise(records, "prefix_cache_hits_total", "prefix_cache_queries_total")) and rise[1] > 0:
        out.update(prefix_cache_hit_rate=rise[0] / rise[1], prefix_cache_tokens=rise[1],
                   prefix_cache_source="vllm:prefix_cache_hits_total / queries_total")
    drafts = [(t["draft_n_accepted"], t["draft_n"]) for t in timings
              if isinstance(t.get("draft_n"), int) and isinstance(t.get("draft_n_accepted"), int)]
    if drafts and sum(d for _, d in drafts):
        n = sum(d for _, d in drafts)
        out.update(spec_acceptance_rate=sum(a for a, _ in drafts) / n, spec_draft_tokens=n,
                   spec_source="llama-server timings.draft_n_accepted / draft_n")
    elif (rise := _rise(records, "spec_decode_accepted_tokens_total", "spec_decode_draft_tokens_total",
                        "spec_decode_drafts_total")) and rise[1] > 0:
        out.update(spec_acceptance_rate=rise[0] / rise[1], spec_draft_tokens=rise[1],
                   spec_source="vllm:spec_decode_num_accepted_tokens_total / num_draft_tokens_total")
        if rise[2] > 0:
            out["spec_mean_acceptance_length"] = 1 + rise[0] / rise[2]
    kv = [v["kv_cache_usage"] for r in records if isinstance(v := r.server_view, dict)
          and isinstance(v.get("kv_cache_usage"), (int, float))]
    if kv:
        out["kv_cache_usage_max"] = max(kv)
    return out


def live_rates(view: dict[str, float] | None) -> dict[str, float]:
    """From one scrape (the dashboard, --prometheus): KV use, and the prefix-cache hit rate and draft acceptance
    from vLLM's counters since the server started; the ones the view has."""
    v = view or {}
    out = {}
    if isinstance(v.get("kv_cache_usage"), (int, float)):
        out["kv_cache_usage"] = float(v["kv_cache_usage"])
    if v.get("prefix_cache_queries_total"):
        out["prefix_cache_hit_rate"] = v.get("prefix_cache_hits_total", 0.0) / v["prefix_cache_queries_total"]
    if v.get("spec_decode_draft_tokens_total"):
        out["spec_acceptance_rate"] = (v.get("spec_decode_accepted_tokens_total", 0.0)
                                       / v["spec_decode_draft_tokens_total"])
    return out


class CacheFigures(Protocol):
    """A cell's server figures (control/bench/cell.Server)."""

    @property
    def prefix_cache_hit_rate(self) -> float | None: ...

    @property
    def spec_acceptance_rate(self) -> float | None: ...

    @property
    def kv_cache_usage_max(self) -> float | None: ...


def cache_note(server: CacheFigures) -> str:
    """The bench table's note: hit rate, acceptance, KV peak, where the server gave them."""
    note = ""
    if server.prefix_cache_hit_rate is not None:
        note += f" prefix-cache hits {server.prefix_cache_hit_rate:.0%}"
    if server.spec_acceptance_rate is not None:
        note += f" draft acceptance {server.spec_acceptance_rate:.0%}"
    if server.kv_cache_usage_max is not None:
        note += f" KV max {server.kv_cache_usage_max:.0%}"
    return note


__all__ = ["cache_figures", "cache_note", "live_rates"]
