"""Messages on a child process's pipe, both ways: a fleet's engine worker (sources/worker.py) and an HTTP pool's
client process (sources/http_pool.py). NamedTuples: typed fields, and they pickle as cheaply as the bare tuples
they replace (the batch loop sends one per finished sequence and a batch every 100 ms)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from engines.base import Prompt

if TYPE_CHECKING:
    from measure.core.records import Request, RequestRecord, RunMeta
    from measure.core.workload import Load
    from measure.sources.base import Event, WorkerInfo


# ---- worker → fleet ----------------------------------------------------------------------------
class StateMsg(NamedTuple):
    """loading | warming | ready | retired, with whatever it knows now."""

    state: str
    pid: int | None = None
    threads: int | None = None
    rss: int | None = None
    mode_applied: bool = False
    error: str | None = None


class StartMsg(NamedTuple):
    """A request began (batch mode: was admitted to the batch)."""

    request_id: int
    t_ns: int


class TokensMsg(NamedTuple):
    """Token timestamps of one request, batched at ≈10 Hz."""

    request_id: int
    token_ns: list[int]


class DoneMsg(NamedTuple):
    request_id: int
    token_ns: list[int]  # those not sent yet
    prompt_tokens: int
    finish_reason: str
    error: str | None
    t_done_ns: int
    rss: int | None
    token_ids: list[int] | None = None  # the answer's ids, where the engine spec asked (options answer_ids)


class FatalMsg(NamedTuple):
    """The engine could not load; the worker exits."""

    message: str


# ---- fleet → worker ----------------------------------------------------------------------------
class ReqMsg(NamedTuple):
    """A request, what of it a worker needs."""

    request_id: int
    prompt: Prompt
    max_tokens: int
    ignore_eos: bool

    @classmethod
    def of(cls, req: Request) -> ReqMsg:
        return cls(req.request_id, req.prompt, req.max_tokens, req.ignore_eos)


class ThreadsMsg(NamedTuple):
    n: int


class ModeMsg(NamedTuple):
    mode: str  # single | batch
    b: int
    b_cap: int
    seq_ctx: int | None


class RetireMsg(NamedTuple):
    """Finish what you hold, then leave."""


class StopMsg(NamedTuple):
    """Leave now."""


# ---- an HTTP pool's client process → the pool -----------------------------------------------------
class StartedMsg(NamedTuple):
    """Its HttpSource started: the run's metadata as the endpoints told it."""

    meta: RunMeta


class RecordMsg(NamedTuple):
    """Headless: a finished request's record, at once."""

    record: RequestRecord


class EventsMsg(NamedTuple):
    """Live: the events of the last 0.1 s, in their order (a record as its Finished, after its Tokens)."""

    events: list[Event]


class RowsMsg(NamedTuple):
    """Its endpoints' rows and the first one's server view, every 0.5 s and after a warmup."""

    workers: list[WorkerInfo]
    server_view: dict[str, Any] | None


class ReadyMsg(NamedTuple):
    """The answer to WaitReadyMsg `token`: None, or why its streams did not warm up."""

    token: int
    error: str | None


class LogMsg(NamedTuple):
    level: str
    text: str


class ClosedMsg(NamedTuple):
    """Its source closed: the last message."""


# (a source that could not start says FatalMsg and ends)


# ---- the pool → a client process -------------------------------------------------------------------
class PoolInit(NamedTuple):
    """The first message: which process of the pool it is (1-based) and its HttpSource's arguments."""

    proc: int
    kw: dict[str, Any]
    events: bool
    run_id: str


class BatchMsg(NamedTuple):
    """Its streams per endpoint at the level's B (`level_b`, which its records say)."""

    streams: int
    level_b: int


class ScaleMsg(NamedTuple):
    k: int


class PauseMsg(NamedTuple):
    paused: bool


class LoadMsg(NamedTuple):
    """Its share of a load (None: none), its first request id, the step between its ids, the repetition."""

    load: Load | None
    first_id: int | None
    step: int
    rep: int


class WaitReadyMsg(NamedTuple):
    timeout: float
    token: int

# (and StopMsg: close the source and leave)
