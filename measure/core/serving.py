"""Does a server batch the streams it is sent, and how much of its engine's batching does it deliver
(docs/design/server-vs-engine.md). Pure: figures in, a verdict out.

Live (`batching`): B streams open at the client but a server that serialises works on one at a time: its
**served concurrency** is ≈ 1 where the client's achieved concurrency (docs/design/concurrency.md) is ≈ B. The served concurrency is the
larger of the server's own gauge where its /metrics has one (llama-server's requests_processing, vLLM's
num_requests_running, the null server's requests_running: the median of the window's scrapes since the level
began) and the token timing (`decoding_concurrency`): Σ over the streams of the part of (first token → last
token) inside the window ÷ the window. A serialising server's streams take turns, so their decoding spans do not
overlap (≤ 1); a batching server's overlap (≈ B, less the prefills).

Against the engine (`rows`, `batching_verdict`): per B, the server's tok/s ÷ the engine's own batched tok/s in-process,
for the same prompts, lengths and seed; TPOT and TTFT side by side; the streams open and served at once from the
server's records (`concurrency_of`); one verdict over all B.

The prefill counts as serving (issue 58): a stream's span starts a prefill before its first token (the unqueued
TTFT: the median at B = 1, else the cell's shortest), never before it was sent. Counted from first token to last
only, a batching server whose prefill is as long as its decode read "served 0.7 of 2.0 open" and was named
serialising. Where the records carry the server's running gauge, its median over the cell is read too.
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
STEADY_S = 3.0  # live: a verdict is shown (and a server not batching logged) once it has held this long; a window
# just past MIN_SPAN_S read a batching null server's stepping as 'interleaves' for a moment under CI's load
GAUGE_MIN = 0.5  # a server's running gauge below this while streams are open is not read
GAUGE_SCRAPES = 3  # live: the gauge is read once the level has this many scrapes in the window
TTFT_RISE = 1.5  # the server's TTFT rise from B = 1 at least this × the engine's own at that B: the queue
ERRORS_MAX = 0.1  # a server failing more than this share of its streams at some B gets no batching verdict
STEP_TOGETHER = 0.5  # two streams' tokens closer than this × (TPOT ÷ streams served), half the gap a server
# taking turns leaves between them, came out of one step
INTERLEAVED_MAX = 0.7  # streams overlapping, stepped together at most this × a batcher's (served − 1) ÷ served: in
# turns (the null server at B = 2, 4, 8 under a load of 15 on 2 cores: taking turns 0.24, 0.27, 0.52; batching
# 0.52, 0.73, 0.88, its client's reads bunching tokens that came apart)


def interleaved(stepped: float | None, served: float | None) -> bool:
    """Streams served at once whose tokens come out of one step far less often than a batching server's do."""
    return stepped is not None and served is not None and served > 1 and \
        stepped <= INTERLEAVED_MAX * (served - 1) / served
MIN_GAPS = 20  # fewer gaps between two streams' tokens than this: the stepping is not read


STALL = 3.0  # a gap in a stream over this × its mean gap is a stall (another stream's prefill taken in turn), not a step


def steady_tpot(ts: Sequence[int]) -> float | None:
    """A stream's mean gap between its tokens (ns) with its stalls left out (gaps over STALL × the mean of all):
    an interleaving server's 400 ms prefills in 20 ms turns read TPOT 47 ms and made every 10 ms turn a shared
    step. None under two tokens."""
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    if not gaps:
        return None
    mean = sum(gaps) / len(gaps)
    kept = [g for g in gaps if g <= STALL * mean]
    return sum(kept) / len(kept)


def stepped_share(streams: Iterable[Sequence[int]], served: float) -> float | None:
    """Of the gaps between consecutive tokens of two different streams (every stream's token times merged), the
    share shorter than STEP_TOGETHER × TPOT ÷ served, TPOT the median over the streams of steady_tpot: tokens
    that came out of one step. A server that batches sends a token of every stream each step (≈ (served − 1) ÷
    served of these gaps short); one that takes turns between its streams (a prefill or one token at a time)
    spaces them a token's work apart (none short). None under MIN_GAPS such gaps, or without a TPOT."""
    streams = [list(ts) for ts in streams]
    tpot_ns = M.percentile([t for ts in streams if (t := steady_tpot(ts)) is not None], 50)
    if not tpot_ns or tpot_ns <= 0 or served <= 0:
        return None
    merged = sorted([(t, i) for i, ts in enumerate(streams) for t in ts])
    near = STEP_TOGETHER * tpot_ns / max(1.0, served)
    gaps = short = 0
    for (t0, a), (t1, b) in zip(merged, merged[1:]):
        if a != b:
            gaps += 1
            short += (t1 - t0) < near
    return short / gaps if gaps >= MIN_GAPS else None


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


