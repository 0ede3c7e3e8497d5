"""One contract over every load source (measure/sources/base.py: LoadSource, FiniteLoadSource, the events): the
process fleet (instances and batch), the HTTP source, its process pool, the simulated fleet, a replay and the
live dashboard's client actors on Ray (where Ray is installed), each on a fast double (engines/null.py,
engines/null_server.py, a fake clock), none on a real model.

The promises checked, from base.py's docstrings: a source is a LoadSource and says what it can do as data
(Capabilities; `finite` refuses one that serves a live view only); every request it began yields exactly one
record (Started, then its Finished), request ids are unique, each record's times are in order
(t_scheduled ≤ t_submitted ≤ t_started ≤ t_first_token ≤ t_done, its tokens sorted between the first and the
end) and carry the source's run id; the load's start (LoadStarted) is said once, before the first record;
workers() gives WorkerInfo rows; close may be called twice."""
from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

import presets
from engines.base import EngineSpec
from measure.core.arrivals import ArrivalSpec
from measure.core.records import RequestRecord, RunMeta
from measure.core.workload import ClosedLoop, Load
from measure.sources.base import (Capabilities, Finished, LoadSource, LoadStarted, SourceError, Started, WorkerInfo,
                                  finite)

N = 6
TOKENS = 4
WL = presets.workload("synthetic:16")
NULL = {"ttft_s": 0.003, "itl_s": 0.001}


@dataclass
class Ran:
    source: LoadSource
    events: list  # every event the source put out, in order
    records: list[RequestRecord]
    says_load_started: bool = True  # a replay does not: its controller reads the recording's (control/live/replay.py)
    own_run_id: bool = True  # a replay gives back the recorded records, made under the recorded run's id


def _drain(q: queue.Queue | None) -> list:
    out = []
    while q is not None:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out
    return out


def _finite(src, load: Load) -> Ran:
    src.start()
    recs = src.run_requests(load, timeout=60)
    time.sleep(0.1)  # the last events (a pool's come 10 times a second) reach the queue
    return Ran(src, _drain(src.events), recs)


def fleet(tmp_path, mode: str = "instances") -> Iterator[Ran]:
    from measure.sources.fleet import Fleet

    b = 2 if mode == "batch" else 1
    src = Fleet(EngineSpec("null", "", options=NULL), RunMeta("null", "none", 0, mode=mode, b=b, simulated=True),
                k=2, threads=1, b_cap=b)
    try:
        yield _finite(src, Load(WL, ClosedLoop(2 * b, total=N), TOKENS))
    finally:
        src.close()


def batch(tmp_path) -> Iterator[Ran]:
    yield from fleet(tmp_path, "batch")


def http(tmp_path) -> Iterator[Ran]:
    from engines.null_server import Behaviour, NullServer
    from measure.sources.http import HttpSource

    with NullServer(Behaviour(ttft_ms=3, itl_ms=1)) as srv:
        src = HttpSource(srv.url, RunMeta("http", "null", 0, simulated=True), b=2)
        try:
            yield _finite(src, Load(WL, ClosedLoop(2, total=N), TOKENS))
        finally:
            src.close()


def pool(tmp_path) -> Iterator[Ran]:
    from engines.null_server import Behaviour, NullServer
    from measure.sources.http_pool import HttpPool

    with NullServer(Behaviour(ttft_ms=3, itl_ms=1)) as srv:
        src = HttpPool(srv.url, RunMeta("http", "null", 0, simulated=True), b=2, procs=2)
        try:
            yield _finite(src, Load(WL, ClosedLoop(2, total=N), TOKENS))
        finally:
            src.close()


def simulated(tmp_path) -> Iterator[Ran]:
    """On a fake clock: an open loop of N (the simulated fleet runs its own closed loop, endless), to its end."""
    from measure.sources.simulated import SimulatedFleet

    clock = Clock()
    src = SimulatedFleet(RunMeta("null", "none", 1_000_000, mode="batch", b=2), k=2, prefill_s=0.003, clock=clock,
                         threaded=False)
    src.start()
    src.set_load(Load(WL, ArrivalSpec("constant", rate=200.0).make(N), TOKENS))
    for _ in range(200):
        clock.now += 1_000_000
        src.advance(clock.now)
    events = _drain(src.events)
    try:
        yield Ran(src, events, [e.record for e in events if isinstance(e, Finished)])
    finally:
        src.close()


def replay(tmp_path) -> Iterator[Ran]:
    """A SIMULATED dashboard session recorded for 5 s, fed back whole."""
    from dataclasses import asdict

    from measure.machine.recorder import Recorder
    from measure.sources.replay import Recording, ReplaySource
    from sim import run_for, sim_controller

    path = tmp_path / "session.jsonl"
    c, fl, clock = sim_controller(k=2)
    c.recorder = Recorder(path, {"engine": "llama.cpp", "model": fl.meta.model, "model_bytes": fl.meta.model_bytes,
                                 "simulated": True, "settings": asdict(c.settings)}, fsync=False)
    run_for(c, fl, clock, 5)
    c.recorder.close()
    src = ReplaySource(Recording.load(path))
    src.start()
    src.feed(0, 1 << 62)
    events = _drain(src.events)
    try:
        yield Ran(src, events, [e.record for e in events if isinstance(e, Finished)], says_load_started=False,
                  own_run_id=False)
    finally:
        src.close()


