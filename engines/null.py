"""The null engine: a harness-calibration engine with no model. Its numbers are the schedule, not a measurement.

Tokens come on a fixed schedule set by `spec.options`: the first `ttft_s` (default 0.02) after
generate() starts, then one every `itl_s` (default 0.01). Real engines' gaps vary, and their first (the step
after the prefill) is often unlike the rest: `itl_cv` (default 0) draws the gaps from a gamma distribution of
mean `itl_s` and that coefficient of variation, and `first_gap_s` sets the first (`gap_schedule`; `gap_seed`:
its seed). The draws are by position, the same for every request: a run's truth still follows from the schedule. Each token is stamped with perf_counter_ns()
the moment it is emitted, after sleeping until its due time (time.sleep for the bulk, then a spin of
under 1 ms). Whatever a run over this engine reports beyond the schedule is the harness's own overhead:
its queues, its clocks, its bookkeeping. It never emits EOS, so every request finishes with "length". Its answers are the same ids
for every prompt (output_id), except where a test plants a change (changed_at).

The batch (NullBatch) has the interface of engines/llama_cpp.py's LlamaBatch. A step takes `itl_s`
from the moment step() is called, whatever the batch size, and emits one token for every sequence
that has started, all stamped with the step's time; a sequence starts at the first step whose time is
≥ its add() time + `ttft_s`. Time the caller spends between steps therefore adds to the measured ITL,
as it would with a real engine: that excess is the harness's per-step cost.
"""
from __future__ import annotations

import os
import signal
import time
import zlib
from collections.abc import Hashable
from typing import Any

from engines.base import FILLER, BatchStep, EngineError, EngineSpec, Prompt, TokenStream, check_room, synthetic_ids
from engines.spec import EngineDecl

# measured under the embedded llama model's run plan (its load, its context), with no model of its own
NULL = EngineDecl("null", "null", "in-process", factory="engines.null:NullEngine", plan_as="llama", simulated=True)

BOS = 2
VOCAB = 32000  # ids of words fall in [3, VOCAB)
SPIN_NS = 800_000  # the last < 1 ms before a due time is spun, not slept


def word_id(word: str) -> int:
    """A deterministic id for one whitespace-separated word (the same in every process: crc32, not hash())."""
    return 3 + zlib.crc32(word.encode("utf-8")) % (VOCAB - 3)


def text_ids(text: str, bos: bool = True) -> list[int]:
    """BOS (if asked) plus one id per whitespace-separated word."""
    return ([BOS] if bos else []) + [word_id(w) for w in text.split()]


def output_id(i: int) -> int:
    """The id of the i-th generated token (0-based): deterministic, never BOS."""
    return 3 + (i * 7919) % (VOCAB - 3)


def changed_at(tokens: list[int], options: dict[str, Any]) -> int | None:
    """A planted change (tests of compare's answers, issue 58): options change_token P (1-based) alters the P-th
    token of the answer to every prompt whose ids sum to a multiple of change_every (default 1: every prompt).
    The 0-based position it alters in the answer to this prompt, or None."""
    p = options.get("change_token")
    if p is None:
        return None
    every = int(options.get("change_every", 1))
    if int(p) < 1 or every < 1:
        raise EngineError(f"null engine options change_token={p!r}, change_every={every}: give positive whole numbers")
    return int(p) - 1 if sum(tokens) % every == 0 else None


def answer_id(i: int, changed: int | None) -> int:
    """output_id(i), or another id where i is the position a planted change alters (changed_at)."""
    return output_id(i) if i != changed else 3 + (output_id(i) - 2) % (VOCAB - 3)


def gap_schedule(itl_s: float, n: int, *, first_s: float | None = None, cv: float = 0.0,
                 seed: int = 0) -> list[float]:
    """The gaps (seconds) between a request's consecutive tokens 0…n−1, by position: gap i lies between token i
    and i + 1. Each is `itl_s` (cv 0), or drawn from a gamma distribution of mean itl_s and coefficient of variation
    `cv` (shape 1/cv², random.Random(seed): the same list in every process); the first is `first_s` where given."""
    import random

    rng = random.Random(seed)
    gaps = [itl_s if cv <= 0 or itl_s <= 0 else rng.gammavariate(1 / cv ** 2, itl_s * cv ** 2)
            for _ in range(max(0, n - 1))]
    if gaps and first_s is not None:
        gaps[0] = first_s
    return gaps


