"""Live statistics over a sliding window of token timestamps and the records of the current level.

Fed the same way by a live source and by a replay (token batches and finished records), so a replay
recomputes every figure the dashboard showed. The window is kept by timestamp, not by arrival order:
a source may deliver a request's tokens late (an HTTP stream, a worker's 10 Hz batches) and out of order
across workers, and a token older than the window must leave it whatever arrived after it.

Request figures (TTFT, ITL) are the current level's: requests scheduled since the last K/B/mode step
(or reset), so an earlier level's queue never shows in the next one. Each level that ends is kept as a
row of `levels`.

Memory and CPU stay flat over a long run: each finished request is turned into its figures once
(`LevelFigures`: TTFT, TPOT, the SLO verdict, its tokens, its inter-token gaps as an array) when it arrives;
records are kept only slimmed (token times packed 8 bytes each, per-source details dropped), for the last
KEEP since reset (the `e` export's summary).
"""
from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from measure.core import metrics as M
from measure.core import serving
from measure.core.records import RequestRecord
from measure.core.units import NS

if TYPE_CHECKING:
    from presets import SLO

ITL_REQUESTS = 100  # the live ITL p50 pools the gaps of the last 100 requests
KEEP = 1000  # requests kept per level and since reset: the percentiles are over the last KEEP (memory stays flat)
STEPPED_S = 2.0  # the stepping of the streams' tokens is read over the last 2 s of the window …
STEPPED_TOKENS = 64  # … at most each stream's last 64 of them: a tick's work does not grow with the token rate


def slim(rec: RequestRecord) -> RequestRecord:
    """The record with its token times packed (8 bytes each, not a list of int objects) and its per-source
    details dropped: what the export's summary needs, at about a quarter of the memory."""
    # an array("q") where the record's type says list[int]: a slimmed record is only read (metrics, the export),
    # and an array reads as the same sequence of ints
    return replace(rec, token_ns=array("q", rec.token_ns), extra=None, server_view=None)  # type: ignore[arg-type]


class Counts(NamedTuple):
    """A level's requests so far: finished, met the SLO, the finished ones' output tokens, the met ones'."""

    finished: int
    met: int
    tokens: int
    met_tokens: int

    def since(self, base: Counts) -> Counts:
        """What was counted after `base`."""
        return Counts(self.finished - base.finished, self.met - base.met, self.tokens - base.tokens,
                      self.met_tokens - base.met_tokens)


class LevelFigures:
    """One level's requests as figures, each computed once when the request ends. Counts (finished, errors,
    met the SLO, their tokens) are exact over the level; the percentile lists hold the last KEEP."""

    def __init__(self, slo: SLO | None = None) -> None:
        self.slo = slo
        self.finished = 0
        self.errors = 0
        self.good = 0  # finished without error, ≥ 1 token
        self.met = 0  # met every SLO bound (where an SLO is set)
        self.met_tokens = 0
        self.tokens = 0  # output tokens of the finished requests (goodput's share: met_tokens ÷ tokens)
        self.ttft: list[float] = []  # queue-inclusive, good requests
        self.ttft_engine: list[float] = []
        self.tpot: list[float] = []
        self.tpot_added = 0  # TPOTs appended over the level (the list keeps the last KEEP): the step table counts from
        # a thermal change with it
        self.prompt_tokens: deque[int] = deque(maxlen=20)  # the last ones known (the roofline's prompt length)
        self.gaps: deque[np.ndarray] = deque(maxlen=ITL_REQUESTS)  # each good request's inter-token gaps (s), an array
        self.version = 0  # rises with every request added

    def add(self, rec: RequestRecord) -> None:
        self.version += 1
        if rec.t_done_ns is not None:
            self.finished += 1
            self.tokens += rec.output_tokens
        if rec.error:
            self.errors += 1
        if rec.prompt_tokens:
            self.prompt_tokens.append(rec.prompt_tokens)
        if rec.error is None and rec.t_first_token_ns is not None:
            self.good += 1
            self.ttft.append(M.ttft(rec))
            self.ttft_engine.append(M.ttft_engine(rec))
            if (tp := M.tpot(rec)) is not None:
                self.tpot.append(tp)
                self.tpot_added += 1
            self.gaps.append(M.itl_gaps(rec.token_ns))  # over chunk arrivals
            for xs in (self.ttft, self.ttft_engine, self.tpot):
                if len(xs) > 2 * KEEP:
                    del xs[:-KEEP]
        if self.slo is not None and rec.t_done_ns is not None and M.meets_slo(rec, self.slo):
            self.met += 1
            self.met_tokens += rec.output_tokens

    def counts(self) -> Counts:
        """The requests counted so far: the step table's goodput takes the part of these counted in its settled
        window."""
        return Counts(self.finished, self.met, self.tokens, self.met_tokens)


