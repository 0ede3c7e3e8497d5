"""What the dispatcher sends and when: prompt sets, closed-loop users and open-loop Poisson arrivals (more
open-loop patterns and trace times in arrivals.py; files and length distributions in datasets.py)."""
from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from measure.core.arrivals import Arrivals, IndexedArrivals, TurnArrivals
from measure.core.datasets import request_for
from measure.core.records import Request
from presets import Workload


@dataclass(frozen=True)
class PrefixCache:
    """How a request's prompt meets a server's prompt cache (--prefix-cache).

    off (default): every prompt starts with a short unique prefix naming the request, and the server is
      asked not to cache (`cache_prompt: false`), so TTFT always includes the prefill;
    on: prompts as they are, the server's cache left on (repeated prompts are served from it);
    shared:N: every prompt starts with the same N-word block, then its unique prefix: a controlled hit rate.
    A multi-turn session's turn (docs/design/sessions.md) under on or shared:N starts with a prefix naming its
    session instead of the request, so its turns share a prefix and two sessions never do.
    """

    policy: str = "off"  # off | on | shared
    shared_words: int = 0

    @classmethod
    def parse(cls, text: str | None) -> PrefixCache:
        t = (text or "off").strip().lower()
        if t in ("off", "on"):
            return cls(t)
        if t.startswith("shared:"):
            try:
                n = int(t.split(":", 1)[1])
            except ValueError:
                n = 0
            if n > 0:
                return cls("shared", n)
        raise ValueError(f"--prefix-cache {text!r}: write off (the default), on, or shared:N with N words of "
                         "shared prefix, e.g. shared:256")

    def describe(self) -> str:
        return {"off": "off: a unique prefix per request, cache_prompt false",
                "on": "on: prompts as they are, the server's cache on"}.get(
            self.policy, f"shared:{self.shared_words}: {self.shared_words} shared words, then a unique prefix")

    @property
    def cache_prompt(self) -> bool:
        return self.policy != "off"

    def apply(self, text: str, run_id: str, request_id: int, session: str | None = None) -> tuple[str, str]:
        """(the prompt to send, the prefix put before it). `session`: the key of a multi-turn session's turn."""
        if self.policy == "on" and session is None:
            return text, ""
        prefix = (f"[session {run_id}-{session}] " if session is not None and self.policy != "off"
                  else f"[request {run_id}-{request_id}] ")
        if self.policy == "shared":
            prefix = ("shared " * self.shared_words) + prefix
        return prefix + text, prefix


@dataclass
class Load:
    """A load to serve: which prompts, when they arrive (any arrivals.Arrivals: ClosedLoop, Poisson, an
    arrivals.Schedule, a client's clients.Segment of one, or multi-turn sessions.Sessions), how long each answer
    is (`max_tokens`, unless the workload gives each request its own)."""

    workload: Workload
    arrivals: Arrivals
    max_tokens: int
    ignore_eos: bool = True


