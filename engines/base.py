"""The one protocol every engine implements.

An engine lives inside one worker process: load, warm up, then generate requests one at a time as a
stream of (token id, perf_counter_ns) pairs stamped the moment each id is produced.
"""
from __future__ import annotations

from collections.abc import Generator, Hashable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


class EngineError(Exception):
    """A failure the user can act on: the message is one line that says what and what to do."""


@dataclass(frozen=True)
class EngineSpec:
    """Everything a worker process needs to build its engine (picklable, sent over spawn)."""

    engine: str  # "llama" | "mlx"
    model_path: str
    threads: int = 1
    ctx: int = 2048
    seed: int = 0
    flash_attn: bool = True  # on CPU too: ≈10 % faster at B=1, ≈17 % at B=16 here
    n_gpu_layers: int | None = None  # llama.cpp: layers offloaded to its GPU backend (None: all where it has one)
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Prompt:
    """What a request asks for: a text, or a synthetic prompt of exactly `synthetic_tokens` tokens."""

    prompt_id: str
    text: str | None = None
    synthetic_tokens: int | None = None


# Synthetic prompts: BOS, then this English text tokenized and repeated, cut to exactly N tokens.
FILLER = (
    "The quick brown fox jumps over the lazy dog while the committee reviews the quarterly numbers, "
    "and every engineer on the team measures tokens per second, memory bandwidth and latency again. "
)


def synthetic_ids(bos: list[int], filler: list[int], n: int) -> list[int]:
    """Exactly n prompt ids: the tokenizer's BOS (if any), then the tokenized FILLER repeated."""
    if not filler:
        raise EngineError("the tokenizer turned the filler text into no tokens")
    out = list(bos)
    while len(out) < n:
        out.extend(filler)
    return out[:n]


def check_room(n_prompt: int, max_tokens: int, room: int, where: str) -> None:
    """A request must fit its sequence's context: prompt + max_tokens ≤ room (`where` names that room)."""
    need = n_prompt + max_tokens
    if need > room:
        raise EngineError(f"prompt of {n_prompt} tokens + max_tokens {max_tokens} = {need} exceeds {where} "
                          "(raise --ctx or lower --max-tokens)")


# A generate() stream: (token_id, t_ns) per token; its return value is the finish reason ("length" | "stop").
TokenStream = Generator[tuple[int, int], None, str]
# One step of a continuous batch: (t_ns, [(key, token_id)], [(key, finish_reason)]), each key as the caller
# added it (any hashable: request ids, warmup tuples).
BatchStep = tuple[int, list[tuple[Any, int]], list[tuple[Any, str]]]


class Batch(Protocol):
    """A continuous batch of up to b_cap sequences of ctx_per_seq tokens each, under the caller's keys."""

    @property
    def b_cap(self) -> int: ...

    @property
    def ctx_per_seq(self) -> int: ...

    @property
    def seqs(self) -> Mapping[Any, object]: ...  # the sequences held, by key

    def active(self) -> int: ...

    def add(self, key: Hashable, prompt: list[int], max_tokens: int, ignore_eos: bool) -> None: ...

    def step(self) -> BatchStep: ...

    def remove(self, key: Hashable) -> None: ...

    def close(self) -> None: ...


class Engine(Protocol):
    name: str

    def load(self) -> None: ...

    def warmup(self) -> None:
        """One warmup request; the worker runs two before it reports ready."""
        ...

    def tokenize(self, prompt: Prompt) -> list[int]: ...

    def generate(self, tokens: list[int], max_tokens: int, ignore_eos: bool) -> TokenStream:
        """Yield (token_id, t_ns) per generated token; return the finish reason ("length" | "stop")."""
        ...

    def set_threads(self, n: int) -> None: ...

    def batch(self, b_cap: int, ctx_per_seq: int | None = None) -> Batch:
        """Where the engine can: a continuous batch of up to b_cap sequences with add(key, tokens,
        max_tokens, ignore_eos), step() → (t_ns, [(key, token_id)], [(key, finish_reason)]), remove(key),
        active(). One step decodes one token of every sequence; all of a step's tokens share its t_ns."""
        ...

    def close(self) -> None: ...
