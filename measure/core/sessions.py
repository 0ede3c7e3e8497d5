"""Multi-turn sessions (docs/design/sessions.md): N users, each holding one conversation at a time. A turn's prompt
is the conversation so far (every earlier user message and the server's own answer to it) followed by the new
user message; the user sends it only after the previous answer has ended and a seeded think time has passed.

This is a closed loop whose request content depends on the previous answer, so it has two faces: the
dispatcher (workload.RequestMaker) asks `due_turns` for the turns due now, like any arrival process, and the
source tells `finished` when an answer ends, with its text (sources/http.py; local engines have no prefix cache
to measure, so sessions run over HTTP only). Per-turn TTFT p50 (`ttft_by_turn`) is what shows a prefix cache:
with `--prefix-cache on` a later turn prefills only its new tokens, with `off` the whole history again.
"""
from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypedDict

from engines.base import Prompt
from measure.core import metrics as M
from measure.core.arrivals import DueTurn, TurnArrivals
from measure.core.datasets import Dataset, request_for
from measure.core.records import ChatMessage, RequestRecord
from presets import Workload

THINK_FORMS = "S (seconds, exponential with mean S), exp:S, or fixed:S; 0 (the default) sends the next turn at once"


class SessionError(ValueError):
    """A bad --turns or --think-time: one line naming what was wrong and what to write."""


@dataclass(frozen=True)
class ThinkTime:
    """The pause between an answer's end and the same user's next request, seeded per (seed, rep, session,
    turn), so a session thinks the same in every cell and engine."""

    kind: str = "fixed"  # fixed | exp
    mean_s: float = 0.0

    def draw(self, seed: int, rep: int, session: int, turn: int) -> float:
        """Seconds after turn `turn` of session `session` (1-based) before the user's next request."""
        if self.kind == "fixed" or self.mean_s <= 0:
            return self.mean_s
        return random.Random(f"think:{seed}:{rep}:{session}:{turn}").expovariate(1.0 / self.mean_s)

    def describe(self) -> str:
        if self.mean_s <= 0:
            return "no think time"
        return f"think {'exponential, mean ' if self.kind == 'exp' else ''}{self.mean_s:g} s"


def parse_think(text: str | None) -> ThinkTime:
    if text is None:
        return ThinkTime()
    t = text.strip().lower()
    kind, colon, arg = t.partition(":")
    if not colon:
        kind, arg = "exp", t
    if kind not in ("exp", "fixed"):
        raise SessionError(f"--think-time {text!r}: unknown form {kind!r}; write {THINK_FORMS}")
    try:
        v = float(arg.rstrip("s"))
    except ValueError:
        v = float("nan")
    if not math.isfinite(v) or v < 0:
        raise SessionError(f"--think-time {text!r}: {arg!r} is not a number of seconds ≥ 0; write {THINK_FORMS}")
    return ThinkTime(kind if v > 0 else "fixed", v)


@dataclass(frozen=True)
class Turn:
    """One user message of a conversation, and the answer length asked for it."""

    message: str
    prompt_id: str
    max_tokens: int


def words(n: int | None) -> str:
    """A synthetic message of n tokens as text (a transcript is text): n words "hello"."""
    return " ".join(["hello"] * max(1, n or 1))


def conversation(workload: Workload, session: int, turns: int, max_tokens: int) -> list[Turn]:
    """The turns of session `session` (0-based in its load), at most `turns`, the same in every cell, rep and
    engine. A ShareGPT file: its conversation number session (cycling), each human turn a message, the reply
    after it the answer length (--output-len's draw instead where given; --max-tokens caps). Any other workload:
    the load's requests session × turns … session × turns + turns − 1 as the messages, in order (a synthetic
    prompt of n tokens becomes n words)."""
    if isinstance(workload, Dataset) and workload.key.startswith("sharegpt:") and workload.items:
        it = workload.items[session % len(workload.items)]
        pairs = [(it.text or words(it.prompt_tokens), it.output_tokens), *it.more][:turns]
        out = []
        for t, (msg, n) in enumerate(pairs):
            if workload.output_len is not None:
                n = workload.output_len.draw(session * turns + t)
            n = max_tokens if n is None else min(n, workload.cap) if workload.cap else n
            out.append(Turn(msg, f"{it.prompt_id}:{t + 1}", n))
        return out
    out = []
    for t in range(turns):
        p, n = request_for(workload, session * turns + t, max_tokens)
        out.append(Turn(p.text if p.text is not None else words(p.synthetic_tokens), p.prompt_id, n))
    return out


def transcript(history: Sequence[tuple[str, str]], message: str) -> str:
    """A completions prompt: every (message, answer) so far, then the new message. Turn t's prompt is turn
    t − 1's prompt + its answer + the new message, so a server's prefix cache can hold all of it."""
    return "".join(f"User: {m}\nAssistant:{a}\n" for m, a in history) + f"User: {message}\nAssistant:"


def messages(history: Sequence[tuple[str, str]], message: str) -> list[ChatMessage]:
    """The same conversation for a chat endpoint."""
    out: list[ChatMessage] = []
    for m, a in history:
        out += [{"role": "user", "content": m}, {"role": "assistant", "content": a}]
    return out + [{"role": "user", "content": message}]


