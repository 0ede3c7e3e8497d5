"""Issue 22 (audit items 6, 9, 10, 11 and its extra points) and issue 21's report bandwidth: each test states the
hand-computed case it checks, and fails on the code before the fix."""
import json
import subprocess
import sys
import threading
import time

import pytest

from measure.control import report as R
from measure.control.stats import LiveStats
from measure.control.sweep import cell_summary, format_table
from measure.core import cost
from measure.core import metrics as M
from measure.core.records import RequestRecord
from measure.core.units import NS

MS = 1_000_000


def rec(rid, sched, tokens, done=None, *, k=1, b=1, mode="instances", start=None, worker=1, pid=None, error=None,
        finish="length", **more):
    """A record from times in seconds (tokens: their timestamps)."""
    ns = [int(round(t * NS)) for t in tokens]
    return RequestRecord(run_id="r", request_id=rid, mode=mode, engine="e", model="m", model_bytes=1_000_000_000,
                         k=k, b=b, worker=worker, pid=pid, t_scheduled_ns=int(sched * NS),
                         t_submitted_ns=int(sched * NS), t_started_ns=int((sched if start is None else start) * NS),
                         t_first_token_ns=ns[0] if ns else None,
                         t_done_ns=int((done if done is not None else (tokens[-1] if tokens else sched)) * NS),
                         token_ns=ns, output_tokens=len(ns), error=error, finish_reason=finish, **more)


# ---- item 6: ITL over chunk arrivals --------------------------------------------------------------------------
def test_itl_is_over_chunk_arrivals_when_a_chunk_carries_several_tokens():
    """A server packing 3 tokens per chunk, one chunk every 30 ms: tokens at 0, 0, 0, 30, 30, 30, 60, 60, 60 ms.
    The gaps between chunk arrivals are 30 and 30 ms, so ITL p50 = 30 ms (it read 0.0 ms: six of the eight
    token-to-token gaps are the zeros inside a chunk). TPOT stays (60 − 0) ÷ 8 = 7.5 ms."""
    toks = [0.0] * 3 + [0.030] * 3 + [0.060] * 3
    r = rec(1, 0.0, toks)
    assert M.itls([r]) == pytest.approx([0.030, 0.030])
    s = M.summarize([r])
    assert s["median_itl_ms"] == pytest.approx(30.0)
    assert s["median_tpot_ms"] == pytest.approx(7.5)
    # the live panel's ITL p50 is the same figure
    live = LiveStats(5.0)
    live.add_record(r)
    assert live.request_numbers()["itl_p50"] == pytest.approx(0.030)


# ---- item 9: a recording's concurrency and batch bandwidth over each level's own periods -----------------------
def _periods_samples(plan):
    """Samples every 0.5 s for [(k, b, mode, start_s, end_s)], and the last one at the end."""
    samples = []
    for k, b, mode, a, e in plan:
        samples += [{"kind": "sample", "t_ns": int((a + i / 2) * NS), "k": k, "b": b, "mode": mode, "paused": False}
                    for i in range(int((e - a) * 2))]
    samples.append({"kind": "sample", "t_ns": int(plan[-1][4] * NS), "k": plan[-1][0], "b": plan[-1][1],
                    "mode": plan[-1][2], "paused": False})
    return samples


def test_report_concurrency_is_over_the_levels_own_periods():
    """K=2 for 60 s (two streams, each busy the whole period), K=1 for 60 s, K=2 again for 60 s. K=2's achieved
    concurrency = 2 × 120 s busy ÷ its 120 s = 2.0; over first scheduled → last done it read 240 ÷ 180 = 1.33."""
    plan = [(2, 1, "instances", 0, 60), (1, 1, "instances", 60, 120), (2, 1, "instances", 120, 180)]
    records, rid = [], 0
    for k, _b, _m, a, e in plan:
        for w in range(k):
            rid += 1
            records.append(rec(rid, a, [a + 0.1 * (i + 1) for i in range(int((e - a) * 10) - 1)], e, k=k, worker=w))
    cells = {c["k"]: c for c in R.cells_from_records(records, {"model_bytes": 1}, _periods_samples(plan))}
    assert cells[2]["achieved_concurrency"] == pytest.approx(2.0, rel=1e-3)
    assert cells[1]["achieved_concurrency"] == pytest.approx(1.0, rel=1e-3)


