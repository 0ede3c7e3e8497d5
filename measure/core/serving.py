"""Does a server batch the streams it is sent, and how much of its engine's batching does it deliver
(docs/design.md §28). Pure: figures in, a verdict out.

Live (`batching`): B streams open at the client but a server that serialises works on one at a time: its
**served concurrency** is ≈ 1 where the client's achieved concurrency (§6) is ≈ B. The served concurrency is the
larger of the server's own gauge where its /metrics has one (llama-server's requests_processing, vLLM's
num_requests_running, the null server's requests_running: the median of the window's scrapes since the level
began) and the token timing (`decoding_concurrency`): Σ over the streams of the part of (first token → last
token) inside the window ÷ the window. A serialising server's streams take turns, so their decoding spans do not
overlap (≤ 1); a batching server's overlap (≈ B, less the prefills).

Against the engine (`rows`, `verdict`): per B, the server's tok/s ÷ the engine's own batched tok/s in-process,
for the same prompts, lengths and seed; TPOT and TTFT side by side; the streams open and served at once from the
server's records (`concurrency_of`); one verdict over all B.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from measure.core import metrics as M
from measure.core.records import RequestRecord

OPEN_MIN = 1.8  # fewer streams open on average (B = 1, or a B ≥ 2 level still filling): nothing to tell
SERIAL_MAX = 1.3  # served concurrency at most this …
SERIAL_SHARE = 0.7  # … and at most this share of the open streams: the server serialises
FULL_SHARE = 0.9  # a server delivering at least this share of the engine's batched tok/s at every B ≥ 2 batches fully
SCALES = 1.25  # tok/s at the largest B over B = 1 below this: flat in B
MIN_SPAN_S = 3.0  # a live window shorter than this (the load just began) is not judged
GAUGE_MIN = 0.5  # a server's running gauge below this while streams are open is not read
GAUGE_SCRAPES = 3  # live: the gauge is read once the level has this many scrapes in the window
TTFT_RISE = 1.5  # TTFT at the largest B over B = 1 at least this: rising with queue position
ERRORS_MAX = 0.1  # a server failing more than this share of its streams at some B gets no batching verdict


def decoding_concurrency(streams: Iterable[Sequence[int]], a_ns: int, b_ns: int) -> float | None:
    """Σ over streams (each its sorted token timestamps) of the part of (first token → last token) inside
    [a, b) ÷ (b − a): the streams decoding at once on average. None for an empty window."""
    if b_ns <= a_ns:
        return None
    busy = 0
    for ts in streams:
        if len(ts) >= 2:
            busy += max(0, min(ts[-1], b_ns) - max(ts[0], a_ns))
    return busy / (b_ns - a_ns)


def concurrency_of(records: Sequence[RequestRecord]) -> tuple[float | None, float | None]:
    """(streams open, streams served at once) over a cell's finished requests, from the first started to the
    last done: the achieved concurrency (§6) and the decoding concurrency of their token times."""
    done = [r for r in records if r.t_started_ns is not None and r.t_done_ns is not None]
    if not done:
        return None, None
    a = min(r.t_started_ns for r in done if r.t_started_ns is not None)
    b = max(r.t_done_ns for r in done if r.t_done_ns is not None) + 1
    return M.achieved_concurrency(done, a, b), decoding_concurrency([r.token_ns for r in done], a, b)


@dataclass(frozen=True)
class Batching:
    """The live verdict: `serialises` or `batches`, the streams the server works on at once (`served`), those the
    client has open (`open`), and where `served` came from (the server's /metrics or the token timing)."""

    verdict: str
    served: float
    open: float
    source: str


def batching(open_streams: float, decoding: float | None, server_running: float | None,
             span_s: float = MIN_SPAN_S) -> Batching | None:
    """The live verdict from the window's achieved concurrency (`open_streams`, §6), its decoding concurrency and
    the median of the server's running gauge over it (None where its /metrics has none), over a window of
    span_s. None while the window is shorter than MIN_SPAN_S (the load just began), fewer than OPEN_MIN streams
    are open on average, or neither figure is known. The served concurrency is the larger of the two figures:
    a server is named serialising only where every figure there is says so (a gauge scraped once a second
    aliases short requests: a batching null server's read 1.0 of 4 open while its streams' tokens overlapped).
    A gauge below GAUGE_MIN while streams are open is not read (scraped before the load, or counting something
    else)."""
    if open_streams < OPEN_MIN or span_s < MIN_SPAN_S:
        return None
    gauge = server_running if server_running is not None and server_running >= GAUGE_MIN else None
    if gauge is None and decoding is None:
        return None
    served, source = ((gauge, "its /metrics") if gauge is not None and (decoding is None or gauge >= decoding)
                      else (decoding or 0.0, "token timing"))
    serial = served <= SERIAL_MAX and served <= SERIAL_SHARE * open_streams
    return Batching("serialises" if serial else "batches", served, open_streams, source)


@dataclass(frozen=True)
class Row:
    """One B: the engine's and the server's figures (tok/s; TPOT and TTFT p50 in ms), and their ratio."""

    b: int
    engine_tps: float | None
    server_tps: float | None
    engine_tpot_ms: float | None
    server_tpot_ms: float | None
    engine_ttft_ms: float | None
    server_ttft_ms: float | None
    server_errors: int = 0  # the server's streams that failed at this B
    server_requests: int = 0  # the requests sent to it at this B (completed + errors)
    open: float | None = None  # streams open at the server (achieved concurrency, §6) …
    served: float | None = None  # … and served at once (decoding concurrency), from its records

    @property
    def share(self) -> float | None:
        """The server's tok/s ÷ the engine's."""
        if self.engine_tps and self.server_tps is not None:
            return self.server_tps / self.engine_tps
        return None


def rows(engine: Sequence[Mapping[str, Any]], server: Sequence[Mapping[str, Any]],
         server_records: Sequence[RequestRecord] = ()) -> list[Row]:
    """The summary.json cells of the two sweeps paired by B (one cell per B each; a B missing on one side has
    None there); the server's records give each B's streams open and served at once (concurrency_of)."""
    by_e = {int(c["b"]): c for c in engine}
    by_s = {int(c["b"]): c for c in server}
    out = []
    for b in sorted(set(by_e) | set(by_s)):
        e, v = by_e.get(b), by_s.get(b)
        errors = int(_f(v, "errors") or 0)
        out.append(Row(b, _f(e, "output_throughput"), _f(v, "output_throughput"), _f(e, "median_tpot_ms"),
                       _f(v, "median_tpot_ms"), _f(e, "median_ttft_ms"), _f(v, "median_ttft_ms"), errors,
                       int(_f(v, "completed") or 0) + errors,
                       *concurrency_of([r for r in server_records if r.b == b])))
    return out


def _f(cell: Mapping[str, Any] | None, key: str) -> float | None:
    v = cell.get(key) if cell else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def verdict(table: Sequence[Row]) -> tuple[str, str]:
    """(verdict, why) over all B: `fails streams` (more than ERRORS_MAX of the server's streams failed at some B:
    its figures are not a batching verdict), `serialises` (at every B ≥ 2 its records show the streams open
    served one at a time, the live rule `batching`; or its tok/s flat in B while the engine's rises, its TTFT
    rising with the queue: a server that interleaves its streams without batching them, as mlx_lm.server did),
    `batches fully` (≥ FULL_SHARE of the engine's tok/s at every B ≥ 2), `batches with X % overhead` (X = 1 − its
    share at the largest B), or `undecided` (one B, a side missing, or an engine that does not scale here
    either)."""
    failing = [r for r in table if r.server_errors > ERRORS_MAX * max(1, r.server_requests)]
    if failing:
        return "fails streams", ", ".join(f"B={r.b}: {r.server_errors} of {r.server_requests} streams failed"
                                          for r in failing)
    known = [r for r in table if r.engine_tps and r.server_tps is not None]
    first = next((r for r in known if r.b == 1), None)
    if first is None or not any(r.b >= 2 for r in known):
        return "undecided", "needs B = 1 and a B ≥ 2 measured on both sides"
    last = max(known, key=lambda r: r.b)
    assert first.engine_tps and first.server_tps is not None and last.engine_tps and last.server_tps is not None
    e_scale, s_scale = last.engine_tps / first.engine_tps, last.server_tps / max(first.server_tps, 1e-9)
    timed = [r for r in known if r.b >= 2 and r.open is not None]
    if timed and all((v := batching(r.open or 0.0, r.served, None)) is not None and v.verdict == "serialises"
                     for r in timed):
        return "serialises", "served at once " + ", ".join(f"{r.served:.1f} of {r.open:.1f} open (B={r.b})"
                                                           for r in timed) + _ttft_rise(first, last)
    if e_scale < SCALES:
        return "undecided", f"the engine itself does not scale here (B={last.b}: ×{e_scale:.2f} of B=1)"
    rise = (last.server_ttft_ms / first.server_ttft_ms if last.server_ttft_ms and first.server_ttft_ms else None)
    if s_scale < SCALES and (rise is None or rise >= TTFT_RISE):
        why = f"server tok/s ×{s_scale:.2f} from B=1 to B={last.b} (the engine ×{e_scale:.2f})"
        if timed:  # its streams overlap, yet no more tokens come: it takes turns between them, it does not batch
            why += ("; its streams interleave (served at once " + ", ".join(
                f"{r.served:.1f} of {r.open:.1f} open (B={r.b})" for r in timed) + ") without more tok/s")
        return "serialises", why + _ttft_rise(first, last)
    shares = [r.share for r in known if r.b >= 2 and r.share is not None]
    if shares and min(shares) >= FULL_SHARE:
        return "batches fully", f"≥ {min(shares):.0%} of the engine's tok/s at every B ≥ 2"
    share = last.share or 0.0
    return (f"batches with {max(0.0, 1 - share):.0%} overhead",
            f"{share:.0%} of the engine's tok/s at B={last.b} (×{s_scale:.2f} from B=1; the engine ×{e_scale:.2f})")


def _ttft_rise(first: Row, last: Row) -> str:
    if last.server_ttft_ms and first.server_ttft_ms:
        return f"; TTFT p50 ×{last.server_ttft_ms / first.server_ttft_ms:.1f} from B=1 to B={last.b} (the queue)"
    return ""