@dataclass
class _User:
    idx: int
    session: int = 0  # 1-based; 0: none yet
    turns: list[Turn] = field(default_factory=list)
    sent: int = 0  # turns of the session sent
    history: list[tuple[str, str]] = field(default_factory=list)
    due_ns: int | None = None  # when its next request is due; None: in flight, or left
    in_flight: bool = False
    retired: bool = False  # left when the user count was lowered (back, to a new conversation, when raised)
    done: bool = False  # left: no requests were left for a new conversation

    def owed(self) -> int:
        """Turns of its conversation still to send (none once it left: its turns are cleared, not its count)."""
        return max(0, len(self.turns) - self.sent)


class Sessions(TurnArrivals):
    """Closed-loop users in multi-turn sessions. User u holds one conversation at a time; its next request is
    due `think` after its last answer ended (the first one at once), and is the conversation's next turn, or the
    first turn of the next conversation not yet given out when its own is over (or a turn failed: the user
    leaves that conversation). A level of `total` requests starts every user (one request kept for each user
    that has no conversation yet) and then runs whole conversations: a user opens a new one only with the
    requests the others' open conversations do not still need, cut to what is left, and leaves when none are. Conversation i is the same in every cell, rep and engine; which user holds it depends
    on who is free first."""

    def __init__(self, turns: int, think: ThinkTime = ThinkTime(), total: int | None = None, seed: int = 0,
                 rep: int = 0, users: int = 1, tag: str = ""):
        if turns < 1:
            raise ValueError(f"turns must be at least 1 (got {turns})")
        self.turns = turns
        self.think = think
        self.total = total
        self.seed = seed
        self.rep = rep
        self.tag = tag
        self.issued = 0
        self.users = max(1, users)
        self._users: list[_User] = []
        self._flight: dict[int, _User] = {}  # request id → its user
        self._sessions = 0  # conversations given out

    def describe(self) -> str:
        return f"closed loop, {self.users} users in sessions of up to {self.turns} turns, {self.think.describe()}"

    def exhausted(self) -> bool:
        return self.total is not None and self.issued >= self.total

    def _grow(self, now_ns: int) -> None:
        while len(self._users) < self.users:
            self._users.append(_User(len(self._users), due_ns=now_ns))
        for u in self._users[:self.users]:  # one that left a lower user count comes back, to a new conversation
            if u.retired:
                u.retired, u.turns, u.sent, u.due_ns = False, [], 0, now_ns

    def due_turns(self, now_ns: int, workload: Workload, max_tokens: int) -> list[DueTurn]:
        self._grow(now_ns)
        out = []
        for u in sorted((u for u in self._users if u.due_ns is not None and u.due_ns <= now_ns),
                        key=lambda u: (u.due_ns, u.idx)):
            if self.exhausted():
                break
            if u.idx >= self.users:  # fewer users now: this one leaves
                u.due_ns, u.retired, u.turns = None, True, u.turns[:u.sent]
                continue
            if not u.owed():  # no conversation yet, or its last turn is done: the next one
                # every user asked starts a conversation (one request kept for each that has none yet), so a
                # total that is not a multiple of users × turns cuts conversations short, not users
                unstarted = sum(1 for v in self._users[:self.users] if v is not u and not v.session and not v.done)
                left = (None if self.total is None else
                        self.total - self.issued - sum(v.owed() for v in self._users if v is not u)
                        - min(unstarted, max(0, self.total - self.issued - 1)))
                if left is not None and left <= 0:  # the others' conversations need every request left
                    u.due_ns, u.done, u.turns = None, True, []
                    continue
                u.session, u.sent, u.history = self._sessions + 1, 0, []
                u.turns = conversation(workload, self._sessions, self.turns, max_tokens)[:left]
                self._sessions += 1
            t = u.turns[u.sent]
            assert u.due_ns is not None  # every user taken above is due (the branches that clear it continue)
            out.append(DueTurn(u.due_ns, Prompt(t.prompt_id, text=transcript(u.history, t.message)), t.max_tokens,
                               u.session, u.sent + 1, f"{self.tag}{u.session}", messages(u.history, t.message),
                               u.idx))
            u.sent += 1
            u.due_ns, u.in_flight = None, True
            self.issued += 1
        return out

    def sent(self, request_id: int, turn: DueTurn) -> None:
        self._flight[request_id] = self._users[turn.user]

    def finished(self, request_id: int, answer: str | None, t_done_ns: int) -> None:
        """The answer to request `request_id` ended at t_done_ns: its text (None: the request failed, and the
        user leaves the conversation). The user's next request is due after its think time."""
        u = self._flight.pop(request_id, None)
        if u is None:
            return
        u.in_flight = False
        done_turn = u.sent
        if answer is None:
            u.turns = u.turns[:u.sent]  # its conversation ends here
        else:
            u.history.append((u.turns[u.sent - 1].message, answer))
        u.due_ns = t_done_ns + round(self.think.draw(self.seed, self.rep, u.session, done_turn) * 1e9)

    def next_wakeup_ns(self) -> int | None:
        if self.exhausted():
            return None
        return min((u.due_ns for u in self._users[:self.users] if u.due_ns is not None), default=None)

    def resume(self, now_ns: int) -> None:
        """After a pause, a turn due during it is due now (the pause is not counted in its TTFT)."""
        for u in self._users:
            if u.due_ns is not None and u.due_ns < now_ns:
                u.due_ns = now_ns

    def due(self, now_ns: int, outstanding: int) -> list[int]:
        raise TypeError("Sessions make their own requests: RequestMaker asks due_turns()")


