"""The candidate space of `inference-top tune` (docs/design/tune.md): the ways each engine takes concurrent
requests and its knobs (`Candidate`), the settings every candidate is measured under, the memory guard's
refusal and the roofline's prediction of each."""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from engines.registry import ENGINES as DECLARED
from engines.spec import EngineDecl, Knob
from measure.core.guard import DEFAULT_OVERHEAD_BYTES, EngineMemory, admit, engine_footprint

if TYPE_CHECKING:
    from measure.core.cost import Cost
    from measure.core.roofline import Machine, Prediction
    from measure.core.work import WorkModel
    from presets import SLO, Workload

ENGINES = tuple(sorted(name for name, d in DECLARED.items() if d.tune_modes))  # the engines tune takes
PRUNE = 0.5  # a shape whose predicted tok/s is under this share of the best predicted goodput is not measured
FIRST_ROUND = 8  # at most this many shapes run in the first round (the best predicted)
KV_BYTES = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}  # bytes per element of llama.cpp's KV cache types
UBATCH = 512  # llama-server's default physical batch (-ub)
PROMPT_CONCURRENCY = 8  # mlx_lm.server's default prompts prefilled at once (--prompt-concurrency)


class TuneError(ValueError):
    """A bad input for tune (one line: what was wrong, what to do)."""


def parse_budget(text: str) -> float:
    """--budget: 90 (seconds), 90s, 10m, 1.5h → seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text or "")
    if not m or float(m.group(1)) <= 0:
        raise TuneError(f"--budget {text!r}: give a time such as 600, 600s, 10m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def unavailable(engines: Sequence[str]) -> dict[str, str]:
    """The engines asked for that cannot run here, each with why in a few words: the Python module its
    declaration needs is not installed (vLLM where it is not). tune names them skipped, never silently."""
    import importlib.util

    out = {}
    for e in engines:
        d = DECLARED.get(e)
        if d is not None and d.needs and importlib.util.find_spec(d.needs) is None:
            out[e] = f"{d.needs} is not installed here (pip install {d.needs})"
    return out


def tuned(engine: str) -> EngineDecl:
    """The declaration of an engine tune takes (engines/spec.py: its modes, knobs and server command); TuneError,
    one line, for any other."""
    decl = DECLARED.get(engine)
    if decl is None or not decl.tune_modes:
        raise TuneError(f"--engine {engine}: tune takes {', '.join(ENGINES)}")
    return decl


@dataclass(frozen=True)
class Candidate:
    """One way to serve the model: the engine, how it takes concurrent requests, and its knobs."""

    engine: str  # an engine tune takes (ENGINES)
    mode: str  # its declaration's tune_modes: instances (K engines, one request each) | batch (K engines batching
    # B) | slots (a server's) | servers (K servers of B slots each behind one queue, least outstanding first)
    k: int = 1
    b: int = 1  # sequences per engine (batch) or llama-server's parallel slots; 1 for instances
    threads: int = 1
    flash_attn: bool = True
    kv_type: str = "f16"  # llama-server's -ctk/-ctv (in-process llama-cpp-python here keeps f16)
    ubatch: int = UBATCH  # llama-server's -ub
    prompt_concurrency: int = PROMPT_CONCURRENCY  # mlx_lm.server's --prompt-concurrency

    @property
    def decl(self) -> EngineDecl:
        return tuned(self.engine)

    @property
    def key(self) -> str:
        """Its name: the engine, the shape, and each knob its engine declares (a server: ×K, its slots)."""
        d = self.decl
        shown = {"flash_attn": f"fa={'on' if self.flash_attn else 'off'}", "kv_type": f"kv={self.kv_type}",
                 "ubatch": f"ub={self.ubatch}", "prompt_concurrency": f"pc={self.prompt_concurrency}"}
        tail = "".join(f" {shown[k]}" for k in d.tune_knobs)
        if d.starts_server:
            return f"{self.engine}{f' ×{self.k}' if self.k > 1 else ''} np={self.b} t={self.threads}{tail}"
        shape = f"K={self.k}" if self.mode == "instances" else f"K={self.k} B={self.b}"
        return f"{self.engine} {self.mode} {shape} t={self.threads}{tail}"

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9=_.-]+", "_", self.key)

    @property
    def shape(self) -> tuple[str, str, int, int, int]:
        return self.engine, self.mode, self.k, self.b, self.threads

    @property
    def default_knobs(self) -> bool:
        return (self.flash_attn and self.kv_type == "f16" and self.ubatch == UBATCH
                and self.prompt_concurrency == PROMPT_CONCURRENCY)

    @property
    def concurrency(self) -> int:
        """Requests served at once."""
        return self.k * (1 if self.mode == "instances" else self.b)

    @property
    def holds(self) -> tuple[int, int, int]:
        """What it holds: cores (K × threads), engines (each its own weights), sequences (KV)."""
        return (self.k * self.threads, self.k, self.concurrency)

    def variants(self) -> list[Candidate]:
        """The knobs the roofline does not see (those its engine declares), one changed at a time from this
        candidate's."""
        return [VARY[k](self) for k in self.decl.tune_knobs]

    def server_flags(self, ctx: int) -> list[str]:
        """Its server's flags for this candidate's slots and knobs (its declaration's server_flags)."""
        return SERVER_FLAGS[self.decl.server_flags](self, ctx)


