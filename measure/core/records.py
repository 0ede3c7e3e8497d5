"""The per-request record (docs/design/record.md): one JSONL line per finished or failed request,
the run metadata every record repeats, the request a record is of (what the dispatcher sends), and the one
function that assembles a record."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypedDict

from engines.base import Prompt

Mode = Literal["instances", "batch", "http"]
MODES: tuple[Mode, ...] = ("instances", "batch", "http")


def is_remote(mode: str) -> bool:
    """The one test of a mode for "a server of its own serves the load" (http): K counts its endpoints, each on
    its chip with its β (bandwidth from each one's TPOT p50), B the streams this client keeps open to each (no
    batch context here: a user is a stream), the server counts its own tokens; its memory and queue are not
    ours."""
    return mode == "http"


class ChatMessage(TypedDict):
    """One message of a chat endpoint's conversation (a session's turn, core/sessions.messages)."""

    role: str  # user | assistant
    content: str


@dataclass
class Request:
    request_id: int
    prompt: Prompt
    max_tokens: int
    ignore_eos: bool
    t_scheduled_ns: int
    t_submitted_ns: int = 0
    rep: int = 0
    k: int = 1
    b: int = 1
    mode: str = "instances"
    # a multi-turn session's turn (core/sessions.py): its numbers, its prefix-cache key, its chat messages
    session: int | None = None
    turn: int | None = None
    session_key: str | None = None
    messages: list[ChatMessage] | None = None
    waited_for_stream: bool = False  # due while no slot had room (sources/dispatch.py); over HTTP, every client
    # stream busy: the client's own queue (extra.client_queue_ms)


@dataclass
class RunMeta:
    """What every record of a run repeats: engine label, model, W (bytes read per token) and whether the
    numbers are simulated."""

    engine: str
    model: str
    model_bytes: int
    mode: Mode = "instances"
    b: int = 1
    simulated: bool = False


@dataclass(slots=True)  # thousands are kept live: no per-instance dict
class RequestRecord:
    run_id: str
    request_id: int
    mode: str  # instances | batch | http
    engine: str
    model: str
    model_bytes: int
    k: int
    b: int
    worker: int | None = None
    prompt_id: str = ""
    prompt_tokens: int | None = 0  # None: unknown (a server that sent no usage and no tokenizer to ask)
    output_tokens: int = 0
    t_scheduled_ns: int = 0
    t_submitted_ns: int = 0
    t_started_ns: int | None = None
    t_first_token_ns: int | None = None
    t_done_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    simulated: bool = False
    # beyond docs/design/record.md
    rep: int = 0
    pid: int | None = None
    threads: int | None = None
    worker_rss_bytes: int | None = None
    kind: str = "request"
    # http mode: the server's own count where it differs from the streamed chunks, and its view
    server_output_tokens: int | None = None
    server_view: dict[str, Any] | None = None
    extra: dict[str, Any] | None = None  # per-source details (how tokens were counted, the prompt's unique prefix …)
    # a reasoning model over HTTP: its thinking tokens (counted in token_ns too) and its first answer token
    reasoning_tokens: int = 0
    t_first_answer_ns: int | None = None
    # a multi-turn session's request (docs/design/sessions.md): its session (1-based in its load) and turn (1-based)
    session: int | None = None
    turn: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field, its lists and dicts copied one level down (a record's are flat: token times, a server's
        figures): dataclasses.asdict's deep copy of each token time was most of a live tick's CPU."""
        return {name: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
                for name in self.__dataclass_fields__ for v in (getattr(self, name),)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True)
class Outcome:
    """What a source saw of one request: its start, its tokens' times, its end and how it finished."""

    token_ns: list[int]
    t_started_ns: int | None
    t_done_ns: int | None = None  # None: now
    prompt_tokens: int | None = 0
    finish_reason: str | None = None
    error: str | None = None  # set: finish_reason "error"


@dataclass(frozen=True)
class ServedBy:
    """Who served it: the worker (http: the endpoint's index), its process, and the model's name where the
    server gives its own."""

    worker: int | None
    pid: int | None = None
    threads: int | None = None
    rss: int | None = None
    model: str | None = None  # None: the run's


def build_record(req: Request, meta: RunMeta, run_id: str, out: Outcome, by: ServedBy, **more: Any) -> RequestRecord:
    """The record of one finished or failed request, the same way for every load source; `more`: fields beyond
    these (http: the server's view, extra …)."""
    toks = list(out.token_ns)
    return RequestRecord(
        run_id=run_id, request_id=req.request_id, mode=req.mode, engine=meta.engine, model=by.model or meta.model,
        model_bytes=meta.model_bytes, k=req.k, b=req.b, worker=by.worker, prompt_id=req.prompt.prompt_id,
        prompt_tokens=out.prompt_tokens, output_tokens=len(toks), t_scheduled_ns=req.t_scheduled_ns,
        t_submitted_ns=req.t_submitted_ns, t_started_ns=out.t_started_ns, t_first_token_ns=toks[0] if toks else None,
        t_done_ns=out.t_done_ns or time.perf_counter_ns(), token_ns=toks,
        finish_reason="error" if out.error is not None else out.finish_reason, error=out.error,
        simulated=meta.simulated, rep=req.rep, pid=by.pid, threads=by.threads, worker_rss_bytes=by.rss,
        session=req.session, turn=req.turn, **more,
    )


def shifted(rec: RequestRecord, d: int) -> RequestRecord:
    """The record with every time moved by `d` ns: another process's or machine's records put on this clock."""

    def s(t: int | None) -> int | None:
        return None if t is None else t + d

    return replace(rec, t_scheduled_ns=rec.t_scheduled_ns + d, t_submitted_ns=rec.t_submitted_ns + d
                   if rec.t_submitted_ns else rec.t_submitted_ns, t_started_ns=s(rec.t_started_ns),
                   t_first_token_ns=s(rec.t_first_token_ns), t_done_ns=s(rec.t_done_ns),
                   token_ns=[t + d for t in rec.token_ns], t_first_answer_ns=s(rec.t_first_answer_ns))
