"""Metrics as pure functions over per-request records (docs/design/metrics.md).

Every function takes records (or plain numbers) and returns numbers; times in records are integer
nanoseconds, results are seconds unless the name says otherwise (``_ms``, ``_gbps``).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from measure.core.records import RequestRecord, is_remote
from measure.core.units import NS
from measure.core.work import WorkModel
from presets import SLO
NOISY_CV = 0.10


class UnsetTime(TypeError):
    """A record's time missing where its outcome says it was set (a damaged file's record): `report` says so in
    one line (control/bench/runs.load_run)."""


def _set(t_ns: int | None) -> int:
    """A record's time that the caller has made sure is set (an ok record's first token and start, a finished
    one's end): None raises the TypeError the arithmetic on it always raised (UnsetTime)."""
    if t_ns is None:
        raise UnsetTime("a record's time is None where it must be set (an ok, or finished, request's)")
    return t_ns


def ok(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """Requests that finished without error and produced at least one token."""
    return [r for r in records if r.error is None and r.t_first_token_ns is not None]


def ttft(r: RequestRecord) -> float:
    """Queue-inclusive TTFT: first token id − scheduled time (what a user feels)."""
    return (_set(r.t_first_token_ns) - r.t_scheduled_ns) / NS


def ttft_engine(r: RequestRecord) -> float:
    """Engine TTFT: first token id − the moment a worker began the request."""
    return (_set(r.t_first_token_ns) - _set(r.t_started_ns)) / NS


def ttfat(r: RequestRecord) -> float | None:
    """Queue-inclusive time to the first answer token: a reasoning model's first answer (not thinking) token
    − scheduled time. TTFT where the request had no reasoning tokens; None where it reasoned and never
    answered (cut at max_tokens while thinking)."""
    if not r.reasoning_tokens:
        return ttft(r)
    return None if r.t_first_answer_ns is None else (r.t_first_answer_ns - r.t_scheduled_ns) / NS


def queue_wait(r: RequestRecord) -> float:
    return (_set(r.t_started_ns) - r.t_scheduled_ns) / NS


def tpot(r: RequestRecord) -> float | None:
    """(t_last − t_first) / (N − 1), vLLM's convention; None for fewer than 2 tokens."""
    return tpot_of_times(r.token_ns)


def tpot_of_times(token_ns: Sequence[int]) -> float | None:
    """TPOT of one stream's token timestamps (the live window uses it on the part of a stream it holds)."""
    n = len(token_ns)
    if n < 2:
        return None
    return (token_ns[-1] - token_ns[0]) / (n - 1) / NS


def itl_gaps(token_ns: Sequence[int]) -> np.ndarray:
    """One request's inter-token latencies over chunk arrivals (seconds): the gaps between its consecutive
    distinct token timestamps. Tokens that share a timestamp arrived together (an HTTP chunk carrying several,
    or a final usage count spread over the chunks), so the wait for them is one gap, not one gap and then
    zeros (vLLM's benchmark_serving convention). TPOT still divides by every token."""
    d = np.diff(np.asarray(token_ns, dtype=np.int64))
    return d[d > 0] / NS


def itls(records: Iterable[RequestRecord]) -> list[float]:
    """Every request's `itl_gaps`, pooled across requests."""
    out: list[float] = []
    for r in records:
        out.extend(itl_gaps(r.token_ns).tolist())
    return out


def e2e(r: RequestRecord) -> float:
    return (_set(r.t_done_ns) - r.t_scheduled_ns) / NS


SMALL_N = 1000  # up to this many values a sort in Python beats numpy's fixed cost (≈ 0.2 ms a call)


def percentile(values: Sequence[float] | np.ndarray, p: float) -> float | None:
    """Linear interpolation (numpy's default); None for no values. Below SMALL_N values (every live tick's
    figures) it is worked out here with numpy's very steps, so the result is the same float bit for bit
    (tests/unit/test_metrics.py checks): the virtual index (n − 1)·p/100, and the lerp from the nearer end."""
    n = len(values)
    if n == 0:
        return None
    if n > SMALL_N or isinstance(values, np.ndarray):
        return float(np.percentile(np.asarray(values, dtype=float), p))
    xs = sorted(map(float, values))
    if any(map(math.isnan, xs)):
        return math.nan
    vi = (n - 1) * (p / 100)
    if vi >= n - 1:
        return xs[-1]
    if vi < 0:
        return xs[0]
    lo = math.floor(vi)
    a, b = xs[lo], xs[lo + 1]
    t = vi - lo
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


P99_MIN_N = 100  # a p99 from fewer values has none above it: it is about their maximum


def p99_mark(n: int | None) -> str:
    """'≈' before a p99 computed from n < P99_MIN_N values (fewer than one value lies above a p99 of fewer
    than 100: it is about their maximum, not a tail estimate); '' otherwise."""
    return "≈" if n is not None and 0 < n < P99_MIN_N else ""


P99_LEGEND = f"≈: p99 of fewer than {P99_MIN_N} requests (about their maximum)"


def mean(values: Sequence[float]) -> float | None:
    return float(statistics.fmean(values)) if len(values) else None


def cv(values: Sequence[float]) -> float | None:
    """Coefficient of variation = sample stdev / mean; None for fewer than 2 values."""
    if len(values) < 2:
        return None
    m = statistics.fmean(values)
    if not m:
        return None
    # in floats: statistics.stdev works in exact fractions, a fifth of the dashboard's 2 Hz tick (its step table)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1)) / m


def is_noisy(c: float | None) -> bool:
    return c is not None and c > NOISY_CV


def tokens_in_window(records: Iterable[RequestRecord], a_ns: int, b_ns: int) -> int:
    return sum(1 for r in records for t in r.token_ns if a_ns <= t < b_ns)


def aggregate_tps(records: Iterable[RequestRecord], a_ns: int, b_ns: int) -> float:
    """Tokens whose timestamp falls in [a, b) ÷ (b − a)."""
    if b_ns <= a_ns:
        return 0.0
    return tokens_in_window(records, a_ns, b_ns) / ((b_ns - a_ns) / NS)


def aggregate_tps_from_times(token_times_ns: Iterable[int], a_ns: int, b_ns: int) -> float:
    """The same as `aggregate_tps`, over a flat stream of token timestamps (the live window)."""
    if b_ns <= a_ns:
        return 0.0
    return sum(1 for t in token_times_ns if a_ns <= t < b_ns) / ((b_ns - a_ns) / NS)


def achieved_concurrency(requests: Iterable[RequestRecord | tuple[int | None, int | None]], a_ns: int,
                         b_ns: int) -> float | None:
    """Achieved concurrency, the one definition (live panel, /metrics, step table, bench), by Little's law:
    Σ over requests of the time each was in service (t_started → t_done, its prefill included) inside [a, b),
    ÷ (b − a): the requests actually being served on average, whatever K and B were asked for. `requests`:
    records, or (t_started_ns, t_done_ns) pairs where t_done None is a request still in service (counted up
    to b, the live window's in-flight requests); one never started (t_started None) is not counted."""
    if b_ns <= a_ns:
        return None
    busy = 0
    for r in requests:
        start, done = (r.t_started_ns, r.t_done_ns) if isinstance(r, RequestRecord) else r
        if start is None or (done is None and isinstance(r, RequestRecord)):
            continue
        busy += max(0, min(b_ns if done is None else done, b_ns) - max(start, a_ns))
    return busy / (b_ns - a_ns)


HEAT_MIN_S = 30.0  # a cell shorter than this has no burst vs sustained figure (heat takes minutes)


def burst_sustained(records: Sequence[RequestRecord]) -> tuple[float, float] | None:
    """(burst, sustained) tok/s of a cell, over its span (first scheduled → last done): the speed of its streams in
    the first fifth and in the last half, each window's tokens ÷ the stream-seconds in service inside it, times the
    cell's achieved concurrency over the whole span (so one stream's figures are its tok/s). A machine that heats
    up and throttles (a MacBook Air: 21.1 → 17.5 tok/s over five runs) reads sustained below burst; a window with
    fewer streams in flight (a closed loop's partly filled last round, an open loop's lull) does not. None for a
    span under HEAT_MIN_S."""
    span = run_span_ns(records)
    if span is None or (span[1] - span[0]) / NS < HEAT_MIN_S:
        return None
    a, b = span
    first, last = a + (b - a) // 5, a + (b - a) // 2
    conc = achieved_concurrency(records, a, b + 1) or 0.0

    def speed(x: int, y: int) -> float:
        busy = (achieved_concurrency(records, x, y) or 0.0) * (y - x) / NS  # stream-seconds in service
        return tokens_in_window(records, x, y) / busy * conc if busy > 0 else 0.0

    return speed(a, first), speed(last, b + 1)


def meets_slo(r: RequestRecord, slo: SLO) -> bool:
    """Every bound the SLO sets holds for this request (a failed request meets none; TPOT of a one-token
    answer is not bounded). A reasoning model's TTFT bound is judged at its first answer token (ttfat): its user
    waits for the answer, not for the thinking, which may start at once while the answer comes seconds later;
    one cut while thinking never answered and does not meet it."""
    if r.error is not None or r.t_first_token_ns is None:
        return False
    if slo.ttft_s is not None and ((t := ttfat(r)) is None or t > slo.ttft_s):
        return False
    tp = tpot(r)
    if slo.tpot_s is not None and tp is not None and tp > slo.tpot_s:
        return False
    return not (slo.e2e_s is not None and e2e(r) > slo.e2e_s)


@dataclass(frozen=True)
class Goodput:
    rps: float  # requests per second that met every bound
    tps: float  # their output tokens per second
    attainment: float  # share of finished requests that met every bound
    met: int
    finished: int


def goodput(records: Sequence[RequestRecord], slo: SLO, span_s: float) -> Goodput | None:
    """docs/design/goodput.md: requests (and their tokens) that met the SLO, per second of `span_s`."""
    finished = [r for r in records if r.t_done_ns is not None]
    if not finished or span_s <= 0:
        return None
    met = [r for r in finished if meets_slo(r, slo)]
    return Goodput(len(met) / span_s, sum(r.output_tokens for r in met) / span_s, len(met) / len(finished),
                   len(met), len(finished))


def run_span_ns(records: Sequence[RequestRecord]) -> tuple[int, int] | None:
    """A run's span: first scheduled → last done, over every request that has both."""
    starts = [r.t_scheduled_ns for r in records]
    ends = [r.t_done_ns for r in records if r.t_done_ns is not None]
    if not starts or not ends:
        return None
    return min(starts), max(ends)


def output_throughput(records: Sequence[RequestRecord]) -> float | None:
    """A run's aggregate tok/s: all generated tokens ÷ (last done − first scheduled)."""
    span = run_span_ns(records)
    if span is None or span[1] <= span[0]:
        return None
    return aggregate_tps(records, span[0], span[1] + 1)


def batch_reads(records: Iterable[RequestRecord], windows: Sequence[tuple[int, int]] | None,
                kv_bytes_per_token: float | None = None) -> tuple[int, float | None]:
    """Batch mode, over the windows [a, b) (ns; None: every token): the engine steps taken, and the KV bytes
    they read (None without a KV size per token). Every token of one step shares the step's timestamp, so the
    steps are the distinct (worker, pid, t); the step that produced a sequence's i-th token (from 0) read its
    prompt and i tokens of KV."""
    inside: Callable[[int], bool] = ((lambda t: True) if windows is None  # noqa: E731
                                     else (lambda t: any(a <= t < b for a, b in windows)))
    steps: set[tuple[int | None, int | None, int]] = set()
    kv = 0.0
    for r in records:
        for i, t in enumerate(r.token_ns):
            if inside(t):
                steps.add((r.worker, r.pid, t))
                if kv_bytes_per_token:
                    kv += ((r.prompt_tokens or 0) + i) * kv_bytes_per_token
    return len(steps), (kv if kv_bytes_per_token else None)


@dataclass(frozen=True)
class Bandwidth:
    """The bandwidth product and the formula that made it (always shown together)."""

    gbps: float | None
    formula: str


BANDWIDTH_FORMULA_INSTANCES = "aggregate tok/s × W (each stream reads W per token), W = model file bytes"
BANDWIDTH_FORMULA_BATCH = "Σ workers steps/s × W + KV bytes read per step × steps/s, W = model file bytes"
BANDWIDTH_FORMULA_BATCH_NO_KV = "Σ workers steps/s × W, W = model file bytes (KV reads not counted)"
BANDWIDTH_FORMULA_HTTP = "n/a: the weights are read on the server (--model-bytes W to estimate it)"
BANDWIDTH_FORMULA_HTTP_W = ("Σ endpoints W ÷ TPOT p50 (a batching server reads W once per step for all its "
                            "streams), W = --model-bytes")


def read_formula(work: WorkModel) -> str:
    """What W is where the model's work is known: the bytes a token reads, not the file."""
    if work.experts is None:
        return f"W = bytes read per token ({work.read_bytes(1) / 1e9:.3f} GB)"
    e = work.experts
    return (f"W = bytes read per token: {work.weight_bytes / 1e9:.3f} GB always + {e.used} of {e.count} experts × "
            f"{e.bytes_each / 1e6:.1f} MB = {work.read_bytes(1) / 1e9:.3f} GB (the file: {work.file_bytes / 1e9:.3f} "
            "GB); a batch step reads the distinct experts its tokens are routed to")


def read_bandwidth(mode: str, work: WorkModel, *, agg_tps: float | None = None,
                   steps_per_s: Sequence[float] = (), kv_read_bps: float | None = None) -> Bandwidth:
    """bandwidth_product with the weights a step actually reads (work.read_bytes, docs/design/model-reads.md): a stream
    reads read_bytes(1) a token; a batch step of n tokens read_bytes(n), n = tok/s ÷ steps/s (a mixture of
    experts: the union of its tokens' experts)."""
    formula = read_formula(work)
    if mode == "batch":
        steps = sum(steps_per_s)
        if not steps or not agg_tps:
            return Bandwidth(None, f"Σ workers steps/s × W(tokens a step), {formula}")
        per_step = work.read_bytes(agg_tps / steps)
        return Bandwidth((steps * per_step + (kv_read_bps or 0.0)) / 1e9,
                         f"Σ workers steps/s × W(tokens a step){' + KV read' if kv_read_bps is not None else ''}, "
                         f"{formula}")
    if not agg_tps:
        return Bandwidth(None, f"aggregate tok/s × W, {formula}")
    return Bandwidth(agg_tps * work.read_bytes(1) / 1e9, f"aggregate tok/s × W, {formula}")


def bandwidth_product(mode: str, weight_bytes: int, *, agg_tps: float | None = None,
                      steps_per_s: Sequence[float] = (), kv_read_bps: float | None = None) -> Bandwidth:
    """GB/s of weights (and KV) read per second, by mode (docs/design/metrics.md):
    instances: every stream reads W per token, so aggregate tok/s × W — exact whatever number of streams
    is actually decoding (never the nominal K);
    batch: a step reads W once for all its sequences, so Σ over workers of steps/s × W (+ KV read per s);
    http: the weights are read on the servers; where W is given, each endpoint's steps/s is taken as its
    streams' per-stream decode rate (1 ÷ TPOT p50: one step serves all its streams), summed."""
    if is_remote(mode):
        if not weight_bytes:
            return Bandwidth(None, BANDWIDTH_FORMULA_HTTP)
        if not steps_per_s:
            return Bandwidth(None, BANDWIDTH_FORMULA_HTTP_W)
        return Bandwidth(sum(steps_per_s) * weight_bytes / 1e9, BANDWIDTH_FORMULA_HTTP_W)
    if mode == "batch":
        formula = BANDWIDTH_FORMULA_BATCH if kv_read_bps is not None else BANDWIDTH_FORMULA_BATCH_NO_KV
        if not steps_per_s:
            return Bandwidth(None, formula)
        return Bandwidth((sum(steps_per_s) * weight_bytes + (kv_read_bps or 0.0)) / 1e9, formula)
    if not agg_tps:
        return Bandwidth(None, BANDWIDTH_FORMULA_INSTANCES)
    return Bandwidth(agg_tps * weight_bytes / 1e9, BANDWIDTH_FORMULA_INSTANCES)


def http_bandwidth(weight_bytes: int, tpots_s: Iterable[float | None]) -> Bandwidth:
    """HTTP's bandwidth product, the one rule (bench cell, each endpoint's row, the dashboard): a batching
    server reads W once per step for all its streams, and its steps/s is its streams' per-stream decode rate,
    1 ÷ TPOT p50; summed over the endpoints that decoded (an endpoint with no TPOT — down, idle, or only
    one-token answers — adds nothing). `tpots_s`: each endpoint's TPOT p50, seconds."""
    return bandwidth_product("http", weight_bytes, steps_per_s=[1 / t for t in tpots_s if t])


def http_read_bandwidth(work: WorkModel, endpoints: Iterable[tuple[float | None, float | None]]) -> Bandwidth:
    """HTTP's bandwidth product where the served model's work is known (--model-bytes its config.json or GGUF):
    each endpoint (its TPOT p50 in s, its output tok/s) steps 1 ÷ TPOT p50 times a second, and a step reads what
    its tokens read (work.read_bytes of tok/s × TPOT p50 tokens: a mixture of experts the experts they are routed
    to, not the file), summed over the endpoints that decoded (docs/design/model-reads.md)."""
    steps = [(t, max(1.0, (tps or 0.0) * t)) for t, tps in endpoints if t]
    formula = ("Σ endpoints W(tokens a step) ÷ TPOT p50 (a batching server reads once a step what its streams' "
               f"tokens read; tokens a step = tok/s × TPOT p50), {read_formula(work)}")
    if not steps:
        return Bandwidth(None, formula)
    return Bandwidth(sum(work.read_bytes(n) / t for t, n in steps) / 1e9, formula)


def sum_gbps(betas: Iterable[float | None]) -> float | None:
    """Σβ of several endpoints (each a server with its own memory), where every one's β is known; else None."""
    betas = list(betas)
    return sum(b for b in betas if b) if betas and all(betas) else None  # (every b is set: the filter is for mypy)


def predicted_tpot(k: int, weight_bytes: int, bandwidth_gbps: float) -> float:
    """Predicted TPOT(K) = K · W / β in seconds (β in GB/s, 1 GB = 1e9 B)."""
    return k * weight_bytes / (bandwidth_gbps * 1e9)


def kwb_tpot(k: int, weight_bytes: int, bandwidth_gbps: float | None, mode: str = "instances",
             endpoint_gbps: Sequence[float | None] | None = None) -> float | None:
    """The K·W/β prediction (docs/design/metrics.md) in seconds, in every mode (a bench cell, a --find level, the
    report's chart and the dashboard, where no roofline applies): K engines share β and each reads W per
    decode step — one token of each of its streams, whatever its B. None (absent, never 0) where W or β is not
    known. HTTP: K is the endpoints in use, the first K listed, each a server of its own: K·W ÷ Σβ of those K
    (one endpoint: K does not apply, W ÷ its β); without the endpoints' list, `bandwidth_gbps` is one server's."""
    if is_remote(mode):
        betas = list(endpoint_gbps) if endpoint_gbps else [bandwidth_gbps]
        used = betas[:k] if len(betas) > 1 else betas
        k, bandwidth_gbps = len(used), sum_gbps(used)
    if not (weight_bytes and bandwidth_gbps):
        return None
    return predicted_tpot(k, weight_bytes, bandwidth_gbps)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_element: float) -> float:
    """2 (K and V) × layers × kv_heads × head_dim × bytes per element."""
    return 2 * layers * kv_heads * head_dim * bytes_per_element


