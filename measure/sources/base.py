"""The load-source protocol: what the live controller, the sweep and replay ask of anything that turns
requests into token timestamps (the process fleet, HTTP streams, the simulated fleet, a recording).

A source says what it can do as data (`Capabilities`), never by which attributes it happens to have, and
tells what happened through typed events on `events` (a queue the live controller drains) or through
`on_record` (a headless sweep).
"""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, Protocol, cast, runtime_checkable

from measure.core.records import Mode, RequestRecord, RunMeta, is_remote
from measure.core.workload import Load
from measure.machine.waits import poll_until


class SourceError(RuntimeError):
    """The source cannot go on (no worker could load, all died, nothing answers); the message is one line."""


class CellStopped(RuntimeError):
    """A finite load stopped early (the memory wall); `records` holds what finished before."""

    def __init__(self, why: str, records: Iterable[RequestRecord]):
        super().__init__(why)
        self.records = list(records)


class WorkerState(str, Enum):
    """One worker's (or endpoint's) life: starting → loading → warming → idle ⇄ serving, then retiring →
    retired, or dead at any point. An endpoint that stops answering is down until it answers again."""

    STARTING = "starting"
    LOADING = "loading"
    WARMING = "warming"
    IDLE = "idle"
    SERVING = "serving"
    RETIRING = "retiring"
    RETIRED = "retired"
    DEAD = "dead"
    DOWN = "down"  # an endpoint that does not answer now; it rejoins when it does

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def gone(self) -> bool:
        """It will serve nothing again."""
        return self in (WorkerState.RETIRED, WorkerState.DEAD)

    @property
    def leaving(self) -> bool:
        """Gone, or finishing its last request."""
        return self in (WorkerState.RETIRING, WorkerState.RETIRED, WorkerState.DEAD)


@dataclass(frozen=True)
class PeerReading:
    """One other client's row in the dashboard's client list: a --peer's /metrics scraped (control/live/peers.py)
    or a Ray client actor's own figures (sources/ray_clients.py)."""

    url: str
    label: str
    up: bool = False
    scraped: bool = False  # asked at least once
    tps: float | None = None
    requests: int | None = None
    errors: int | None = None
    k: int | None = None
    error: str | None = None  # why it is down
    t: float | None = None  # time.monotonic() of the last answer


@dataclass
class WorkerInfo:
    wid: int
    state: WorkerState = WorkerState.STARTING
    pid: int | None = None
    threads: int | None = None
    rss: int | None = None
    requests_done: int = 0
    tokens: int = 0
    last_ttft_s: float | None = None
    current: int | None = None  # the request it began last, None when idle
    active: int = 0  # requests it holds now (up to B in batch mode)
    ready_ns: int | None = None
    error: str | None = None
    # an endpoint's row (http): its name, failed requests, streams it may hold, its server's own figures, β
    label: str | None = None
    errors: int = 0
    streams: int | None = None
    server: dict[str, Any] | None = None
    bandwidth_gbps: float | None = None

    def __post_init__(self) -> None:
        self.state = WorkerState(self.state)  # a recording holds the plain string

    def public(self) -> WorkerInfo:
        return WorkerInfo(**self.__dict__)


@dataclass(frozen=True)
class Capabilities:
    """What a source can do, as data: callers branch on these, never on the source's class."""

    engine: str  # the label records and screens show
    weight_bytes: int  # W: bytes read per decode step (the model file; 0 where unknown)
    modes: tuple[Mode, ...]  # the modes it can switch between
    scales_k: bool  # + / - add or retire engine instances
    local: bool  # the engine runs on this machine: its memory is ours to guard
    batch_capacity: int  # sequences one engine (or one server) can hold at once
    server_view: bool  # it scrapes a server's own figures
    simulated: bool  # numbers follow a model, not a measurement
    endpoint: str | None = None  # the URL of a remote engine (several, comma-separated)
    max_k: int | None = None  # K cannot go above this (the endpoints given); None: no such bound
    level_ready: bool = False  # it sends LevelReady after a K, B or mode step; else a level starts at the step
    finite_loads: bool = True  # it runs a finite load to completion (FiniteLoadSource: a bench cell, a --find level)

    @property
    def per_endpoint_bandwidth(self) -> bool:
        """K servers of their own, each on its chip (records.is_remote): bandwidth from each one's TPOT p50
        (metrics.http_bandwidth), the spec line Σ β of those in use, K·W/β with each one's β."""
        return any(is_remote(m) for m in self.modes)