class RequestMaker:
    """Turns a load's arrivals into Requests, the same way for every load source. Request ids run on across
    loads; the prompt sequence starts again with each new load, so every cell and rep of a sweep sends the
    same prompt mix whatever ran before it."""

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns):
        self.load: Load | None = None
        self._clock = clock  # t_submitted_ns: when a request was put out (its lateness against t_scheduled_ns)
        self._ids = itertools.count(1)
        self._id_base = 0  # a segment's ids: base + its index in the whole schedule + 1
        self._prompt_index = itertools.count()
        self._loads = 0  # loads set so far: a session's key names its load, so no later load shares its prefix

    def number_from(self, first_id: int, step: int = 1) -> None:
        """Request ids run first_id, first_id + step … from here (a pool's process takes every step-th id)."""
        self._ids = itertools.count(first_id, step)

    def set_load(self, load: Load | None) -> None:
        self.load = load
        if load is not None and isinstance(load.arrivals, IndexedArrivals):
            # a client's segment of one schedule (core/clients.py) or a process's share of a closed loop: request
            # i of the whole has id base + i + 1; ids run on past all of it (an endless one: far past)
            full = load.arrivals.full_total
            self._id_base = next(self._ids) - 1
            self._ids = itertools.count(self._id_base + (full if full is not None else 1 << 40) + 1)
        self._prompt_index = itertools.count()
        self._loads += 1

    def due(self, now_ns: int, outstanding: int, *, rep: int, k: int, b: int, mode: str) -> list[Request]:
        if self.load is None:
            return []
        ld = self.load
        out = []
        if isinstance(arr := ld.arrivals, TurnArrivals):  # multi-turn sessions, a trace's follow-ups
            for t in arr.due_turns(now_ns, ld.workload, ld.max_tokens):
                req = Request(next(self._ids), t.prompt, t.max_tokens, ld.ignore_eos, t_scheduled_ns=t.t_scheduled_ns,
                              rep=rep, k=k, b=b, mode=mode, session=t.session, turn=t.turn,
                              session_key=f"{self._loads}.{t.key}" if t.key else None, messages=t.messages)
                arr.sent(req.request_id, t)
                req.t_submitted_ns = self._clock()
                out.append(req)
            return out
        due: list[tuple[int | None, int]] = []  # a segment: each request's index in the schedule
        if isinstance(arr, IndexedArrivals):
            due += arr.due_indexed(now_ns, outstanding)
        else:
            due += [(None, t) for t in arr.due(now_ns, outstanding)]
        for index, t_sched in due:
            i = next(self._prompt_index) if index is None else index
            prompt, max_tokens = request_for(ld.workload, i, ld.max_tokens)
            rid = next(self._ids) if index is None else self._id_base + index + 1
            req = Request(rid, prompt, max_tokens, ld.ignore_eos, t_scheduled_ns=t_sched, rep=rep, k=k, b=b,
                          mode=mode)
            req.t_submitted_ns = self._clock()
            out.append(req)
        return out

    def next_wakeup_ns(self) -> int | None:
        return self.load.arrivals.next_wakeup_ns() if self.load else None

    def finished(self, req: Request, answer: str | None, t_done_ns: int) -> None:
        """A request ended (answer: its text; None: it failed). A multi-turn session's user takes it into its
        history and thinks before its next turn; other arrivals need not know."""
        if self.load and req.session is not None and isinstance(arr := self.load.arrivals, TurnArrivals):
            arr.finished(req.request_id, answer, t_done_ns)

    def set_users(self, users: int) -> None:
        """Closed-loop users, in sessions or not (an open loop has none to set)."""
        if self.load and isinstance(arr := self.load.arrivals, (ClosedLoop, TurnArrivals)):
            arr.users = max(1, users)

    def resume(self, now_ns: int) -> None:
        if self.load:
            self.load.arrivals.resume(now_ns)


def closed_loop_users(mode: str, k: int, b: int, users: int | None = None) -> int:
    """A closed loop's users, the one rule (bench cells, the dashboard, a source's own count as workers get
    ready): `users` where given (--users), else every stream the level can serve at once: K × B (K in
    instances mode, where B is 1; over HTTP, B streams per endpoint)."""
    return users or k * (1 if mode == "instances" else b)


class ClosedLoop:
    """U users, each sending its next request the moment its last one ends (scheduled = now)."""

    def __init__(self, users: int, total: int | None = None):
        if users < 1:
            raise ValueError(f"users must be at least 1 (got {users})")
        self.users = users
        self.total = total
        self.issued = 0
        self.start_ns: int | None = None  # --start-at: no user starts before this (core/clients.py)

    def describe(self) -> str:
        return f"closed loop, {self.users} users"

    def due(self, now_ns: int, outstanding: int) -> list[int]:
        if self.start_ns is not None and now_ns < self.start_ns:
            return []
        n = max(0, self.users - outstanding)
        if self.total is not None:
            n = min(n, self.total - self.issued)
        self.issued += n
        return [now_ns] * n

    def next_wakeup_ns(self) -> int | None:
        return self.start_ns if self.start_ns is not None and self.issued == 0 else None

    def resume(self, now_ns: int) -> None:
        pass

    def exhausted(self) -> bool:
        return self.total is not None and self.issued >= self.total