def ray_clients(tmp_path) -> Iterator[Ran]:
    """The live dashboard's load from two client actors (sources/ray_clients.py) on a Ray instance of this process's
    own (ray.init: its processes, shut down after), each client an HTTP source of the null server's running its
    own closed loop of N to its end; skipped where Ray is not installed (pip install 'inference-top[cluster]')."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'inference-top[cluster]'")
    import logging
    from functools import partial

    from engines.null_server import Behaviour, NullServer
    from measure.control.builder import PlanOptions, make_plan
    from measure.control.wiring import make_source
    from measure.sources.ray_clients import RayClients

    # a throwaway instance on loopback, no auth token: a local ray.init would otherwise write ~/.ray/auth_token, which
    # every later `ray start` on this machine then requires (tests/integration/test_ray_clients.py's cluster among them)
    auth = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
             _node_ip_address="127.0.0.1")
    try:
        with NullServer(Behaviour(ttft_ms=3, itl_ms=1)) as srv:
            plan = make_plan(PlanOptions(engine="http", url=[srv.url], tokenizer="none", b=2, max_tokens=TOKENS),
                             default_max_tokens=TOKENS)
            src = RayClients(plan, partial(make_source, plan, events=True, k=1), "auto", 2, None, events=True)
            try:
                src.start()
                src.set_batch("http", 2)  # one stream a client
                src.set_load(Load(WL, ClosedLoop(2, total=N), TOKENS))  # each client's loop: N requests
                events: list = []
                end = time.monotonic() + 120
                while sum(isinstance(e, Finished) for e in events) < 2 * N and time.monotonic() < end:
                    time.sleep(0.1)
                    events += _drain(src.events)
                time.sleep(0.5)  # (nothing more comes: each loop has ended)
                events += _drain(src.events)
                yield Ran(src, events, [e.record for e in events if isinstance(e, Finished)])
            finally:
                src.close()
    finally:
        ray.shutdown()
        if auth is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = auth


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000_000_000

    def __call__(self) -> int:
        return self.now


SOURCES: dict[str, Callable[..., Iterator[Ran]]] = {"fleet": fleet, "batch": batch, "http": http, "pool": pool,
                                                     "simulated": simulated, "replay": replay, "ray": ray_clients}


@pytest.fixture(params=list(SOURCES), scope="module")
def ran(request, tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("INFERENCE_TOP_LOGS", str(tmp_path_factory.mktemp("logs")))
    gen = SOURCES[request.param](tmp_path_factory.mktemp(request.param))
    yield next(gen)
    gen.close()  # the source closed, its server stopped


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_it_is_a_load_source_and_says_what_it_can_do_as_data(ran):
    src = ran.source
    assert isinstance(src, LoadSource)
    caps = src.capabilities()
    assert isinstance(caps, Capabilities) and caps.modes and src.mode in caps.modes
    if caps.finite_loads:
        assert finite(src) is src
    else:
        with pytest.raises(SourceError, match="live view only"):
            finite(src)
    assert all(isinstance(w, WorkerInfo) for w in src.workers())


def test_every_request_begun_yields_exactly_one_record_with_a_unique_id(ran):
    finished = [e.record for e in ran.events if isinstance(e, Finished)]
    started = [e.request_id for e in ran.events if isinstance(e, Started)]
    ids = [r.request_id for r in ran.records]
    assert len(ran.records) >= N and len(set(ids)) == len(ids)
    assert sorted(r.request_id for r in finished) == sorted(ids)  # each record is said once as it ends
    assert sorted(started) == sorted(ids)  # every request that began ended in one record
    assert not [r.error for r in ran.records if r.error]


def test_each_records_times_are_in_order(ran):
    for r in ran.records:
        assert r.t_started_ns is not None and r.t_first_token_ns is not None and r.t_done_ns is not None
        assert r.t_scheduled_ns <= r.t_submitted_ns <= r.t_started_ns <= r.t_first_token_ns <= r.t_done_ns, r
        assert r.token_ns == sorted(r.token_ns) and r.token_ns[0] == r.t_first_token_ns
        assert r.token_ns[-1] <= r.t_done_ns and r.output_tokens == len(r.token_ns)
        if ran.own_run_id:
            assert r.run_id == ran.source.run_id


def test_a_request_starts_before_it_ends(ran):
    seen_start: set[int] = set()
    for e in ran.events:
        if isinstance(e, Started):
            seen_start.add(e.request_id)
        elif isinstance(e, Finished):
            assert e.record.request_id in seen_start


def test_the_load_start_is_said_once_before_the_first_record(ran):
    kinds = [type(e) for e in ran.events]
    if not ran.says_load_started:
        assert LoadStarted not in kinds
        return
    assert kinds.count(LoadStarted) == 1
    assert kinds.index(LoadStarted) < kinds.index(Finished)
    t_start = next(e.t_ns for e in ran.events if isinstance(e, LoadStarted))
    assert t_start <= min(r.t_started_ns for r in ran.records)


def test_close_may_be_called_twice(ran):
    ran.source.close()
    ran.source.close()