@dataclass(frozen=True)
class Window:
    """What the last `span_s` seconds of tokens say."""

    span_s: float
    agg_tps: float  # tokens in the window ÷ its span
    tpots: list[float]  # one per stream with ≥ 2 tokens in the window (seconds)
    per_worker_tps: dict[int | None, float]
    steps_per_s: dict[int | None, float]  # batch mode: all tokens of one step share its timestamp
    concurrency: float  # achieved: Σ each request's time in service in the window ÷ span (M.achieved_concurrency)
    tpot_by_worker: dict[int | None, float | None] | None = None  # worker (endpoint) → TPOT p50 of its streams
    # in the window (seconds)
    decoding: float = 0.0  # streams decoding at once: Σ each stream's first → last token in the window ÷ span
    # (serving.decoding_concurrency: ≈ 1 where a server serialises the streams open, docs/design/server-vs-engine.md)
    stepped: float | None = None  # of the last STEPPED_S's gaps between two streams' tokens, the share within one
    # step (serving.stepped_share: ≈ 0 where a server takes turns between its streams)


class LiveStats:
    def __init__(self, window_s: float, slo: SLO | None = None) -> None:
        self.window_s = window_s
        self.slo = slo
        self.load_start_ns: int | None = None  # the window is shorter than window_s until the load is that old
        # request id → [worker, its token times in the window, sorted]: kept grouped as they arrive, so a tick
        # trims each stream's old end and reads its TPOT from its ends, not regrouping every token
        self._streams: dict[int, list[Any]] = {}
        self._open: dict[int, int] = {}  # request id → t_started of each request in service now
        self._spans: list[tuple[int, int]] = []  # (t_started, t_done) of requests that ended in the window
        self.figures = LevelFigures(slo)  # of the current level
        self._all: list[RequestRecord] = []  # since the last reset, slimmed (export)
        self.level_label = "start"
        self.level_start_ns = 0
        self.levels: list[dict[str, Any]] = []  # the levels left behind: label, start, end, their request figures
        self._numbers_key: tuple[int, int] | None = None
        self._numbers: dict[str, Any] = {}

    def load_started(self, t_ns: int) -> None:
        if self.load_start_ns is None:
            self.load_start_ns = t_ns
            if not self.levels and self.level_start_ns == 0:
                self.level_start_ns = t_ns  # the first level starts with the load

    def add_tokens(self, worker: int | None, request_id: int, token_ns: list[int]) -> None:
        if not token_ns:
            return
        st = self._streams.get(request_id)
        if st is None:  # its first token: the stream's start kept beside (its prefill counted, serving_spans)
            ts0 = sorted(token_ns)
            self._streams[request_id] = [worker, ts0, self._open.get(request_id, ts0[0]), ts0[0]]
            return
        st[0] = worker
        ts = st[1]
        late = token_ns[0] < ts[-1]
        ts.extend(token_ns)
        if late or len(token_ns) > 1:
            ts.sort()  # a batch delivered late or out of order (in C, linear on a sorted list)

    def add_started(self, request_id: int, t_ns: int) -> None:
        self._open[request_id] = t_ns

    def add_record(self, rec: RequestRecord) -> None:
        self._open.pop(rec.request_id, None)
        if rec.t_started_ns is not None and rec.t_done_ns is not None:
            self._spans.append((rec.t_started_ns, rec.t_done_ns))
        self._all.append(slim(rec))
        if len(self._all) > 2 * KEEP:
            del self._all[:-KEEP]
        if rec.t_scheduled_ns >= self.level_start_ns:
            self.figures.add(rec)

    def new_level(self, label: str, t_ns: int) -> None:
        """A K, B or mode step: the level so far becomes a row; request figures start again."""
        if self.figures.version:
            self.levels.append({"level": self.level_label, "start_ns": self.level_start_ns, "end_ns": t_ns,
                                **self.request_numbers()})
        self.level_label, self.level_start_ns = label, t_ns
        self.figures = LevelFigures(self.slo)

    def set_slo(self, slo: SLO | None) -> None:
        """Judge requests against `slo` from now on (a request already counted keeps its verdict)."""
        self.slo = self.figures.slo = slo

    def reset(self, t_ns: int) -> None:
        self._all = []
        self.new_level(self.level_label, t_ns)

    def records(self) -> list[RequestRecord]:
        """The last KEEP to 2 × KEEP requests since reset, slimmed."""
        return list(self._all)

    def window(self, now_ns: int) -> Window:
        a = now_ns - int(self.window_s * NS)
        streams = self._streams
        for rid in list(streams):  # a token leaves the window by its time, whatever arrived after it
            ts = streams[rid][1]
            if ts[0] < a:
                del ts[:bisect_left(ts, a)]
            if ts and ts[-1] > now_ns:
                del ts[bisect_right(ts, now_ns):]
            if not ts:
                del streams[rid]
        if self._spans:
            self._spans = [s for s in self._spans if s[1] >= a]
        if self.load_start_ns is None:
            return Window(0.0, 0.0, [], {}, {}, 0.0)
        span = min(self.window_s, max(1e-9, (now_ns - self.load_start_ns) / NS))
        lo = now_ns - int(span * NS)
        per_worker: dict[Any, int] = {}
        steps: dict[Any, set[int]] = {}
        tpots = []
        by_worker: dict[Any, list[float]] = {}
        n_agg = 0
        for wid, ts, *_ in streams.values():
            per_worker[wid] = per_worker.get(wid, 0) + len(ts)
            steps.setdefault(wid, set()).update(ts)
            n_agg += len(ts) - (bisect_left(ts, lo) if ts[0] < lo else 0)
            if (tp := M.tpot_of_times(ts)) is not None:
                tpots.append(tp)
                by_worker.setdefault(wid, []).append(tp)
        agg = n_agg / ((now_ns + 1 - lo) / NS)  # as M.aggregate_tps_from_times over [lo, now]
        in_service = self._spans + [(t, None) for t in self._open.values()]
        conc = M.achieved_concurrency(in_service, lo, now_ns) or 0.0
        # served at once: each stream from a prefill before its first token (the level's shortest TTFT: a request
        # that found the server free), never before it was sent (serving.serving_spans, docs/design/server-vs-engine.md)
        prefill = int(min(self.figures.ttft[-KEEP:], default=0.0) * NS)
        decoding = serving.decoding_concurrency(([max(st[2], st[3] - prefill), st[1][-1]] for st in streams.values()),
                                                lo, now_ns) or 0.0
        recent = [st[1][max(bisect_left(st[1], now_ns - int(STEPPED_S * NS)), len(st[1]) - STEPPED_TOKENS):]
                  for st in streams.values()]
        stepped = serving.stepped_share(recent, decoding)
        return Window(span, agg, tpots, {w: n / span for w, n in per_worker.items()},
                      {w: len(ts) / span for w, ts in steps.items()}, conc,
                      {w: M.percentile(v, 50) for w, v in by_worker.items()}, decoding, stepped)

    def request_numbers(self) -> dict[str, Any]:
        """TTFT and ITL over the current level's requests, recomputed only when one more ended."""
        f = self.figures
        key = (f.version, id(f))
        if key == self._numbers_key:
            return self._numbers
        ttfts, ttfte = f.ttft[-KEEP:], f.ttft_engine[-KEEP:]
        self._numbers = {
            "ttft_p50": M.percentile(ttfts, 50), "ttft_p99": M.percentile(ttfts, 99),
            "ttft_engine_p50": M.percentile(ttfte, 50), "ttft_engine_p99": M.percentile(ttfte, 99),
            "itl_p50": M.percentile(np.concatenate(f.gaps), 50) if f.gaps else None,
            "requests": f.good, "errors": f.errors,
        }
        self._numbers_key = key
        return self._numbers
