"""Messages on a worker's pipe, both ways. NamedTuples: typed fields, and they pickle as cheaply as the
bare tuples they replace (the batch loop sends one per finished sequence and a batch every 100 ms)."""
from __future__ import annotations

from typing import Any, NamedTuple


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


class FatalMsg(NamedTuple):
    """The engine could not load; the worker exits."""

    message: str


# ---- fleet → worker ----------------------------------------------------------------------------
class ReqMsg(NamedTuple):
    request: dict[str, Any]  # Request.wire()


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
