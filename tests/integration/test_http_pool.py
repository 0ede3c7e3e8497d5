"""The process-spread HTTP client (measure/sources/http_pool.py): B streams over P worker processes, one
shared schedule, every record back in the parent's collector with its id, on one clock."""
from __future__ import annotations

import time

import pytest

import presets
from engines.null_server import Behaviour, NullServer
from measure.core.arrivals import ArrivalSpec
from measure.core.clients import Segment
from measure.core.records import RunMeta
from measure.core.workload import ClosedLoop, Load, Poisson
from measure.sources.base import Finished, LevelReady, LoadStarted, Tokens
from measure.sources.http_pool import HttpPool, auto_procs

META = RunMeta("http", "null", 0, simulated=True)
TOKENS = 6


@pytest.fixture(scope="module")
def server():
    with NullServer(Behaviour(ttft_ms=5, itl_ms=2)) as srv:
        yield srv


@pytest.fixture(scope="module")
def pool(server):
    p = HttpPool(server.url, META, b=8, procs=2, events=False)
    p.start(timeout=60)
    yield p
    p.close()


def _check_times(recs, before_ns, after_ns):
    for r in recs:
        assert before_ns <= r.t_scheduled_ns <= r.t_submitted_ns <= r.t_first_token_ns <= r.t_done_ns <= after_ns
        assert r.token_ns == sorted(r.token_ns) and len(r.token_ns) == TOKENS


def test_closed_loop_b8_over_two_processes_records_every_request_once(pool):
    wl = presets.workload("synthetic:16")
    before = time.perf_counter_ns()
    recs = pool.run_requests(Load(wl, ClosedLoop(8, total=24), TOKENS), timeout=60)
    after = time.perf_counter_ns()
    assert len(recs) == 24 and not [r.error for r in recs if r.error]
    ids = sorted(r.request_id for r in recs)
    assert ids == list(range(ids[0], ids[0] + 24))  # unique and complete
    assert {r.run_id for r in recs} == {pool.run_id}
    assert {r.b for r in recs} == {8}  # the level's B, not a process's share
    by_proc = {}
    for r in recs:
        by_proc.setdefault(r.extra["proc"], []).append(r)
    assert sorted(by_proc) == [1, 2] and [len(v) for _, v in sorted(by_proc.items())] == [12, 12]
    _check_times(recs, before, after)  # the children's perf_counter_ns is the parent's clock


def test_open_loop_schedule_is_dealt_round_robin_with_the_whole_schedules_ids_and_offsets(pool):
    wl = presets.workload("synthetic:16")
    total = 20
    whole = Segment(Poisson(300, total=total, seed=3))  # the one-process schedule, for its offsets
    offsets = [off for _, off in whole._own]
    pool.set_users(None)
    before = time.perf_counter_ns()
    recs = pool.run_requests(Load(wl, Poisson(300, total=total, seed=3), TOKENS), timeout=60)
    after = time.perf_counter_ns()
    assert len(recs) == total and not [r.error for r in recs if r.error]
    base = min(r.request_id for r in recs) - 1
    assert sorted(r.request_id for r in recs) == list(range(base + 1, base + total + 1))
    t0 = min(r.t_scheduled_ns for r in recs)  # index 0 is due at t0 + 0
    for r in recs:
        idx = r.request_id - base - 1
        assert r.t_scheduled_ns - t0 == offsets[idx]  # the whole schedule's offset, from one start
        assert r.extra["proc"] == idx % 2 + 1  # index ≡ proc − 1 (mod 2)
    _check_times(recs, before, after)


def test_a_client_segment_is_split_again_keeping_its_indexes(pool):
    """--segment 2/2 on this machine, spread over 2 processes: its requests are indexes 1, 3, 5 … of the
    whole schedule (ids base + index + 1), dealt 1, 5, 9 … and 3, 7, 11 … to the processes."""
    wl = presets.workload("synthetic:16")
    spec = ArrivalSpec("poisson", rate=300, seed=5)
    recs = pool.run_requests(Load(wl, Segment(spec.make(16), 2, 2), TOKENS), timeout=60)
    assert len(recs) == 8
    base = min(r.request_id for r in recs) - 2  # the smallest is index 1
    idx = sorted(r.request_id - base - 1 for r in recs)
    assert idx == [1, 3, 5, 7, 9, 11, 13, 15]
    assert {r.extra["proc"] for r in recs if (r.request_id - base - 1) % 4 == 1} == {1}
    assert {r.extra["proc"] for r in recs if (r.request_id - base - 1) % 4 == 3} == {2}


