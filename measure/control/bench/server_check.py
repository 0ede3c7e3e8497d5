"""The server's own figures beside the client's in an HTTP cell (docs/design/metrics.md "cell"): where llama-server
sends its per-response `timings`, and the rise of the Prometheus counters the records carried; a difference over
5 % between the server's and the client's count is a finding (`disagreements`)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict

from measure.core import metrics as M
from measure.core.records import RequestRecord


class ServerCheck(TypedDict, total=False):
    """The server's own figures beside the client's (server_check): those the server sent."""

    server_delta_generated_tokens_total: float
    server_delta_prompt_tokens_total: float
    server_delta_requests_total: float
    server_delta_preemptions: float
    requests: int
    server_tpot_ms: float
    client_tpot_ms: float
    server_prompt_tokens: int
    client_prompt_tokens: int
    server_cached_tokens: int
    server_output_tokens: int
    client_output_tokens: int
    disagreements: list[str]


DISAGREE = 0.05
# llama-server's timings keys server_check compares (engines/null_server.py sends only its own null_* keys)
LLAMA_TIMINGS = {"predicted_per_token_ms", "prompt_n", "predicted_n"}


def server_check(records: Sequence[RequestRecord]) -> ServerCheck | None:
    """The server's own figures beside the client's, where it sends them (llama-server's per-response `timings`):
    decode ms per token vs the client's TPOT, prompt tokens (prefilled + taken from its cache) vs the client's
    count, generated tokens vs the client's. A difference over 5 % is a finding, listed in `disagreements`."""
    deltas = _counter_deltas(records)
    timings = [(r, (r.server_view or {}).get("timings")) for r in M.ok(records)]
    pairs = [(r, t) for r, t in timings if isinstance(t, dict) and t.keys() & LLAMA_TIMINGS]
    if not pairs:
        return deltas
    server_tpot = [t["predicted_per_token_ms"] for _, t in pairs if t.get("predicted_per_token_ms")]
    client_tpot = [tp * 1e3 for tp in (M.tpot(r) for r, _ in pairs) if tp is not None]
    out = ServerCheck(**(deltas or {}), requests=len(pairs))
    if server_tpot and client_tpot:
        out["server_tpot_ms"], out["client_tpot_ms"] = _p50(server_tpot), _p50(client_tpot)
    # a prompt = the tokens prefilled (prompt_n) + those taken from the server's prefix cache (cache_n)
    sp = [(t["prompt_n"], t.get("cache_n") or 0, r.prompt_tokens) for r, t in pairs
          if t.get("prompt_n") and r.prompt_tokens]
    if sp:
        out["server_prompt_tokens"] = sum(a + c for a, c, _ in sp)
        out["client_prompt_tokens"] = sum(b for _, _, b in sp)
        if any(c for _, c, _ in sp):
            out["server_cached_tokens"] = sum(c for _, c, _ in sp)
    sg = [(t["predicted_n"], r.output_tokens) for r, t in pairs if t.get("predicted_n")]
    if sg:
        out["server_output_tokens"] = sum(a for a, _ in sg)
        out["client_output_tokens"] = sum(b for _, b in sg)
    _disagree(out)
    return out


# the Prometheus counters whose rise over a cell server_check shows, and the key it shows each under
DeltaKey = Literal["server_delta_generated_tokens_total", "server_delta_prompt_tokens_total",
                   "server_delta_requests_total", "server_delta_preemptions"]
DELTAS: tuple[tuple[str, DeltaKey], ...] = (
    ("generated_tokens_total", "server_delta_generated_tokens_total"),
    ("prompt_tokens_total", "server_delta_prompt_tokens_total"),
    ("requests_total", "server_delta_requests_total"), ("preemptions", "server_delta_preemptions"))


def _counter_deltas(records: Sequence[RequestRecord]) -> ServerCheck | None:
    """The server's Prometheus counters' rise over the cell (the view each record carried when it ended,
    first vs last), beside the client's own counts."""
    views = [(r.t_done_ns, r.server_view) for r in records if isinstance(r.server_view, dict) and r.t_done_ns]
    if len(views) < 2:
        return None
    views.sort(key=lambda v: v[0])
    first, last = views[0][1], views[-1][1]
    out = ServerCheck()
    # deltas between the scrapes the first and the last record carried (≤ 1 s apart from their ends): shown
    # beside the client's counts, not compared to 5 % (the scrape times do not line up with the records)
    for key, name in DELTAS:
        if isinstance(first.get(key), (int, float)) and isinstance(last.get(key), (int, float)):
            out[name] = last[key] - first[key]
    return out or None


def _disagree(out: ServerCheck) -> None:
    said = (("decode ms/token vs TPOT", out.get("server_tpot_ms"), out.get("client_tpot_ms")),
            ("prompt tokens", out.get("server_prompt_tokens"), out.get("client_prompt_tokens")),
            ("output tokens", out.get("server_output_tokens"), out.get("client_output_tokens")))
    out["disagreements"] = [f"{what}: server {s:.4g} vs client {c:.4g} ({s / c - 1:+.0%})"
                            for what, s, c in said if s is not None and c and abs(s / c - 1) > DISAGREE]


def _p50(values: Sequence[float]) -> float:
    """The median of values that are there (each caller's list is non-empty)."""
    v = M.percentile(values, 50)
    assert v is not None
    return v


__all__ = ["ServerCheck", "server_check", "DISAGREE", "LLAMA_TIMINGS"]