@dataclass(frozen=True)
class SessionSpec:
    """--turns and --think-time as asked; make() gives one level's Sessions."""

    turns: int
    think: ThinkTime = ThinkTime()
    seed: int = 0

    def describe(self) -> str:
        return f"sessions of up to {self.turns} turns, {self.think.describe()}, history: the server's answers"

    def make(self, users: int, total: int | None, rep: int = 0, tag: str = "") -> Sessions:
        return Sessions(self.turns, self.think, total, self.seed, rep, users, tag)


def _p(values: Sequence[float], q: float) -> float:
    """A percentile of values that are there (a turn's group holds its requests)."""
    p = M.percentile(values, q)
    assert p is not None
    return p


class _TurnTTFT(TypedDict):
    n: int
    median_ttft_ms: float
    p99_ttft_ms: float


class TurnTTFT(_TurnTTFT, total=False):
    """One turn's figures (ttft_by_turn), ms; the prompt's tokens p50, and the tokens the server prefilled and
    took from its cache p50, where known."""

    median_prompt_tokens: float
    median_prefilled_tokens: float
    median_cached_tokens: float


# llama-server's timings keys → the turn's figure of their p50
SERVER_TOKENS: tuple[tuple[str, Literal["median_prefilled_tokens", "median_cached_tokens"]], ...] = (
    ("prompt_n", "median_prefilled_tokens"), ("cache_n", "median_cached_tokens"))


def ttft_by_turn(records: Iterable[RequestRecord]) -> dict[str, TurnTTFT]:
    """Per turn number (1-based, as a string key): ok requests, queue-inclusive TTFT p50 and p99 (ms), the
    prompt's tokens p50, and where the server said so (llama-server's timings) the tokens it prefilled and the
    tokens it took from its cache, p50. Empty without session records."""
    groups: dict[int, list[RequestRecord]] = {}
    for r in M.ok(records):
        if r.turn is not None:
            groups.setdefault(r.turn, []).append(r)
    out: dict[str, TurnTTFT] = {}
    for turn, rs in sorted(groups.items()):
        timings = [(r.server_view or {}).get("timings") or {} for r in rs]
        fig: TurnTTFT = {"n": len(rs), "median_ttft_ms": _p([M.ttft(r) for r in rs], 50) * 1e3,
                         "p99_ttft_ms": _p([M.ttft(r) for r in rs], 99) * 1e3}
        prompts = [r.prompt_tokens for r in rs if r.prompt_tokens is not None]
        if prompts:
            fig["median_prompt_tokens"] = _p(prompts, 50)
        for key, name in SERVER_TOKENS:
            vals = [t[key] for t in timings if isinstance(t.get(key), (int, float))]
            if len(vals) == len(rs):
                fig[name] = _p(vals, 50)
        out[str(turn)] = fig
    return out


def prefix_cache_label(records: Iterable[RequestRecord]) -> str | None:
    """off | on | shared:N, as the records' HTTP source said (None: not said)."""
    for r in records:
        said: str | None = (r.extra or {}).get("prefix_cache")  # a PrefixCache.describe() line
        if said:
            return "shared:" + said.split(":")[1] if said.startswith("shared:") else said.split(":", 1)[0]
    return None


class TurnFigures(Protocol):
    """A cell's multi-turn figures (control/bench/cell.Turns)."""

    @property
    def ttft_by_turn(self) -> dict[str, TurnTTFT] | None: ...

    @property
    def prefix_cache(self) -> str | None: ...


def turn_note(turns: TurnFigures) -> str:
    """The bench table's and report's note: TTFT p50 by turn, labelled with the prefix-cache setting."""
    by_turn = turns.ttft_by_turn
    if not by_turn:
        return ""
    label = f" (prefix cache {turns.prefix_cache})" if turns.prefix_cache else ""
    ttft = " ".join(f"{t}:{v['median_ttft_ms']:.0f}" for t, v in by_turn.items())
    note = f" TTFT p50 by turn{label} {ttft} ms"
    if all("median_prefilled_tokens" in v and "median_prompt_tokens" in v for v in by_turn.values()):
        note += "; prefilled/prompt tokens " + " ".join(
            f"{t}:{v['median_prefilled_tokens']:.0f}/{v['median_prompt_tokens']:.0f}" for t, v in by_turn.items())
    return note


__all__ = ["Sessions", "SessionSpec", "SessionError", "ThinkTime", "Turn", "parse_think", "conversation",
           "transcript", "messages", "ttft_by_turn", "TurnTTFT", "prefix_cache_label", "turn_note", "words"]