def serving_spans(records: Iterable[RequestRecord], prefill_ns: int) -> list[list[int]]:
    """Each stream's span of service (start, last token): from `prefill_ns` before its first token (never before
    it was sent) to its last token; a stream without a token has none."""
    out = []
    for r in records:
        if r.token_ns:
            sent = r.t_started_ns if r.t_started_ns is not None else r.token_ns[0]
            out.append([max(sent, r.token_ns[0] - prefill_ns), r.token_ns[-1]])
    return out


def prefill_of(records: Sequence[RequestRecord]) -> int:
    """The unqueued prefill (ns) of a server's records: the median TTFT of its B = 1 requests, else the shortest
    TTFT there is (the request that found the server free); 0 where none has a first token."""
    def ttfts(rs: Iterable[RequestRecord]) -> list[int]:
        return [r.token_ns[0] - r.t_started_ns for r in rs if r.token_ns and r.t_started_ns is not None]
    alone = ttfts(r for r in records if r.b == 1)
    if alone:
        return int(M.percentile(alone, 50) or 0)
    return max(0, min(ttfts(records), default=0))


def gauge_of(records: Sequence[RequestRecord]) -> float | None:
    """The median of the server's running gauge over a cell's records (each carries the last scrape before it
    ended, ≤ 1 s old); None where they carry none, or where it reads below GAUGE_MIN (scraped between loads)."""
    values = [float(v["running"]) for r in records if isinstance(v := r.server_view, dict)
              and isinstance(v.get("running"), (int, float)) and v["running"] >= GAUGE_MIN]
    return M.percentile(values, 50) if values else None


def concurrency_of(records: Sequence[RequestRecord], prefill_ns: int = 0) -> tuple[float | None, float | None]:
    """(streams open, streams served at once) over a cell's finished requests, from the first started to the
    last done: the achieved concurrency (docs/design/concurrency.md) and the serving concurrency of their token times, each stream's
    span begun `prefill_ns` before its first token (serving_spans)."""
    done = [r for r in records if r.t_started_ns is not None and r.t_done_ns is not None]
    if not done:
        return None, None
    a = min(r.t_started_ns for r in done if r.t_started_ns is not None)
    b = max(r.t_done_ns for r in done if r.t_done_ns is not None) + 1
    return M.achieved_concurrency(done, a, b), decoding_concurrency(serving_spans(done, prefill_ns), a, b)


@dataclass(frozen=True)
class Batching:
    """The live verdict: `serialises`, `interleaves` or `batches`, the streams the server works on at once
    (`served`), those the client has open (`open`), and where `served` came from (the server's /metrics or the
    token timing)."""

    verdict: str
    served: float
    open: float
    source: str


def batching(open_streams: float, decoding: float | None, server_running: float | None,
             span_s: float = MIN_SPAN_S, stepped: float | None = None) -> Batching | None:
    """The live verdict from the window's achieved concurrency (`open_streams`, docs/design/concurrency.md), its decoding concurrency and
    the median of the server's running gauge over it (None where its /metrics has none), over a window of
    span_s. None while the window is shorter than MIN_SPAN_S (the load just began), fewer than OPEN_MIN streams
    are open on average, or neither figure is known. The served concurrency is the larger of the two figures:
    a server is named serialising only where every figure there is says so (a gauge scraped once a second
    aliases short requests: a batching null server's read 1.0 of 4 open while its streams' tokens overlapped).
    A gauge below GAUGE_MIN while streams are open is not read (scraped before the load, or counting something
    else). `decoding` counts each stream's prefill (serving_spans): counted from its first token, a batching
    server whose prefill is as long as its decode read 0.7 of 2 open. Streams served at once whose tokens never
    come out of one step (`stepped`, stepped_share: `interleaved`) are taken in turns: `interleaves`."""
    if open_streams < OPEN_MIN or span_s < MIN_SPAN_S:
        return None
    gauge = server_running if server_running is not None and server_running >= GAUGE_MIN else None
    if gauge is None and decoding is None:
        return None
    served, source = ((gauge, "its /metrics") if gauge is not None and (decoding is None or gauge >= decoding)
                      else (decoding or 0.0, "token timing"))
    serial = served <= SERIAL_MAX and served <= SERIAL_SHARE * open_streams
    turns = not serial and interleaved(stepped, served)
    return Batching("serialises" if serial else "interleaves" if turns else "batches", served, open_streams, source)