def _llama_server_flags(c: Candidate, ctx: int) -> list[str]:
    """llama-server: N slots, -c the whole context (split over the slots), threads and the knobs."""
    return ["-np", str(c.b), "-c", str(ctx * c.b), "-t", str(c.threads), "-fa", "on" if c.flash_attn else "off",
            "-ctk", c.kv_type, "-ctv", c.kv_type, "-ub", str(c.ubatch)]


def _mlx_server_flags(c: Candidate, ctx: int) -> list[str]:
    """mlx_lm.server: B requests decoded at once, its prompts prefilled at most `prompt_concurrency` at once (its
    context grows as a request needs; its threads are OpenBLAS's, set in its environment: tune/runs.py)."""
    return ["--decode-concurrency", str(c.b), "--prompt-concurrency", str(c.prompt_concurrency)]


def _vllm_flags(c: Candidate, ctx: int) -> list[str]:
    """vLLM: B sequences at once, the context each request needs."""
    return ["--max-num-seqs", str(c.b), "--max-model-len", str(ctx)]


def _no_flags(c: Candidate, ctx: int) -> list[str]:
    raise TuneError(f"--engine {c.engine}: not a server tune starts")


SERVER_FLAGS: dict[str, Callable[[Candidate, int], list[str]]] = {
    "llama-server": _llama_server_flags, "mlx_lm.server": _mlx_server_flags, "vllm": _vllm_flags, "": _no_flags}

# each knob's one change from the defaults (flash attention flipped, the KV cache at q8_0, a smaller n_ubatch,
# one prompt prefilled at a time)
VARY: dict[Knob, Callable[[Candidate], Candidate]] = {
    "flash_attn": lambda c: replace(c, flash_attn=not c.flash_attn), "kv_type": lambda c: replace(c, kv_type="q8_0"),
    "ubatch": lambda c: replace(c, ubatch=128), "prompt_concurrency": lambda c: replace(c, prompt_concurrency=1)}


@dataclass
class Settings:
    """What every candidate is measured under: the same for all of them."""

    engines: list[str]
    users: int
    requests: int  # first round's requests per candidate (each later round doubles them)
    max_tokens: int
    ctx: int
    budget_s: float
    slo: SLO
    workload: Workload
    seed: int = 0
    ignore_eos: bool = True
    memory_budget: int | None = None
    cost: Cost | None = None
    first_round: int = FIRST_ROUND
    final_compare: bool = False  # the last step: the winner and the runner-up in turns (compare.py); the CLI's default
    prompt_tokens: int = 32  # the workload's typical prompt, for the roofline
    kv_bytes_per_token: float | None = None  # the winner's model's (the memory guard's), for its knee; not in tune.json


@dataclass
class Predicted:
    tps: float  # aggregate output tok/s for the closed loop of the settings' users
    ttft_s: float  # queue included
    tpot_s: float
    goodput_tps: float  # tps where TTFT and TPOT meet the SLO, else 0
    binding: str
    tps_range: tuple[float, float] | None = None  # a chip nobody measured: tps at its family's slowest, fastest


