"""Admission control: a step whose estimated footprint exceeds the memory budget is refused with the
numbers, unless --force is on or the same key comes again within CONFIRM_S (the confirm key)."""
from __future__ import annotations

import time

from measure.core.guard import DEFAULT_BUDGET_FRACTION, DEFAULT_OVERHEAD_BYTES, Footprint, admit, engine_footprint

CONFIRM_S = 5.0


class Admission:
    def __init__(self, total_memory: int, budget: int | None, force: bool, ctx: int, weight_bytes: int,
                 kv_per_token: float | None, clock=time.monotonic):
        self.budget = budget or int(DEFAULT_BUDGET_FRACTION * total_memory)
        self.force = force
        self.ctx = ctx
        self.weight_bytes = weight_bytes
        self.kv_per_token = kv_per_token or 0.0
        self.overhead: int | None = None  # runtime bytes beyond the weights, measured at warmup
        self._clock = clock
        self._refused: tuple[str, float] | None = None

    def observe(self, ready_rss: list[int]) -> None:
        """The first warmed-up workers' RSS tells what a worker holds beyond its weights."""
        if self.overhead is None and ready_rss:
            self.overhead = max(0, min(ready_rss) - self.weight_bytes)

    def footprint(self, mode: str, k: int, b: int, b_cap: int) -> Footprint:
        return engine_footprint(mode, k, b, b_cap=b_cap, seq_ctx=self.ctx, ctx=self.ctx,
                                weight_bytes=self.weight_bytes, kv_per_token=self.kv_per_token,
                                overhead_bytes=self.overhead or DEFAULT_OVERHEAD_BYTES)

    def check(self, fp: Footprint, key: str) -> tuple[str | None, str | None]:
        """(refusal, warning): a refusal to show, or None to go ahead (with a warning when over the budget on
        confirm)."""
        if self.force:
            return None, None
        why = admit(fp, self.budget)
        if why is None:
            return None, None
        now = self._clock()
        if self._refused and self._refused[0] == key and now - self._refused[1] < CONFIRM_S:
            self._refused = None
            return None, f"over the budget on confirm: {why.split(';')[0]}"
        self._refused = (key, now)
        return f"{why}; press the key again within {CONFIRM_S:.0f} s to go ahead", None