@dataclass(frozen=True)
class ServingRow:
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
    open: float | None = None  # streams open at the server (achieved concurrency, docs/design/concurrency.md) …
    served: float | None = None  # … and served at once (token timing, each stream's prefill counted), from its records
    gauge: float | None = None  # the server's running gauge (median over its records), where it has one
    engine_prompt_tokens: int | None = None  # prompt tokens each side was sent at this B (their records' sum) …
    server_prompt_tokens: int | None = None
    engine_output_tokens: int | None = None  # … and the tokens each side answered
    server_output_tokens: int | None = None
    stepped: float | None = None  # the share of its streams' tokens that came out of one step (stepped_share)

    @property
    def share(self) -> float | None:
        """The server's tok/s ÷ the engine's."""
        if self.engine_tps and self.server_tps is not None:
            return self.server_tps / self.engine_tps
        return None

    @property
    def at_once(self) -> float | None:
        """The streams served at once: the larger of the gauge and the token timing (batching's rule)."""
        known = [x for x in (self.gauge, self.served) if x is not None]
        return max(known) if known else None


def _tokens(records: Sequence[RequestRecord], what: str) -> int | None:
    vals = [getattr(r, what) for r in records if not r.error]
    return sum(int(v) for v in vals if v) if vals and all(v is not None for v in vals) else None


def rows(engine: Sequence[Mapping[str, Any]], server: Sequence[Mapping[str, Any]],
         server_records: Sequence[RequestRecord] = (), engine_records: Sequence[RequestRecord] = ()) -> list[ServingRow]:
    """The summary.json cells of the two sweeps paired by B (one cell per B each; a B missing on one side has
    None there); the server's records give each B's streams open and served at once (concurrency_of, the
    prefill counted: prefill_of), its running gauge (gauge_of) and, with the engine's, each side's tokens."""
    by_e = {int(c["b"]): c for c in engine}
    by_s = {int(c["b"]): c for c in server}
    prefill = prefill_of(server_records)
    out = []
    for b in sorted(set(by_e) | set(by_s)):
        e, v = by_e.get(b), by_s.get(b)
        errors = int(_f(v, "errors") or 0)
        mine = [r for r in server_records if r.b == b]
        theirs = [r for r in engine_records if r.b == b]
        opened, served = concurrency_of(mine, prefill)
        tpot = _f(v, "median_tpot_ms")
        stepped = stepped_share([r.token_ns for r in mine], served) if served else None
        out.append(ServingRow(b, _f(e, "output_throughput"), _f(v, "output_throughput"), _f(e, "median_tpot_ms"),
                       tpot, _f(e, "median_ttft_ms"), _f(v, "median_ttft_ms"), errors,
                       int(_f(v, "completed") or 0) + errors, opened, served, gauge_of(mine),
                       _tokens(theirs, "prompt_tokens"), _tokens(mine, "prompt_tokens"),
                       _tokens(theirs, "output_tokens"), _tokens(mine, "output_tokens"), stepped))
    return out


def _f(cell: Mapping[str, Any] | None, key: str) -> float | None:
    v = cell.get(key) if cell else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _serial(r: ServingRow) -> bool:
    v = batching(r.open or 0.0, r.served, r.gauge)
    return v is not None and v.verdict == "serialises"