def offsets_ns(itl_ns: int, n: int, gaps_s: list[float] | None) -> list[int]:
    """Each token's due time after the first (ns): i × itl_ns, or the gaps' running sum where they vary."""
    if gaps_s is None:
        return [i * itl_ns for i in range(n)]
    out, t = [0], 0.0
    for i in range(1, n):
        t += gaps_s[i - 1] if i - 1 < len(gaps_s) else itl_ns / 1e9
        out.append(round(t * 1e9))
    return out


def sleep_until(due_ns: int) -> int:
    """Sleep until perf_counter_ns() ≥ due_ns (sleep the bulk, spin the last < 1 ms); return the time then."""
    now = time.perf_counter_ns()
    left = due_ns - now
    if left > SPIN_NS:
        time.sleep((left - SPIN_NS) / 1e9)
    now = time.perf_counter_ns()
    while now < due_ns:
        now = time.perf_counter_ns()
    return now


CRASH_POINTS = ("load", "warmup", "generate", "batch", "batch_step")


def _crash_if(spec: EngineSpec, point: str) -> None:
    """Fault injection for tests: options crash_in=<point> ends this process with a signal there
    (crash_signal, default SIGSEGV: what a memory-safety bug in an engine's C code does), as a real
    engine's crash would: no exception, the process is gone (a faulthandler, where one is enabled, writes
    the Python stack first and the process still ends by the signal)."""
    if spec.options.get("crash_in") == point:
        sig = getattr(signal, str(spec.options.get("crash_signal", "SIGSEGV")))
        os.kill(os.getpid(), sig)
        time.sleep(10)  # not reached: the signal ends the process


def _seconds(options: dict[str, Any], key: str, default: float) -> float:
    try:
        v = float(options.get(key, default))
    except (TypeError, ValueError):
        raise EngineError(f"null engine option {key}={options.get(key)!r} is not a number of seconds") from None
    if v < 0:
        raise EngineError(f"null engine option {key}={v:g} must be ≥ 0 seconds")
    return v


class NullEngine:
    name = "null"

    def __init__(self, spec: EngineSpec):
        self.spec = spec
        self.ttft_s = _seconds(spec.options, "ttft_s", 0.02)
        self.itl_s = _seconds(spec.options, "itl_s", 0.01)
        self.ttft_ns = round(self.ttft_s * 1e9)
        self.itl_ns = round(self.itl_s * 1e9)
        cv = _seconds(spec.options, "itl_cv", 0.0)
        first = spec.options.get("first_gap_s")
        # gaps that vary (a first gap unlike the rest, or drawn): each position's, drawn once (gap_schedule)
        self._vary = (cv, None if first is None else _seconds(spec.options, "first_gap_s", 0.0),
                      int(spec.options.get("gap_seed", 0))) if cv > 0 or first is not None else None
        self._batch: NullBatch | None = None
        self._warming, self._generates = False, 0
        crash_in = spec.options.get("crash_in")
        if crash_in is not None and crash_in not in CRASH_POINTS:
            raise EngineError(f"null engine option crash_in={crash_in!r}: choose one of {', '.join(CRASH_POINTS)}")

    def load(self) -> None:
        """Instant, or `load_s` seconds (options) to stand for a model load (fault tests kill a worker in it)."""
        time.sleep(_seconds(self.spec.options, "load_s", 0.0))
        _crash_if(self.spec, "load")

    def warmup(self) -> None:
        """One short generate: 2 tokens."""
        _crash_if(self.spec, "warmup")
        self._warming = True
        try:
            for _ in self.generate(self.tokenize(Prompt("warmup", text="Warm up.")), 2, True):
                pass
        finally:
            self._warming = False

    def tokenize(self, prompt: Prompt) -> list[int]:
        """synthetic_tokens=N → exactly N ids (BOS, then FILLER's word ids repeated); text → BOS + one id
        per word. Never empty."""
        if prompt.synthetic_tokens:
            return synthetic_ids([BOS], text_ids(FILLER, bos=False), prompt.synthetic_tokens)
        return text_ids(prompt.text or "")

    def detokenize(self, ids: list[int]) -> str:
        return " ".join(f"t{i}" for i in ids)

    def generate(self, tokens: list[int], max_tokens: int, ignore_eos: bool) -> TokenStream:
        """Token i (0-based) is due at start + ttft + i·itl (or the first i gaps of gap_schedule, where they vary),
        start being the first next() on this generator."""
        check_room(len(tokens), max_tokens, self.spec.ctx, f"the context of {self.spec.ctx} tokens")
        if not self._warming:
            self._generates += 1
            if self._generates >= int(self.spec.options.get("crash_nth", 1)):  # the n-th request's generate
                _crash_if(self.spec, "generate")
        start = time.perf_counter_ns()
        first = start + self.ttft_ns
        gaps = None
        if self._vary is not None:
            cv, first_s, seed = self._vary
            gaps = gap_schedule(self.itl_s, max_tokens, first_s=first_s, cv=cv, seed=seed)
        due = offsets_ns(self.itl_ns, max_tokens, gaps)
        changed = changed_at(tokens, self.spec.options)
        for i in range(max_tokens):
            t = sleep_until(first + due[i])
            yield answer_id(i, changed), t
        return "length"

    def set_threads(self, n: int) -> None:
        pass

    def batch(self, b_cap: int, ctx_per_seq: int | None = None) -> NullBatch:
        """A continuous batch of up to b_cap sequences (kept while b_cap and ctx_per_seq stay the same)."""
        ctx_per_seq = ctx_per_seq or self.spec.ctx
        _crash_if(self.spec, "batch")
        if self._batch is None or (self._batch.b_cap, self._batch.ctx_per_seq) != (b_cap, ctx_per_seq):
            self._batch = NullBatch(self, b_cap, ctx_per_seq)
        return self._batch

    def close(self) -> None:
        self._batch = None