def test_report_batch_bandwidth_is_over_the_levels_own_periods():
    """Batch mode, W = 1 GB. B=2 for 60 s at 10 steps/s (both sequences' tokens share each step's timestamp),
    B=1 for 60 s, B=2 again for 60 s. B=2's bandwidth product = 10 steps/s × 1 GB = 10 GB/s over its own 120 s;
    over first scheduled → last done it read 1198 steps ÷ 180 s × 1 GB = 6.66 GB/s."""
    plan = [(1, 2, "batch", 0, 60), (1, 1, "batch", 60, 120), (1, 2, "batch", 120, 180)]
    records, rid = [], 0
    for k, b, mode, a, e in plan:
        steps = [a + 0.1 * (i + 1) for i in range(int((e - a) * 10) - 1)]
        for _seq in range(b):
            rid += 1
            records.append(rec(rid, a, steps, e, k=k, b=b, mode=mode, pid=7))
    cells = {c["b"]: c for c in R.cells_from_records(records, {"model_bytes": 1_000_000_000},
                                                     _periods_samples(plan))}
    assert cells[2]["bandwidth_gbps"] == pytest.approx(10.0 * 599 / 600, rel=1e-3)
    assert cells[1]["bandwidth_gbps"] == pytest.approx(10.0 * 599 / 600, rel=1e-3)
    assert cells[2]["achieved_concurrency"] == pytest.approx(2.0, rel=1e-3)


# ---- extra: a p99 from too few requests is marked ---------------------------------------------------------------
def _cell_of(n):
    """n requests, TTFT 10, 20, …, n × 10 ms: their p99 (linear interpolation) lies between the two largest."""
    recs = [rec(i, 0.0, [0.010 * (i + 1), 0.010 * (i + 1) + 0.005]) for i in range(n)]
    return cell_summary(recs, 1, 1, 1_000_000_000)


def test_a_p99_of_fewer_than_100_requests_is_marked_approximate():
    """16 requests (a bench default): TTFT p99 sits at rank 0.99 × 15 = 14.85, so 150 + 0.85 × 10 = 158.5 ms,
    between the two largest: no request lies above it, it is about their maximum, and the bench table, the
    report and the dashboard mark it '≈'. 200 requests: two lie above p99, shown plain."""
    few, many = _cell_of(16), _cell_of(200)
    assert few["p99_ttft_ms"] == pytest.approx(158.5)
    table = format_table([few]).splitlines()
    assert f"≈{few['p99_ttft_ms']:.0f}ms" in table[2]
    assert "≈: p99 of fewer than 100 requests" in table[-2]  # the legend says what ≈ means
    assert "≈" not in format_table([many]).splitlines()[2]
    run = R.Run("t", {"model_bytes": 1}, [few, dict(many, k=2)])
    md = R.markdown([run], [])
    rows = [line for line in md.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert f"| ≈{few['p99_ttft_ms']:.0f} |" in rows[0] and "≈" not in rows[1]
    assert "≈: p99 of fewer than 100 requests" in md


def test_the_dashboard_marks_a_p99_of_fewer_than_100_requests():
    from sim import run_for, sim_controller
    from tui.app import InferenceTop

    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 5)
    snap = c.snapshot()
    assert 0 < snap.numbers.requests < 100
    text = InferenceTop(c, live=False)._render_numbers(snap).plain
    assert f"p99 ≈{snap.numbers.ttft_p99 * 1e3:.1f} ms (queue-incl.)" in text
    assert "chunk ITL p50" in text  # item 6: the panel says which ITL it shows