def _served_text(rows_: Sequence[ServingRow]) -> str:
    return ", ".join(f"{r.at_once or 0.0:.1f} of {r.open or 0.0:.1f} open (B={r.b}"
                     + (", its gauge" if r.gauge is not None and r.gauge >= (r.served or 0.0) else "") + ")"
                     for r in rows_)


def batching_verdict(table: Sequence[ServingRow]) -> tuple[str, str]:
    """(verdict, why) over all B: `fails streams` (more than ERRORS_MAX of the server's streams failed at some B:
    its figures are not a batching verdict), `serialises` (at every B ≥ 2 its records show the streams open
    served one at a time, prefill counted: the live rule `batching`; or, without records, its tok/s flat in B
    while the engine's rises and its TTFT rising more than the engine's own), `interleaves` (its streams
    overlap, yet its tok/s stays flat in B while the engine's rises: it takes turns between them without batching
    them, as mlx_lm.server did), `batches fully` (≥ FULL_SHARE of the engine's tok/s at every B ≥ 2), `batches
    with X % overhead` (X = 1 − its share at the largest B), `batches` (its records and tok/s say so where the
    engine does not scale here: no share named), or `undecided` (one B, a side missing, or an engine that does
    not scale here with a server that does not either). Streams that overlap but whose tokens never come out of
    one step (ServingRow.stepped) interleave whatever the engine does."""
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
    if timed and all(_serial(r) for r in timed):
        return "serialises", "served at once " + _served_text(timed) + ttft_rise(known)
    flat = f"server tok/s ×{s_scale:.2f} from B=1 to B={last.b} (the engine ×{e_scale:.2f})"
    if timed and all(interleaved(r.stepped, r.served) for r in timed):
        return "interleaves", (flat + "; its streams overlap (served at once " + _served_text(timed) + ") but "
                               "their tokens never come out of one step (" + ", ".join(
                                   f"{r.stepped:.0%} at B={r.b}" for r in timed) + "): it takes turns"
                               + ttft_rise(known))
    if e_scale < SCALES:
        if timed and s_scale >= SCALES:  # the server's own evidence: its streams served at once, more tok/s
            return "batches", (flat + "; served at once " + _served_text(timed) + "; the engine itself does not "
                               "scale here, so no share of its batching is named")
        return "undecided", f"the engine itself does not scale here (B={last.b}: ×{e_scale:.2f} of B=1)"
    if s_scale < SCALES and timed:  # its streams overlap, yet no more tokens come: it takes turns between them
        return "interleaves", (flat + "; its streams overlap (served at once " + _served_text(timed)
                               + ") without more tok/s" + ttft_rise(known))
    if s_scale < SCALES and (queued := ttft_rise(known, only_queued=True)):
        return "serialises", flat + queued
    shares = [r.share for r in known if r.b >= 2 and r.share is not None]
    if shares and min(shares) >= FULL_SHARE:
        return "batches fully", f"≥ {min(shares):.0%} of the engine's tok/s at every B ≥ 2"
    share = last.share or 0.0
    return (f"batches with {max(0.0, 1 - share):.0%} overhead",
            f"{share:.0%} of the engine's tok/s at B={last.b} (×{s_scale:.2f} from B=1; the engine ×{e_scale:.2f})")


def ttft_rise(known: Sequence[ServingRow], only_queued: bool = False) -> str:
    """The server's TTFT p50 rise from B = 1 at each B ≥ 2 beside the engine's own at that B; a rise at least
    TTFT_RISE × the engine's is the queue. only_queued: "" unless some B queues."""
    first = next((r for r in known if r.b == 1), None)
    if first is None or not first.server_ttft_ms or not first.engine_ttft_ms:
        return ""
    parts, queued = [], False
    for r in known:
        if r.b < 2 or not r.server_ttft_ms or not r.engine_ttft_ms:
            continue
        s_rise, e_rise = r.server_ttft_ms / first.server_ttft_ms, r.engine_ttft_ms / first.engine_ttft_ms
        queued = queued or s_rise >= TTFT_RISE * e_rise
        parts.append(f"×{s_rise:.1f} at B={r.b} (the engine ×{e_rise:.1f})")
    if not parts or (only_queued and not queued):
        return ""
    return "; TTFT p50 " + ", ".join(parts) + (" (the queue)" if queued else "")