# ---- events (source → live reader) -------------------------------------------------------------
class Tokens(NamedTuple):
    """Token timestamps of one request, sent as they are produced (≈10 Hz batches from a worker)."""

    worker: int | None
    request_id: int
    token_ns: list[int]


class Started(NamedTuple):
    """A worker began a request: its time in service (achieved concurrency, Little's law) counts from here."""

    worker: int | None
    request_id: int
    t_ns: int


class Finished(NamedTuple):
    record: RequestRecord


class Log(NamedTuple):
    level: str  # info | warn | error
    text: str


class LoadStarted(NamedTuple):
    """The load began flowing (every worker warmed up): windows and rates count from here. Said once per load,
    before its first record, when the source's dispatcher decides it (sources/dispatch.Dispatcher.start)."""

    t_ns: int


class LevelReady(NamedTuple):
    """Every worker of the level asked last (K, B, mode) is ready and serving it: that level's figures count
    from `t_ns`. Requests served while its new workers started or warmed up belong to the level before (their
    records say the K and B that served them)."""

    t_ns: int
    k: int
    b: int
    mode: str


class OutOfMemory(NamedTuple):
    """The kernel's OOM killer ended a worker while the source served this step: the memory guard's estimate
    was too low there (admission.py refuses the step from then on)."""

    mode: Mode
    k: int
    b: int


Event = Tokens | Started | Finished | Log | LoadStarted | LevelReady | OutOfMemory


@runtime_checkable
class LoadSource(Protocol):
    """Everything that serves a load. K = engine instances, B = sequences per engine (or streams)."""

    # read-only here (properties), so that each source may hold them as it likes
    @property
    def meta(self) -> RunMeta: ...

    @property
    def run_id(self) -> str: ...

    @property
    def events(self) -> queue.Queue[Event] | None: ...  # for a live reader; None when headless

    @property
    def mode(self) -> Mode: ...

    @property
    def target_k(self) -> int: ...

    @property
    def b(self) -> int: ...

    @property
    def rep(self) -> int: ...  # stamped on the records of the current repetition

    @rep.setter
    def rep(self, rep: int) -> None: ...  # the one settable one: the sweep sets it before each repetition's load

    @property
    def oom_killed(self) -> Sequence[tuple[int, int, str]]: ...  # (K, B, mode) of each step at which the kernel's
    # OOM killer ended a worker (local engines)

    def capabilities(self) -> Capabilities: ...

    def start(self, wait_ready: bool = True, timeout: float = 600.0) -> None: ...

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Until every worker of the target K is ready in its mode (SourceError if that cannot be)."""

    def scale_to(self, k: int) -> None: ...

    def set_batch(self, mode: Mode, b: int, b_cap: int | None = None, seq_ctx: int | None = None) -> None: ...

    def set_load(self, load: Load) -> None:
        """Start or replace the load; requests flow once every worker is ready."""

    def set_users(self, users: int | None) -> None:
        """Closed-loop users; None: they follow the ready capacity (K × B)."""

    def pause(self, paused: bool = True) -> None: ...

    def workers(self) -> list[WorkerInfo]: ...

    def server_view(self) -> dict[str, Any] | None:
        """The server's own figures (None: not scraped yet or no server; {}: it exposes none)."""

    def close(self, grace: float = 1.0) -> None: ...


@runtime_checkable
class FiniteLoadSource(LoadSource, Protocol):
    """A source that also runs a finite load to completion (Capabilities.finite_loads): the fleet and HTTP. The
    simulated fleet and a replay serve a live view only."""

    def run_requests(self, load: Load, timeout: float | None = None,
                     should_stop: Callable[[], str | None] | None = None) -> list[RequestRecord]:
        """A finite load to completion (CellStopped, TimeoutError, SourceError)."""


