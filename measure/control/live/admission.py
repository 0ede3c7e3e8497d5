"""Admission control: a step whose estimated footprint exceeds the memory budget is refused with the
numbers, unless --force is on or the same key comes again within CONFIRM_S (the confirm key). A step at or
above one where the kernel's OOM killer ended a worker is refused for the rest of the session (only --force
passes it), and the estimate is raised so it no longer fits there."""
from __future__ import annotations

import time
from collections.abc import Callable

from measure.core.guard import (DEFAULT_BUDGET_FRACTION, DEFAULT_OVERHEAD_BYTES, EngineMemory, Footprint, OomKill,
                                admit, engine_footprint, fmt_gib, oom_refusal, overhead_after_oom)

CONFIRM_S = 5.0


class Admission:
    def __init__(self, total_memory: int, budget: int | None, force: bool, ctx: int, weight_bytes: int,
                 kv_per_token: float | None, clock: Callable[[], float] = time.monotonic):
        self.budget = budget or int(DEFAULT_BUDGET_FRACTION * total_memory)
        self.force = force
        self.ctx = ctx
        self.weight_bytes = weight_bytes
        self.kv_per_token = kv_per_token or 0.0
        self.overhead: int | None = None  # runtime bytes beyond the weights, measured at warmup
        self._clock = clock
        self._refused: tuple[str, float] | None = None
        self.oom_kills: list[OomKill] = []  # steps where a worker was OOM-killed in this session

    def observe(self, ready_rss: list[int]) -> None:
        """The first warmed-up workers' RSS tells what a worker holds beyond its weights."""
        if self.overhead is None and ready_rss:
            self.overhead = max(0, min(ready_rss) - self.weight_bytes)

    def footprint(self, mode: str, k: int, b: int, b_cap: int) -> Footprint:
        return engine_footprint(mode, k, b, EngineMemory(b_cap=b_cap, seq_ctx=self.ctx, ctx=self.ctx,
                                                         weight_bytes=self.weight_bytes, kv_per_token=self.kv_per_token,
                                                         overhead_bytes=self.overhead or DEFAULT_OVERHEAD_BYTES))

    def note_oom(self, mode: str, k: int, b: int, b_cap: int) -> str:
        """A worker was OOM-killed at (mode, K, B): remember the step, raise the per-worker overhead so the
        estimate there no longer fits the budget, and return the line that says so."""
        fp = self.footprint(mode, k, b, b_cap)
        kill = OomKill(mode, k, b, fp.total, self.budget)
        if not any(x.covers(mode, k, b) for x in self.oom_kills):
            self.oom_kills.append(kill)
        self.overhead = overhead_after_oom(fp, self.budget, self.overhead or DEFAULT_OVERHEAD_BYTES)
        raised = self.footprint(mode, k, b, b_cap).total
        return (f"out of memory: the kernel's OOM killer ended a worker at K={k} B={b} {mode} (estimated "
                f"{fmt_gib(fp.total)} of the {fmt_gib(self.budget)} budget; now estimated {fmt_gib(raised)}): this "
                "step and larger ones are refused for the rest of the session (--force to try anyway)")

    def check(self, fp: Footprint, key: str, mode: str | None = None) -> tuple[str | None, str | None]:
        """(refusal, warning): a refusal to show, or None to go ahead (with a warning when over the budget on
        confirm). A step covered by an OOM kill of `mode` (None: any mode) is refused; the confirm key does not
        pass it."""
        if self.force:
            return None, None
        for m in [mode] if mode else {x.mode for x in self.oom_kills}:
            if why := oom_refusal(self.oom_kills, m, fp.k, fp.b):
                return why, None
        why = admit(fp, self.budget)
        if why is None:
            return None, None
        now = self._clock()
        if self._refused and self._refused[0] == key and now - self._refused[1] < CONFIRM_S:
            self._refused = None
            return None, f"over the budget on confirm: {why.split(';')[0]}"
        self._refused = (key, now)
        return f"{why}; press the key again within {CONFIRM_S:.0f} s to go ahead", None