class _NullSeq:
    __slots__ = ("key", "max_tokens", "t_added_ns", "due_ns", "generated", "changed")

    def __init__(self, key: Hashable, max_tokens: int, t_added_ns: int, due_ns: int, changed: int | None = None):
        self.key, self.max_tokens = key, max_tokens
        self.t_added_ns, self.due_ns = t_added_ns, due_ns  # due_ns: no token from a step before this time
        self.generated = 0
        self.changed = changed  # the answer's position a planted change alters (changed_at)


class NullBatch:
    """LlamaBatch's interface on the null schedule: add, step, remove, active; b_cap and seqs."""

    def __init__(self, engine: NullEngine, b_cap: int, ctx_per_seq: int):
        self.engine = engine
        self.b_cap = b_cap
        self.ctx_per_seq = ctx_per_seq
        self.seqs: dict[Hashable, _NullSeq] = {}

    def active(self) -> int:
        return len(self.seqs)

    def add(self, key: Hashable, prompt: list[int], max_tokens: int, ignore_eos: bool) -> None:
        check_room(len(prompt), max_tokens, self.ctx_per_seq,
                   f"the {self.ctx_per_seq} tokens each of B≤{self.b_cap} sequences gets")
        if len(self.seqs) >= self.b_cap:
            raise EngineError(f"all {self.b_cap} sequence slots are busy")
        t = time.perf_counter_ns()
        self.seqs[key] = _NullSeq(key, max_tokens, t, t + self.engine.ttft_ns, changed_at(prompt, self.engine.spec.options))

    def step(self) -> BatchStep:
        """One step of itl_s. Returns (t_ns, [(key, token_id)], [(key, finish_reason)]); an empty batch
        returns at once with nothing."""
        now = time.perf_counter_ns()
        if not self.seqs:
            return now, [], []
        _crash_if(self.engine.spec, "batch_step")
        t = sleep_until(now + self.engine.itl_ns)
        tokens: list[tuple[Any, int]] = []
        finished: list[tuple[Any, str]] = []
        for s in list(self.seqs.values()):
            if t < s.due_ns:
                continue  # still in its TTFT
            tokens.append((s.key, answer_id(s.generated, s.changed)))
            s.generated += 1
            if s.generated >= s.max_tokens:
                finished.append((s.key, "length"))
        for key, _ in finished:
            self.remove(key)
        return t, tokens, finished

    def remove(self, key: Hashable) -> None:
        self.seqs.pop(key, None)

    def close(self) -> None:
        self.seqs.clear()