def summarize(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """vLLM-style figures for one group of records (one cell: every rep pooled)."""
    good = ok(records)
    ttfts = [ttft(r) for r in good]
    ttfts_e = [ttft_engine(r) for r in good]
    ttfats = [t for t in (ttfat(r) for r in good) if t is not None]
    tpots = [t for t in (tpot(r) for r in good) if t is not None]
    itl = itls(good)
    e2es = [e2e(r) for r in good]
    waits = [queue_wait(r) for r in good]

    def ms(v: float | None) -> float | None:
        return None if v is None else v * 1e3

    return {
        "completed": len(good),
        "errors": sum(1 for r in records if r.error is not None),
        "total_output_tokens": sum(len(r.token_ns) for r in good),
        "mean_ttft_ms": ms(mean(ttfts)),
        "median_ttft_ms": ms(percentile(ttfts, 50)),
        "p90_ttft_ms": ms(percentile(ttfts, 90)),
        "p99_ttft_ms": ms(percentile(ttfts, 99)),
        "median_ttft_engine_ms": ms(percentile(ttfts_e, 50)),
        "p99_ttft_engine_ms": ms(percentile(ttfts_e, 99)),
        "median_queue_wait_ms": ms(percentile(waits, 50)),
        "median_ttfat_ms": ms(percentile(ttfats, 50)),
        "p99_ttfat_ms": ms(percentile(ttfats, 99)),
        "reasoning_tokens": sum(r.reasoning_tokens or 0 for r in good),
        "mean_tpot_ms": ms(mean(tpots)),
        "median_tpot_ms": ms(percentile(tpots, 50)),
        "p90_tpot_ms": ms(percentile(tpots, 90)),
        "p99_tpot_ms": ms(percentile(tpots, 99)),
        "median_itl_ms": ms(percentile(itl, 50)),
        "p99_itl_ms": ms(percentile(itl, 99)),
        "median_e2el_ms": ms(percentile(e2es, 50)),
        "p99_e2el_ms": ms(percentile(e2es, 99)),
    }


def stopped_early(records: Iterable[RequestRecord], max_tokens: int | None = None) -> int:
    """Requests that finished without error for a reason other than the length limit (finish_reason 'stop':
    EOS or a stop string), and short of max_tokens where one is given for all (the server's own count where
    it is larger than the client's). With EOS ignored none should: a server that does not honour ignore_eos
    shortens the answers, and every per-request figure with them."""
    return sum(1 for r in ok(records) if r.finish_reason != "length"
               and (max_tokens is None or max(r.output_tokens, r.server_output_tokens or 0) < max_tokens))


def rss_sum_bytes(records: Iterable[RequestRecord]) -> int:
    """Σ over workers of each worker's largest RSS seen at the end of its requests."""
    peak: dict[tuple[int | None, int | None], int] = {}
    for r in records:
        if r.worker_rss_bytes is not None:
            key = (r.worker, r.pid)
            peak[key] = max(peak.get(key, 0), r.worker_rss_bytes)
    return sum(peak.values())

