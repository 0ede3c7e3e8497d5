"""`bench --find users|rate|b`: ramp the load (doubling, then bisecting) until the SLO attainment falls below
a target, the achieved ÷ target rate falls below 0.98, or the memory guard or the wall stops it; then say the
answer in one sentence with the binding ceiling. Every step is bounded in time; the search stops at the
first wall.

The search is a pure function of `run_level` (one measured level → a Step), so it is tested on a synthetic
curve with a known knee; `measure_levels` runs real levels on a load source.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from measure.core import metrics as M
from measure.core.guard import WallCheck, admit, engine_footprint
from measure.core.probes import SystemProbe, auto_threads
from measure.core.workload import ClosedLoop, Load, Poisson
from measure.sources.base import CellStopped

TARGET_ATTAINMENT = 0.90
RATE_RATIO = 0.98


@dataclass
class Step:
    level: float
    ok: bool
    stop: str | None = None  # refused | wall | timeout: the search ends here
    why: str = ""  # what failed, in words ("TTFT p99 1.9 s (queue)")
    cell: dict = field(default_factory=dict)


@dataclass
class Knee:
    what: str  # users | rate | b
    passed: Step | None
    failed: Step | None
    steps: list[Step]

    def sentence(self, slo_name: str, wall: str | None = None) -> str:
        unit = {"users": "concurrent users", "b": "sequences per engine (B)", "rate": "requests/s"}[self.what]
        fmt = (lambda v: f"{v:g}") if self.what == "rate" else (lambda v: f"{int(v)}")
        if self.passed is None:
            head = f"this machine serves no level of this workload within the {slo_name} SLO"
        else:
            head = f"this machine serves {fmt(self.passed.level)} {unit} of this workload within the {slo_name} SLO"
        if self.failed is not None:
            head += f"; at {fmt(self.failed.level)}, {self.failed.why}"
        return head + (f"; the wall is {wall}" if wall else "")


def find_knee(run_level: Callable[[float], Step], what: str = "users", start: float = 1, limit: float = 512,
              max_steps: int = 12) -> Knee:
    """Double from `start` until a level fails or stops, then bisect between the last pass and the first
    failure (whole numbers for users and B; to 10 % for a rate)."""
    steps: list[Step] = []
    passed = failed = None
    level = start
    while level <= limit and len(steps) < max_steps:
        st = run_level(level)
        steps.append(st)
        if st.ok and not st.stop:
            passed, level = st, level * 2
            continue
        failed = st
        break
    if failed is None or failed.stop in ("refused",):
        return Knee(what, passed, failed, steps)
    lo = passed.level if passed else 0
    hi = failed.level
    close = (lambda a, b: b - a <= 1) if what != "rate" else (lambda a, b: b - a <= 0.1 * b)
    while not close(lo, hi) and len(steps) < max_steps:
        mid = (lo + hi) // 2 if what != "rate" else (lo + hi) / 2
        if mid <= 0:
            break
        st = run_level(mid)
        steps.append(st)
        if st.ok and not st.stop:
            passed, lo = st, mid
        else:
            failed, hi = st, mid
    return Knee(what, passed, failed, steps)


def judge(cell: dict, slo, what: str, level: float, target: float = TARGET_ATTAINMENT) -> Step:
    """Whether a measured level meets the SLO target (and, for a rate, keeps up with it)."""
    att = cell.get("slo_attainment")
    if cell.get("status") != "ok" or att is None:
        return Step(level, False, cell.get("status") if cell.get("status") != "ok" else None,
                    cell.get("reason", "no request finished"), cell)
    if what == "rate":
        achieved = cell["completed"] / max(1e-9, cell["span_s"])
        if achieved / level < RATE_RATIO:
            return Step(level, False, None, f"it completes {achieved:.2f} req/s of {level:g} asked (falls behind)",
                        cell)
    if att >= target:
        return Step(level, True, None, f"{att:.0%} of requests within the SLO", cell)
    return Step(level, False, None, _why(cell, slo, att), cell)


def _why(cell: dict, slo, att: float) -> str:
    parts = []
    if slo.ttft_s is not None and (cell.get("p99_ttft_ms") or 0) > slo.ttft_s * 1e3:
        queue = cell.get("median_queue_wait_ms") or 0
        cause = "queue" if queue > 0.5 * (cell.get("median_ttft_ms") or 0) else "prefill"
        parts.append(f"TTFT p99 is {cell['p99_ttft_ms'] / 1e3:.2f} s ({cause})")
    if slo.tpot_s is not None and (cell.get("median_tpot_ms") or 0) > slo.tpot_s * 1e3:
        parts.append(f"TPOT p50 is {cell['median_tpot_ms']:.0f} ms (each decode step)")
    return (" and ".join(parts) or f"only {att:.0%} of requests meet the SLO") + f" ({att:.0%} within it)"


def measure_levels(source, workload, what: str, cfg, say, k: int = 1,
                   target: float = TARGET_ATTAINMENT) -> Callable[[float], Step]:
    """run_level over a load source: users → one engine batching min(U, max-b) sequences for U closed-loop
    users; b → B sequences for B users; rate → open-loop Poisson arrivals on the engine as configured."""
    from measure.control.sweep import cell_summary

    probe = SystemProbe()
    local = source.capabilities().local

    def run(level: float) -> Step:
        if what == "rate":
            mode, b, users = cfg.mode, max(cfg.bs), None
            n = max(cfg.requests, int(level * 10))
            arrivals = Poisson(level, total=n)
        else:
            users = int(level)
            b = users if what == "b" else min(users, cfg.max_b) if cfg.mode != "instances" or what == "users" else 1
            mode = "http" if cfg.mode == "http" else ("batch" if b > 1 or cfg.mode == "batch" else "instances")
            n = max(cfg.requests, 2 * users)
            arrivals = ClosedLoop(users, total=n)
        if local and cfg.memory_budget and not cfg.force:
            fp = engine_footprint(mode, k, b, b_cap=b, seq_ctx=cfg.ctx, ctx=cfg.ctx,
                                  weight_bytes=source.meta.model_bytes, kv_per_token=cfg.kv_bytes_per_token or 0.0,
                                  overhead_bytes=cfg.overhead_bytes)
            refusal = admit(fp, cfg.memory_budget)
            if refusal:
                say(f"{what} {level:g}: {refusal}")
                return Step(level, False, "refused", f"the memory guard refuses it: {refusal.split(';')[0]}")
        source.scale_to(k)
        source.set_batch(mode, b, b_cap=b, seq_ctx=cfg.ctx)
        source.wait_ready()
        at_wall = WallCheck(probe)
        say(f"{what} {level:g}: {n} requests, {arrivals.describe()}, {mode} K={k} B={b} …")
        t0 = time.monotonic()
        try:
            recs = source.run_requests(Load(workload, arrivals, cfg.max_tokens, cfg.ignore_eos),
                                       timeout=cfg.cell_timeout_s, should_stop=at_wall)
        except CellStopped as stop:
            return Step(level, False, "wall", f"the memory wall: {stop}")
        except TimeoutError as exc:
            return Step(level, False, "timeout", str(exc))
        cell = cell_summary(recs, k, b, source.meta.model_bytes, None, mode, cfg.kv_bytes_per_token, cfg.roofline,
                            cfg.threads or auto_threads(k), cfg.max_tokens, cfg.slo)
        span = M.run_span_ns(recs)
        cell.update({"level": level, "users": users, "span_s": (span[1] - span[0]) / 1e9 if span else 0.0})
        st = judge(cell, cfg.slo, what, level, target)
        say(f"  {time.monotonic() - t0:.0f} s: attainment {cell.get('slo_attainment') or 0:.0%}, TTFT p99 "
            f"{(cell.get('p99_ttft_ms') or 0):.0f} ms, TPOT p50 {(cell.get('median_tpot_ms') or 0):.0f} ms → "
            + ("within" if st.ok else "out"))
        return st

    return run
