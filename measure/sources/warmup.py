"""An HTTP cell's warmup (docs/design/client-processes.md): before a level's first measured load, requests of that load's own
workload, length and streams go to the server and are thrown away, as `vllm bench serve --num-warmups` and
GuideLLM's warmup do. A server's first requests at a new size are cold (llama_cpp.server: a B = 1 cell of 8
requests read its first request, 3.55 s, as its TTFT p99); the short per-stream requests a new stream level
sends (`sources/http.py: _warm`, 2 tokens) do not reach that path.

--warmup N: N requests; Ns (5s): rounds of one request per stream until N seconds have passed (at least one
round); auto (the default): one round, one request per stream of the level; 0: none. A level is warmed once, at
its first load (a cell's first rep; a new workload or length is a new level). Its records reach neither the
cell's figures nor the records file: the source counts them (`warmup_requests`), the cell says how many
(summary.json: warmup_requests) and the records header says the rule (`warmup`).

The warmup leaves no trace in what it measures (issue 58): its prompts are the level's own first prompts with
a line of their own put first (`warmup_workload`), so none begins as a measured prompt does and a server's
prefix cache holds nothing the measured load can hit. Sent as they were, `--warmup auto --prefix-cache on` read
a hit rate of 0.297 where the load repeats no prompt, and TTFT fell for requests that never prefilled.

Not warmed: a load with an absolute start (--start-at, --segment: the clients start together).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from presets import Workload

from measure.core.datasets import prompt_for
from measure.core.workload import ClosedLoop, Load
from measure.sources.base import CollectsRecords

if TYPE_CHECKING:
    from measure.core.records import RequestRecord
    from measure.sources.base import EventSink


@dataclass(frozen=True)
class Warmup:
    """The warmup rule: `requests` (N), `seconds` (rounds until), or neither (auto: one request per stream)."""

    requests: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, text: str) -> Warmup:
        t = text.strip().lower()
        try:
            if t == "auto":
                return cls()
            if t.endswith("s"):
                s = float(t[:-1])
                if s >= 0 and s == s and s != float("inf"):
                    return cls(seconds=s)
            elif (n := int(t)) >= 0:
                return cls(requests=n)
        except ValueError:
            pass
        raise ValueError(f"--warmup {text!r}: write N requests (0: none), a time such as 5s, or auto (one request "
                         "per stream of each level, the default)")

    @property
    def off(self) -> bool:
        return self.requests == 0 or self.seconds == 0

    def describe(self) -> str:
        if self.off:
            return "none"
        if self.requests is not None:
            return f"{self.requests} request{'s' if self.requests != 1 else ''} per level, not recorded"
        if self.seconds is not None:
            return f"rounds of one request per stream for {self.seconds:g} s per level, not recorded"
        return "one request per stream per level, not recorded"


def _absolute_start(load: Load) -> bool:
    arr: Any = load.arrivals
    return getattr(arr, "start_ns", None) is not None or type(arr).__name__ == "Segment"


WARMUP_LINE = "Warm-up request {i}, not measured."  # before each warmup prompt: no measured prompt begins so


def warmup_workload(workload: Workload, n: int) -> Workload:
    """The warmup's n prompts: the workload's first n (a synthetic one as the words the HTTP source sends for
    it), each after a line naming it as a warmup request, so that no prefix of a measured prompt is cached by
    it (a server's cache matches from the prompt's first token)."""
    texts = []
    for i in range(max(1, n)):
        p = prompt_for(workload, i)
        body = p.text or ("hello " * max(1, (p.synthetic_tokens or 1) - 1)).strip()
        texts.append(f"{WARMUP_LINE.format(i=i + 1)} {body}")
    return Workload(f"{workload.key}-warmup", f"the warmup of {workload.key}", tuple(texts))


class WarmsUp(CollectsRecords):
    """run_requests with a level's warmup first (this module's doc). The source gives `warmup`, `_sink`, `b`
    and `target_k`, and says how many streams a level has (`_streams`)."""

    warmup: Warmup = Warmup()
    warmup_requests = 0  # warmup requests sent so far (a cell's: the rise over it)
    warmup_errors = 0
    _warmed: tuple[Any, ...] | None = None
    _sink: EventSink
    b: int
    target_k: int

    def _streams(self) -> int:
        return self.b * max(1, self.target_k)

    def run_requests(self, load: Load, timeout: float | None = None,
                     should_stop: Callable[[], str | None] | None = None) -> list[RequestRecord]:
        level = (self.target_k, self.b, getattr(load.workload, "key", id(load.workload)), load.max_tokens, load.ignore_eos)
        if not self.warmup.off and level != self._warmed and not _absolute_start(load):
            self._warm_up(load, timeout, should_stop)
            self._warmed = level
        return super().run_requests(load, timeout, should_stop)

    def _warm_up(self, load: Load, timeout: float | None, should_stop: Callable[[], str | None] | None) -> None:
        """The warmup's rounds, their records kept from the recorder (to the collector only)."""
        users = load.arrivals.users if isinstance(load.arrivals, ClosedLoop) else self._streams()
        total = self.warmup.requests or users
        t0 = time.monotonic()
        on_record, self._sink.on_record = self._sink.on_record, None
        workload = warmup_workload(load.workload, total)
        try:
            while True:
                recs = super().run_requests(Load(workload, ClosedLoop(min(users, total), total),
                                                 load.max_tokens, load.ignore_eos), timeout, should_stop)
                self.warmup_requests += len(recs)
                self.warmup_errors += sum(1 for r in recs if r.error)
                if self.warmup.seconds is None or time.monotonic() - t0 >= self.warmup.seconds:
                    break
        finally:
            self._sink.on_record = on_record