# ---- candidates ------------------------------------------------------------------------------------------
def _powers(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def candidates(engines: Sequence[str], cores: int, users: int, max_b: int = 16) -> list[Candidate]:
    """The shapes each engine takes (its declaration's tune_modes), default knobs: K instances (threads = cores ÷
    K, and half that where it declares tune_half_threads), K engines batching B (B up to the users each engine
    would hold), a server's slots (up to the users) and K servers behind one queue; nothing beyond the users (more
    streams than users are never used)."""
    out: list[Candidate] = []
    cores = max(1, cores)
    for engine in engines:
        d = tuned(engine)
        for mode in d.tune_modes:
            shapes = SHAPES[mode](cores, users, max_b, d.tune_half_threads)
            out += [Candidate(engine, mode, k, b, t) for k, b, t in shapes]
    return list(dict.fromkeys(out))


def _threads(cores: int, k: int, half: bool) -> list[int]:
    """Threads per engine of K: the cores dealt over them, and half that where the engine tries both."""
    t = max(1, cores // k)
    return sorted({t, max(1, t // 2)}, reverse=True) if half else [t]


Shape = tuple[int, int, int]  # (K, B, threads)


def _instances(cores: int, users: int, max_b: int, half: bool) -> list[Shape]:
    return [(k, 1, t) for k in range(1, min(cores, users) + 1) for t in _threads(cores, k, half)]


def _batch(cores: int, users: int, max_b: int, half: bool) -> list[Shape]:
    return [(k, b, max(1, cores // k)) for k in ((1, 2) if cores >= 2 else (1,))
            for b in _powers(min(max_b, -(-users // k))) if b >= 2]


def _slots(cores: int, users: int, max_b: int, half: bool) -> list[Shape]:
    return [(1, n, t) for n in sorted(set(_powers(users)) | {users}) for t in _threads(cores, 1, half)]


def _servers(cores: int, users: int, max_b: int, half: bool) -> list[Shape]:
    """Several servers behind one queue, the cores dealt over them."""
    return [(k, n, max(1, cores // k)) for k in _powers(min(cores, users))[1:] for n in _powers(-(-users // k))]


SHAPES: dict[str, Callable[[int, int, int, bool], list[Shape]]] = {
    "instances": _instances, "batch": _batch, "slots": _slots, "servers": _servers}


def memory_refusal(c: Candidate, ctx: int, weight_bytes: int, kv_per_token_f16: float, budget: int | None,
                   overhead: int = DEFAULT_OVERHEAD_BYTES) -> str | None:
    """Why the memory guard refuses this candidate (None: it fits the budget). llama-server is priced as one
    engine batching its slots, its KV at the cache type asked."""
    if not budget:
        return None
    kv = kv_per_token_f16 * KV_BYTES.get(c.kv_type, 2.0) / 2.0
    mode = "instances" if c.mode == "instances" else "batch"
    fp = engine_footprint(mode, c.k, c.b, EngineMemory(b_cap=c.b, seq_ctx=ctx, ctx=ctx, weight_bytes=weight_bytes,
                                                       kv_per_token=kv, overhead_bytes=overhead))
    return admit(fp, budget)


def roofline_predictor(work: WorkModel, machine: Machine, s: Settings) -> Callable[[Candidate], Predicted | None]:
    """The roofline's figures for a candidate under the settings' closed loop of U users: C = K × B requests
    served at once (slots: one engine batching them); each takes S = TTFT + (N − 1) × TPOT; tok/s =
    min(U, C) × N ÷ S; with U > C a request waits ≈ (U ÷ C − 1) × S before it starts (TTFT includes it).
    Goodput is that tok/s where TTFT and TPOT meet the SLO, else 0."""
    from measure.core.roofline import Lengths, predict, predict_range

    def run(c: Candidate) -> Predicted | None:
        mode = "instances" if c.mode == "instances" else "batch"
        b_eff = 1 if mode == "instances" else min(c.b, -(-s.users // c.k))
        at = Lengths(prompt_tokens=s.prompt_tokens, output_tokens=s.max_tokens)
        try:
            p = predict(work, machine, mode, c.k, b_eff, c.threads, at=at)
            span = predict_range(work, machine, mode, c.k, b_eff, c.threads, at=at)  # a chip nobody measured
        except ValueError:
            return None
        n = s.max_tokens
        served = min(s.users, c.k * b_eff)

        def per(q: Prediction) -> float:  # a request's time: TTFT + (N − 1) × TPOT
            return q.ttft_s + (n - 1) * q.tpot_s

        def tps_of(q: Prediction) -> float:
            return served * n / per(q)

        tps = tps_of(p)
        ttft = p.ttft_s + max(0.0, s.users / served - 1) * per(p)
        ok = (s.slo.ttft_s is None or ttft <= s.slo.ttft_s) and (s.slo.tpot_s is None or p.tpot_s <= s.slo.tpot_s)
        return Predicted(tps, ttft, p.tpot_s, tps if ok else 0.0, p.binding,
                         (tps_of(span[0]), tps_of(span[1])) if span else None)

    return run