class ClosedShare(IndexedArrivals):
    """One client process's share of a closed loop of `all_users` users and `total` requests (sources/http_pool.py):
    user u (0-based, of all) sends the requests of index u, u + U, u + 2U … (below `total`), each the moment the
    last one of this share ended, so request i keeps its index, id and prompt whatever the number of processes,
    and each process's users stay in flight for their share of the whole (not for an equal split of the total).
    Its users are those given; `full_total` is the whole loop's count (the dispatcher takes request ids from the
    indices, as for a clients.Segment)."""

    def __init__(self, users: Sequence[int], all_users: int, total: int | None, start_ns: int | None = None):
        if not users or all_users < 1 or any(not 0 <= u < all_users for u in users):
            raise ValueError(f"a closed-loop share needs users among 0..{all_users - 1} (got {list(users)})")
        self._mine = sorted(users)
        self.all_users = all_users
        self.users = len(self._mine)
        self.full_total = total
        self.total = (None if total is None else
                      sum(len(range(u, total, all_users)) for u in self._mine))
        self.issued = 0
        self.start_ns = start_ns
        self._at = 0  # the next of this share's requests: round self._at // users, its user self._at % users

    def _next_index(self) -> int | None:
        """This share's next request index (users in turn, round after round), None past the total."""
        j, pos = divmod(self._at, self.users)
        i = self._mine[pos] + j * self.all_users
        if self.full_total is not None and i >= self.full_total:
            return None
        self._at += 1
        return i

    def describe(self) -> str:
        return f"closed loop, {self.users} of {self.all_users} users"

    def due_indexed(self, now_ns: int, outstanding: int) -> list[tuple[int, int]]:
        if self.start_ns is not None and now_ns < self.start_ns:
            return []
        out = []
        for _ in range(max(0, self.users - outstanding)):
            i = self._next_index()
            if i is None:
                break
            out.append((i, now_ns))
            self.issued += 1
        return out

    def due(self, now_ns: int, outstanding: int) -> list[int]:
        return [t for _, t in self.due_indexed(now_ns, outstanding)]

    def next_wakeup_ns(self) -> int | None:
        return self.start_ns if self.start_ns is not None and self.issued == 0 else None

    def resume(self, now_ns: int) -> None:
        pass

    def exhausted(self) -> bool:
        return self.total is not None and self.issued >= self.total


def is_open_loop(arrivals: object) -> bool:
    """Arrivals on a schedule of their own (Poisson, a Schedule, a trace, a segment of one): not users who wait
    for their answers (a closed loop, a share of one, sessions). A client never caps an open loop by itself."""
    return not isinstance(arrivals, (ClosedLoop, ClosedShare, TurnArrivals))


class Poisson:
    """Open loop: arrivals at `rate` requests/s with exponential gaps, whatever the server does.

    Each request keeps the time the arrival process wanted it sent, so TTFT counts the queue.
    """

    def __init__(self, rate: float, total: int | None = None, seed: int = 0):
        if not rate > 0:
            raise ValueError(f"rate must be a positive number of requests per second (got {rate})")
        self.rate = rate
        self.total = total
        self.issued = 0
        self._rng = random.Random(seed)
        self._next: int | None = None

    def describe(self) -> str:
        return f"open loop, Poisson {self.rate:g} req/s"

    def part(self, fraction: float) -> Poisson:
        """An independent Poisson stream at `fraction` of this rate, endless, its seed drawn from this one's
        generator: parts whose fractions sum to 1 superpose to a Poisson stream at the whole rate (a live
        dashboard's clients on several machines each send one, sources/ray_clients.py)."""
        if self.total is not None:
            raise ValueError("a finite Poisson schedule is split by index (clients.Segment), not by rate")
        return Poisson(self.rate * fraction, None, seed=self._rng.getrandbits(32))

    def _gap_ns(self) -> int:
        return int(self._rng.expovariate(self.rate) * 1e9)

    def due(self, now_ns: int, outstanding: int) -> list[int]:
        if self._next is None:
            self._next = now_ns
        out = []
        while self._next <= now_ns and not self.exhausted():
            out.append(self._next)
            self.issued += 1
            self._next += self._gap_ns()
        return out

    def next_wakeup_ns(self) -> int | None:
        return None if self.exhausted() else self._next

    def resume(self, now_ns: int) -> None:
        self._next = now_ns  # arrivals missed while paused are not replayed as a burst

    def exhausted(self) -> bool:
        return self.total is not None and self.issued >= self.total
