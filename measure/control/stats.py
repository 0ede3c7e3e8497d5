"""Live statistics over a sliding window of token timestamps and the records of the current level.

Fed the same way by a live source and by a replay (token batches and finished records), so a replay
recomputes every figure the dashboard showed. The window is kept by timestamp, not by arrival order:
a source may deliver a request's tokens late (an HTTP stream, a worker's 10 Hz batches) and out of order
across workers, and a token older than the window must leave it whatever arrived after it.

Request figures (TTFT, ITL) are the current level's: requests scheduled since the last K/B/mode step
(or reset), so an earlier level's queue never shows in the next one. Each level that ends is kept as a
row of `levels`.
"""
from __future__ import annotations

from dataclasses import dataclass

from measure.core import metrics as M
from measure.core.records import RequestRecord
from measure.core.units import NS

ITL_REQUESTS = 100  # the live ITL p50 pools the gaps of the last 100 requests
KEEP = 2000  # requests kept per level and since reset: the figures are over the last KEEP (memory stays flat)


@dataclass(frozen=True)
class Window:
    """What the last `span_s` seconds of tokens say."""

    span_s: float
    agg_tps: float  # tokens in the window ÷ its span
    tpots: list[float]  # one per stream with ≥ 2 tokens in the window (seconds)
    per_worker_tps: dict
    steps_per_s: dict  # batch mode: all tokens of one step share its timestamp
    concurrency: float  # streams decoding, time-averaged over the window (Σ token spans ÷ span)


class LiveStats:
    def __init__(self, window_s: float):
        self.window_s = window_s
        self.load_start_ns: int | None = None  # the window is shorter than window_s until the load is that old
        self._tokens: list[tuple[int, int | None, int]] = []  # (t_ns, worker, request id)
        self._records: list[RequestRecord] = []  # of the current level
        self._all: list[RequestRecord] = []  # since the last reset (export)
        self._errors = 0
        self.level_label = "start"
        self.level_start_ns = 0
        self.levels: list[dict] = []  # the levels left behind: label, start, end, their request figures
        self._numbers_key = None
        self._numbers: dict = {}

    def load_started(self, t_ns: int) -> None:
        if self.load_start_ns is None:
            self.load_start_ns = t_ns
            if not self.levels and self.level_start_ns == 0:
                self.level_start_ns = t_ns  # the first level starts with the load

    def add_tokens(self, worker: int | None, request_id: int, token_ns: list[int]) -> None:
        self._tokens.extend((t, worker, request_id) for t in token_ns)

    def add_record(self, rec: RequestRecord) -> None:
        self._all.append(rec)
        if len(self._all) > 2 * KEEP:
            del self._all[:-KEEP]
        if rec.t_scheduled_ns >= self.level_start_ns:
            self._records.append(rec)
            if rec.error:
                self._errors += 1
            if len(self._records) > 2 * KEEP:
                self._records = self._records[-KEEP:]

    def new_level(self, label: str, t_ns: int) -> None:
        """A K, B or mode step: the level so far becomes a row; request figures start again."""
        if self._records:
            self.levels.append({"level": self.level_label, "start_ns": self.level_start_ns, "end_ns": t_ns,
                                **self.request_numbers()})
        self.level_label, self.level_start_ns = label, t_ns
        self._records, self._errors = [], 0

    def reset(self, t_ns: int) -> None:
        self._all = []
        self.new_level(self.level_label, t_ns)

    def records(self) -> list[RequestRecord]:
        return list(self._all)

    def level_records(self) -> list[RequestRecord]:
        return list(self._records)

    def window(self, now_ns: int) -> Window:
        a = now_ns - int(self.window_s * NS)
        if self._tokens:
            self._tokens = [x for x in self._tokens if a <= x[0] <= now_ns]
        if self.load_start_ns is None:
            return Window(0.0, 0.0, [], {}, {}, 0.0)
        span = min(self.window_s, max(1e-9, (now_ns - self.load_start_ns) / NS))
        per_req: dict[int, list[int]] = {}
        per_worker: dict = {}
        steps: dict = {}
        for t, wid, rid in self._tokens:
            per_req.setdefault(rid, []).append(t)
            per_worker[wid] = per_worker.get(wid, 0) + 1
            steps.setdefault(wid, set()).add(t)
        tpots = []
        busy = 0
        for ts in per_req.values():
            ts.sort()
            busy += ts[-1] - ts[0]
            if (tp := M.tpot_of_times(ts)) is not None:
                tpots.append(tp)
        agg = M.aggregate_tps_from_times((x[0] for x in self._tokens), now_ns - int(span * NS), now_ns + 1)
        return Window(span, agg, tpots, {w: n / span for w, n in per_worker.items()},
                      {w: len(ts) / span for w, ts in steps.items()}, busy / NS / span)

    def request_numbers(self) -> dict:
        """TTFT and ITL over the current level's requests, recomputed only when one more ended."""
        key = (len(self._records), self._errors, id(self._records))
        if key == self._numbers_key:
            return self._numbers
        good = M.ok(self._records)
        ttfts = [M.ttft(r) for r in good]
        ttfte = [M.ttft_engine(r) for r in good]
        self._numbers = {
            "ttft_p50": M.percentile(ttfts, 50), "ttft_p99": M.percentile(ttfts, 99),
            "ttft_engine_p50": M.percentile(ttfte, 50), "ttft_engine_p99": M.percentile(ttfte, 99),
            "itl_p50": M.percentile(M.itls(good[-ITL_REQUESTS:]), 50),
            "requests": len(good), "errors": self._errors,
        }
        self._numbers_key = key
        return self._numbers