def test_live_events_arrive_from_every_process(server):
    p = HttpPool(server.url, META, b=4, procs=2, events=True)
    try:
        p.start(timeout=60)
        recs = p.run_requests(Load(presets.workload("synthetic:16"), ClosedLoop(4, total=8), TOKENS), timeout=60)
        deadline = time.monotonic() + 5
        evs = []
        while time.monotonic() < deadline and sum(isinstance(e, Finished) for e in evs) < 8:
            while not p.events.empty():
                evs.append(p.events.get())
            time.sleep(0.05)
        deadline = time.monotonic() + 5  # each process sends its endpoints' rows every 0.5 s
        while time.monotonic() < deadline and p.workers()[0].requests_done < 8:
            time.sleep(0.05)
        rows = p.workers()
    finally:
        p.close()
    fin = [e.record.request_id for e in evs if isinstance(e, Finished)]
    assert sorted(fin) == sorted(r.request_id for r in recs)
    toks = {}
    for e in evs:
        if isinstance(e, Tokens):
            toks.setdefault(e.request_id, []).extend(e.token_ns)
    assert {rid: sorted(ts) for rid, ts in toks.items()} == {r.request_id: r.token_ns for r in recs}
    assert sum(isinstance(e, LoadStarted) for e in evs) == 1  # one load start, not one per process
    assert not [e for e in evs if isinstance(e, LevelReady)]  # no step was asked after the first level
    assert [(w.requests_done, w.tokens, w.streams) for w in rows] == [(8, 8 * TOKENS, 4)]  # summed over both


def test_auto_procs_follows_streams_and_cores():
    assert auto_procs(1, cores=2) == 1
    assert auto_procs(8, cores=2) == 1
    assert auto_procs(256, cores=2) == 2
    assert auto_procs(256, cores=16) == 3
    assert auto_procs(10_000, cores=2) == 2


def test_the_event_loops_wait_for_a_timer_to_the_microsecond_not_the_next_whole_millisecond(monkeypatch):
    """epoll takes whole milliseconds and asyncio rounds a timer's wait up: a chunk due in 0.3 ms was sent up
    to 1 ms late (the null server's median lateness read ≈ 0.6 ms at 8 streams), and the same for an open
    loop's next arrival. The loops of the null server and the HTTP source wait on the epoll fd with select()
    (microseconds), then take its events without waiting."""
    import select as select_mod

    from engines.null_server import PreciseSelector, precise_event_loop

    waits = []
    real = select_mod.select

    def spy(r, w, x, timeout=None):
        waits.append(timeout)
        return real(r, w, x, timeout)

    sel = PreciseSelector()
    try:
        monkeypatch.setattr(select_mod, "select", spy)
        assert sel.select(0.0003) == []
        assert waits == [0.0003]  # not rounded up to 0.001
    finally:
        sel.close()
    loop = precise_event_loop()
    try:
        assert isinstance(loop._selector, PreciseSelector)
    finally:
        loop.close()


def test_fewer_streams_than_processes_send_every_request(server):
    """B=1 after starting 2 processes (a sweep's B=1 cell): the process with no stream gets no share."""
    p = HttpPool(server.url, META, b=2, procs=2, events=False)
    try:
        p.start(timeout=60)
        p.set_batch("http", 1)
        p.wait_ready(30)
        wl = presets.workload("synthetic:16")
        recs = p.run_requests(Load(wl, Poisson(300, total=6, seed=2), TOKENS), timeout=60)
        assert len(recs) == 6 and {r.extra["proc"] for r in recs} == {1} and {r.b for r in recs} == {1}
        recs = p.run_requests(Load(wl, ClosedLoop(1, total=3), TOKENS), timeout=60)
        assert len(recs) == 3 and {r.extra["proc"] for r in recs} == {1}
    finally:
        p.close()


def test_http_source_picks_one_process_or_the_pool():
    from functools import partial

    from measure.sources.http import HttpSource
    from measure.sources.http_pool import http_source

    assert http_source(1, 256) is HttpSource
    assert http_source(4, 1) is HttpSource  # one stream: one process
    made = http_source(2, 256)
    assert isinstance(made, partial) and made.func is HttpPool and made.keywords == {"procs": 2}


def test_a_bench_header_says_how_many_client_processes_sent_its_streams(server, tmp_path):
    """bench --client-procs 2 at B=4: the records file's header says 2 and the records come from both; auto at
    B=4 is one process (http_pool.auto_procs), and the header says that too."""
    import json
    import subprocess
    import sys

    for procs, want in (("2", 2), ("auto", 1)):
        out = tmp_path / procs
        p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", server.url,
                            "--b", "4", "--requests", "8", "--max-tokens", "4", "--client-procs", procs,
                            "--out", str(out)], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        lines = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
        assert lines[0]["client_procs"] == want
        procs_seen = {(r.get("extra") or {}).get("proc") for r in lines[1:] if r.get("kind") == "request"}
        assert len(procs_seen) == want and len([r for r in lines[1:] if r.get("kind") == "request"]) == 8