def summed_rows(parts: Sequence[Sequence[WorkerInfo]]) -> list[WorkerInfo]:
    """One row per endpoint from several clients' rows of the same endpoints (a pool's processes, the live
    Ray clients): requests, tokens, errors, streams busy and held summed; serving where any serves; ready at the
    latest. The first part's rows give the rest (an endpoint a later part lacks counts from the others)."""
    if not parts:
        return []
    out = []
    for i in range(len(parts[0])):
        w = parts[0][i].public()
        for other in parts[1:]:
            if i >= len(other):
                continue
            o = other[i]
            w.requests_done += o.requests_done
            w.tokens += o.tokens
            w.errors += o.errors
            w.active += o.active
            w.streams = (w.streams or 0) + (o.streams or 0)
            if o.state == WorkerState.SERVING:
                w.state = o.state
            if w.ready_ns is None or (o.ready_ns is not None and o.ready_ns > w.ready_ns):
                w.ready_ns = o.ready_ns
        out.append(w)
    return out


def finite(source: LoadSource) -> FiniteLoadSource:
    """The source, where it runs finite loads; else SourceError saying so (one line), for a bench cell or a --find
    level asked of a source that serves a live view only."""
    caps = source.capabilities()
    if not caps.finite_loads:
        raise SourceError(f"the {'simulated ' if caps.simulated else ''}{caps.engine} source of this run cannot run "
                          "a finite load (a bench cell, a --find level): it serves a live view only")
    return cast(FiniteLoadSource, source)  # the capability says so (callers branch on data, not on classes)


class CollectsRecords:
    """The one run_requests (FiniteLoadSource) of every source that runs finite loads (the fleet, HTTP, its process
    pool): a collector for the load's records is installed (`_collect`), the load set, the records waited for,
    the collector taken away. A source says how its collector is installed (by default `self._collector`, which
    its record path reads), what a stopped cell leaves behind (`_cell_stopped`) and what failed under it
    (`_check`)."""

    _collector: RecordCollector | None = None

    def set_load(self, load: Load | None) -> None:
        raise NotImplementedError

    def _collect(self, collector: RecordCollector | None) -> None:
        self._collector = collector

    def _cell_stopped(self) -> None:
        """A cell stopped early (CellStopped): nothing more is left to do here by default."""

    def _check(self) -> None:
        """After the records are in: SourceError if the source failed meanwhile."""

    def run_requests(self, load: Load, timeout: float | None = None,
                     should_stop: Callable[[], str | None] | None = None) -> list[RequestRecord]:
        """A finite load to completion: its records (CellStopped when `should_stop`, asked twice a second, gives a
        reason; TimeoutError past `timeout`; SourceError)."""
        total = load.arrivals.total
        if total is None:
            raise ValueError("run_requests needs a finite load (a total)")
        collect = RecordCollector(total)
        self._collect(collect)
        self.set_load(load)
        try:
            done = collect.wait(timeout, should_stop)
        except CellStopped:
            self._cell_stopped()
            raise
        finally:
            self._collect(None)
        self._check()
        return done


class RecordCollector:
    """The records of one finite load, and the wait for them (every source's run_requests)."""

    def __init__(self, total: int):
        self.total = total
        self.done: list[RequestRecord] = []
        self._ev = threading.Event()

    def __call__(self, rec: RequestRecord) -> None:
        self.done.append(rec)
        if len(self.done) >= self.total:
            self._ev.set()

    def wait(self, timeout: float | None, should_stop: Callable[[], str | None] | None) -> list[RequestRecord]:
        """Until all records are in; TimeoutError past `timeout`, CellStopped when should_stop (asked twice
        a second) gives a reason."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ev.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"cell did not finish within {timeout:.0f} s "
                                   f"({len(self.done)}/{self.total} requests)")
            # polled, not Event.wait (measure/machine/waits.py: a signal's exception in Event.wait's lock ended a
            # bench without the summary of its finished cells)
            step_end = time.monotonic() + (0.5 if left is None else min(0.5, left))
            if not poll_until(self._ev.is_set, step_end) and should_stop and (why := should_stop()):
                raise CellStopped(why, self.done)
        return self.done


class EventSink:
    """The two ways a source tells what happened: typed events for a live reader, records for a sweep."""

    def __init__(self, events: bool, on_record: Callable[[RequestRecord], None] | None):
        self.events: queue.Queue[Event] | None = queue.Queue() if events else None
        self.on_record = on_record

    def put(self, ev: Event) -> None:
        if self.events is not None:
            self.events.put(ev)

    def log(self, text: str, level: str = "info") -> None:
        self.put(Log(level, text))

    def record(self, rec: RequestRecord, collector: Callable[[RequestRecord], None] | None = None) -> None:
        self.put(Finished(rec))
        if self.on_record:
            self.on_record(rec)
        if collector:
            collector(rec)
