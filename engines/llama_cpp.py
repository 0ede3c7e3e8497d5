"""llama-cpp-python engine: the embedded GGUF or any GGUF, one sequence per request (instances mode).

The decode loop uses llama.cpp's own calls (llama_decode, llama_get_logits_ith) through the bindings
and takes the greedy token with a numpy argmax over the logits: with Gemma's 262k vocabulary the
bindings' sampler chain costs several ms per token more than the argmax, and that cost is not the
engine's. Each token id is stamped with perf_counter_ns() the moment the argmax returns it.
"""
from __future__ import annotations

import ctypes
import heapq
import re
import sys
from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from engines.base import FILLER, BatchStep, EngineError, EngineSpec, Prompt, TokenStream, check_room, synthetic_ids
from engines.spec import EngineDecl

if TYPE_CHECKING:
    from llama_cpp import Llama

# The bindings' C functions (llama_decode, llama_get_logits_ith, …) are called through the module as `Any`: their
# handles are ctypes pointers this code only passes back to C, and a NULL one is checked where C can return it.

LLAMA = EngineDecl("llama", "llama.cpp", "in-process", model_kind="gguf", work_model="gguf",
                   kv_layout="llama.cpp-window", probe="engine-rates", gpu="layers",
                   factory="engines.llama_cpp:LlamaCppEngine", flash_attn=True, kv_types=True,
                   tune_modes=("instances", "batch"),
                   tune_half_threads=True, tune_knobs=("flash_attn",))
# llama.cpp's own server, started by tune on loopback (its client is engines/http_openai.py); its model, memory
# and roofline are the llama engine's
LLAMA_SERVER = EngineDecl("llama-server", "llama-server", "server", model_kind="gguf", work_model="gguf",
                          kv_layout="llama.cpp-window", probe="engine-rates", plan_as="llama", flash_attn=True,
                          tune_modes=("slots", "servers"), tune_half_threads=True,
                          tune_knobs=("flash_attn", "kv_type", "ubatch"),
                          serve_argv=("llama-server", "-m", "{model}", "--host", "127.0.0.1", "--port", "{port}"),
                          server_flags="llama-server", measure_flags=("--metrics",))


def amx_warning(lib: Any, out: TextIO | None = None) -> str | None:
    """One line in the engine log when this llama.cpp was built with AMX kernels (a build other than the
    Makefile's, docs/design/llama-build.md): its multi-row matmuls segfault on some Xeons, so if a batch step dies,
    the log says what to rebuild. None (nothing written) for a build without them."""
    if "AMX_INT8" not in cpu_features(lib):
        return None
    line = ("warning: this llama.cpp was built with AMX kernels (AMX_INT8 = 1), which segfault in multi-row "
            "matmuls (batch steps) on some Xeons (llama.cpp #20824); if a batch step dies, rebuild without them: "
            "CMAKE_ARGS=\"-DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile "
            "-mno-amx-int8 -mno-amx-bf16'\" pip install --force-reinstall --no-cache-dir llama-cpp-python")
    print(line, file=out or sys.stderr, flush=True)
    return line


def cpu_features(lib: Any) -> list[str]:
    """The names this llama.cpp's llama_print_system_info sets to 1 (its CPU backend's instructions and paths:
    AVX2, AVX512, NEON, DOTPROD, LLAMAFILE, REPACK …): which matmul code a batch step runs (presets/kernels.toml
    [cpu])."""
    info = lib.llama_print_system_info().decode(errors="replace")
    return sorted({m.group(1) for m in re.finditer(r"([A-Za-z0-9_]+) = 1\b", info)})


def gpu_layers(lib: Any, asked: int | None) -> int:
    """n_gpu_layers to ask llama.cpp for: `asked` (--n-gpu-layers) where given; else every layer (-1) where this
    build of llama.cpp has a GPU backend to offload to (Metal, CUDA, Vulkan: llama_supports_gpu_offload), else 0.
    llama-cpp-python's own default is 0, every layer on the CPU, whatever the build."""
    if asked is not None:
        return asked
    return -1 if lib.llama_supports_gpu_offload() else 0


def placement(lib: Any, asked: int | None, layers: int | None = None) -> str:
    """Where the layers run, in words (the dashboard's header, the run's header)."""
    n = gpu_layers(lib, asked)
    gpu = bool(lib.llama_supports_gpu_offload())
    if not gpu:
        return "layers on the CPU: this llama.cpp has no GPU backend"
    if n == 0:
        return "layers on the CPU (--n-gpu-layers 0)"
    if n < 0 or (layers is not None and n >= layers):
        return "all layers on the GPU"
    return f"{n}{f' of {layers}' if layers else ''} layers on the GPU, the rest on the CPU"


def offloaded_fraction(lib: Any, asked: int | None, layers: int | None) -> float:
    """The share of the model's layers llama.cpp wires to the GPU (0 on a build without a GPU backend)."""
    if not lib.llama_supports_gpu_offload():
        return 0.0
    n = gpu_layers(lib, asked)
    if n < 0 or not layers:
        return 1.0 if n != 0 else 0.0
    return min(1.0, n / layers)


KV_TYPES = ("f16", "q8_0", "q4_0")  # the KV cache types offered (llama-server's -ctk/-ctv names)


def kv_types(lib: Any, spec: EngineSpec) -> dict[str, int]:
    """type_k and type_v (ggml type ids) for options kv_type (f16 | q8_0 | q4_0; absent: llama.cpp's default,
    f16): the KV cache's element type, as llama-server's -ctk/-ctv. A quantised V cache needs flash attention
    (llama.cpp refuses it without): said here in one line, not by a failed context."""
    kv = spec.options.get("kv_type")
    if kv is None:
        return {}
    if kv not in KV_TYPES:
        raise EngineError(f"KV cache type {kv!r}: choose one of {', '.join(KV_TYPES)}")
    if kv != "f16" and not spec.flash_attn:
        raise EngineError(f"a {kv} KV cache needs flash attention (llama.cpp's quantised V cache): drop --no-flash-attn")
    t = getattr(lib, f"GGML_TYPE_{kv.upper()}")
    return {"type_k": t, "type_v": t}


def set_row(batch: Any, i: int, token: int, pos: int, seq: int, logits: bool) -> None:
    """Row i of a llama_batch (llama_batch_init's, one seq_id a row): its token at pos in sequence seq, its logits
    asked or not. The caller has checked the row, token, position and sequence against what C allocated."""
    batch.token[i] = token
    batch.pos[i] = pos
    batch.n_seq_id[i] = 1
    batch.seq_id[i][0] = seq
    batch.logits[i] = 1 if logits else 0


class LlamaCppEngine:
    name = "llama.cpp"

    def __init__(self, spec: EngineSpec):
        self.spec = spec
        self.llm: Llama | None = None
        self._batch: LlamaBatch | None = None

    def load(self) -> None:
        try:
            import llama_cpp
            from llama_cpp import Llama
        except ImportError:
            raise EngineError(
                "llama-cpp-python is not installed: pip install 'inference-top[llama]' (or make install)"
            ) from None
        self._lib: Any = llama_cpp
        try:
            self.llm = self._llama(Llama)
        except (ValueError, MemoryError, OSError) as exc:
            limit = self.spec.options.get("memory_limit")
            raise EngineError(
                f"llama.cpp could not load {self.spec.model_path}: {exc}"
                + (f" (worker memory limit {int(limit) / 2**20:.0f} MiB)" if limit else "")
            ) from None
        self._ctx = self.llm.ctx
        self._vocab = self._lib.llama_model_get_vocab(self.llm.model)
        self._n_vocab: int = self._lib.llama_vocab_n_tokens(self._vocab)
        self._n_batch = min(512, self.spec.ctx)
        self._mem = self._lib.llama_get_memory(self._ctx)

    @property
    def n_vocab(self) -> int:
        """Tokens in the model's vocabulary: a row of logits is this many floats (after load())."""
        return self._n_vocab

    def _loaded(self) -> Llama:
        """The model, after load()."""
        assert self.llm is not None, "load() first"
        return self.llm

    def _llama(self, Llama: Callable[..., Llama]) -> Llama:
        return Llama(
            model_path=self.spec.model_path,
            n_ctx=self.spec.ctx,
            n_batch=min(512, self.spec.ctx),
            n_threads=self.spec.threads,
            n_threads_batch=self.spec.threads,
            seed=self.spec.seed,
            flash_attn=self.spec.flash_attn,
            n_gpu_layers=gpu_layers(self._lib, self.spec.n_gpu_layers),
            swa_full=False,  # llama.cpp's reduced window cache, as llama-server makes it (docs/design/model-reads.md)
            use_mmap=bool(self.spec.options.get("use_mmap", True)),  # False: weights loaded into memory (docs/residency.md)
            **kv_types(self._lib, self.spec),
            verbose=False,
        )

    def cpu_features(self) -> list[str]:
        return cpu_features(self._lib)

    def warmup(self) -> None:
        """One warmup request: a short prompt and 8 generated tokens."""
        toks = self.tokenize(Prompt("warmup", text="Warm up: count from one to ten."))
        for _ in self.generate(toks, 8, True):
            pass

    def tokenize(self, prompt: Prompt) -> list[int]:
        if prompt.synthetic_tokens:
            return self.synthetic(prompt.synthetic_tokens)
        return self._loaded().tokenize((prompt.text or "").encode("utf-8"), add_bos=True, special=False)

    def synthetic(self, n: int) -> list[int]:
        """Exactly n prompt tokens: BOS, then a fixed English filler text tokenized and repeated."""
        body = self._loaded().tokenize(FILLER.encode(), add_bos=False, special=False)
        return synthetic_ids(self._loaded().tokenize(b"", add_bos=True, special=False), body, n)

    def detokenize(self, ids: list[int]) -> str:
        return self._loaded().detokenize(ids).decode("utf-8", errors="replace")

    def set_threads(self, n: int) -> None:
        self._lib.llama_set_n_threads(self._ctx, n, n)
        if self._batch is not None:
            self._batch.set_threads(n)
        self.spec = replace(self.spec, threads=n)

    def batch(self, b_cap: int, ctx_per_seq: int | None = None) -> LlamaBatch:
        """The continuous-batching context for b_cap sequences of ctx_per_seq tokens (default --ctx).

        llama.cpp allocates (and clears) the whole KV cache when the context is made, so it is made
        for exactly what is asked and remade only when that changes."""
        ctx_per_seq = -(-(ctx_per_seq or self.spec.ctx) // 256) * 256  # llama.cpp pads n_ctx to 256
        if self._batch is None or (self._batch.b_cap, self._batch.ctx_per_seq) != (b_cap, ctx_per_seq):
            if self._batch is not None:
                self._batch.close()
                self._batch = None
            amx_warning(self._lib)
            self._batch = LlamaBatch(self, b_cap, ctx_per_seq)
        return self._batch

    def _decode(self, tokens: list[int]) -> None:
        lib = self._lib
        for i in range(0, len(tokens), self._n_batch):
            chunk = tokens[i : i + self._n_batch]
            if not 0 < len(chunk) <= self._n_batch:  # checked here: llama.cpp reads what it is told
                raise EngineError(f"a decode of {len(chunk)} tokens does not fit n_batch={self._n_batch}")
            arr = (lib.llama_token * len(chunk))(*chunk)
            rc = lib.llama_decode(self._ctx, lib.llama_batch_get_one(arr, len(chunk)))
            if rc != 0:
                raise EngineError(f"llama_decode returned {rc} (context {self.spec.ctx} tokens full?)")

    def prompt_logits_s(self, tokens: list[int]) -> float:
        """Seconds of one llama_decode of `tokens` as one sequence's prompt with every row's logits asked, from
        an empty context: the tiled matmuls a batch step of len(tokens) columns runs, the output matrix's
        included (llama.cpp multiplies it only for the rows whose logits are asked; a prompt asks its last).
        The probe's price of a batch column past its largest batch (docs/design/kernels.md, "The CPU")."""
        from time import perf_counter

        lib, n = self._lib, len(tokens)
        if not 0 < n <= self._n_batch:
            raise EngineError(f"a prompt of {n} tokens does not fit one micro-batch of {self._n_batch}")
        if not all(0 <= tok < self._n_vocab for tok in tokens):  # ctypes writes them unchecked, as LlamaBatch._put
            raise EngineError(f"a prompt token is outside the vocabulary of {self._n_vocab}")
        lib.llama_memory_clear(self._mem, True)
        batch = lib.llama_batch_init(n, 0, 1)
        try:
            for i, tok in enumerate(tokens):
                set_row(batch, i, tok, i, 0, True)
            batch.n_tokens = n
            t0 = perf_counter()
            rc = lib.llama_decode(self._ctx, batch)
            t = perf_counter() - t0
        finally:
            lib.llama_batch_free(batch)
            lib.llama_memory_clear(self._mem, True)
        if rc != 0:
            raise EngineError(f"llama_decode returned {rc} for a prompt of {n} tokens with every row's logits")
        return t

    def _argmax(self) -> int:
        ptr = self._lib.llama_get_logits_ith(self._ctx, -1)
        if not ptr:  # llama.cpp returns NULL for a row it has no logits for; a view of NULL would crash
            raise EngineError("llama.cpp has no logits for the last token of the step")
        logits = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(self._n_vocab,))
        return int(logits.argmax())

    def generate(self, tokens: list[int], max_tokens: int, ignore_eos: bool) -> TokenStream:
        from time import perf_counter_ns

        check_room(len(tokens), max_tokens, self.spec.ctx, f"the context of {self.spec.ctx} tokens")
        # no KV or prefix reuse between requests
        self._lib.llama_memory_clear(self._mem, True)
        self._decode(tokens)
        is_eog = self._lib.llama_vocab_is_eog
        for i in range(max_tokens):
            tok = self._argmax()
            t = perf_counter_ns()
            yield tok, t
            if not ignore_eos and is_eog(self._vocab, tok):
                return "stop"
            if i + 1 < max_tokens:
                self._decode([tok])
        return "length"

    def close(self) -> None:
        if self._batch is not None:
            self._batch.close()
            self._batch = None
        if self.llm is not None:
            try:
                self.llm.close()
            except Exception:
                pass
            self.llm = None




class _Seq:
    __slots__ = ("key", "slot", "prompt", "max_tokens", "ignore_eos", "fed", "n_past", "last", "generated")

    def __init__(self, key: Hashable, slot: int, prompt: list[int], max_tokens: int, ignore_eos: bool):
        self.key, self.slot, self.prompt = key, slot, prompt
        self.max_tokens, self.ignore_eos = max_tokens, ignore_eos
        self.fed = 0  # prompt tokens decoded so far
        self.n_past = 0  # this sequence's next position
        self.last: int | None = None  # the last sampled token, fed at the next step
        self.generated = 0


class LlamaBatch:
    """Continuous batching in one llama.cpp context: up to `b_cap` sequences, one llama_decode per step.

    Each step carries the next token of every decoding sequence plus prompt chunks of sequences being
    admitted (up to n_batch tokens); logits are requested only for each sequence's last token in the
    step, and the step's greedy ids come from one argmax over that (n_out, vocab) block. A finished
    sequence's KV cells are removed at once and its slot (seq_id) is free for the next request.
    `kv_unified=False` gives each sequence n_ctx / b_cap.
    """

    def __init__(self, engine: LlamaCppEngine, b_cap: int, ctx_per_seq: int, n_batch: int = 512):
        lib = engine._lib
        self._lib = lib
        self.b_cap = b_cap
        self.ctx_per_seq = ctx_per_seq
        self.n_batch = max(n_batch, b_cap)
        p = lib.llama_context_default_params()
        p.n_ctx = b_cap * ctx_per_seq
        p.n_batch = self.n_batch
        p.n_ubatch = self.n_batch
        p.n_seq_max = b_cap
        p.n_threads = p.n_threads_batch = engine.spec.threads
        p.flash_attn_type = 1 if engine.spec.flash_attn else 0  # the same setting as the single-stream path
        p.kv_unified = False
        for name, t in kv_types(lib, engine.spec).items():  # the KV cache type asked (options kv_type), as the
            setattr(p, name, t)  # single-stream context's
        p.swa_full = False  # the reduced window cache, as the single-stream context (docs/design/model-reads.md)
        p.no_perf = True
        self.ctx = lib.llama_init_from_model(engine._loaded().model, p)
        if not self.ctx:
            raise EngineError(f"could not create a batch context for B≤{b_cap} × {ctx_per_seq} tokens (memory?)")
        # what the context was made with, read back: steps are filled to these, never to what was asked
        # (llama.cpp clamps n_batch and n_ubatch to n_ctx: B=2 × 128 tokens gets 256, not the 512 asked)
        made = (lib.llama_n_ctx(self.ctx), lib.llama_n_batch(self.ctx), lib.llama_n_ubatch(self.ctx),
                lib.llama_n_seq_max(self.ctx))
        self.n_batch = min(self.n_batch, made[1], made[2])
        if made[0] < b_cap * ctx_per_seq or self.n_batch < b_cap or made[3] < b_cap:
            lib.llama_free(self.ctx)
            self.ctx = None
            raise EngineError(f"llama.cpp made the batch context with n_ctx, n_batch, n_ubatch, n_seq_max = {made}: "
                              f"too small for {b_cap} sequences of {ctx_per_seq} tokens")
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)
        self.mem = lib.llama_get_memory(self.ctx)
        self._vocab = engine._vocab
        self._n_vocab = engine._n_vocab
        self._free = list(range(b_cap))  # a min-heap: the lowest free seq_id first
        self.seqs: dict[Hashable, _Seq] = {}
        self._asked = 0
        self.keep_logits = False  # tests: keep a copy of each sequence's logits from the last step
        self.last_logits: dict[Hashable, Any] = {}

    def set_threads(self, n: int) -> None:
        self._lib.llama_set_n_threads(self.ctx, n, n)

    def active(self) -> int:
        return len(self.seqs)

    def add(self, key: Hashable, prompt: list[int], max_tokens: int, ignore_eos: bool) -> None:
        check_room(len(prompt), max_tokens, self.ctx_per_seq,
                   f"the {self.ctx_per_seq} tokens each of B≤{self.b_cap} sequences gets")
        if not self._free:
            raise EngineError(f"all {self.b_cap} sequence slots are busy")
        slot = heapq.heappop(self._free)
        self._lib.llama_memory_seq_rm(self.mem, slot, -1, -1)
        self.seqs[key] = _Seq(key, slot, prompt, max_tokens, ignore_eos)

    def _put(self, i: int, token: int, pos: int, slot: int, logits: bool) -> None:
        # ctypes indexes these C arrays unchecked: a row past what llama_batch_init allocated, a seq_id ≥
        # n_seq_max or a position past the sequence's share of the KV cache would be written (or read by
        # llama_decode) out of bounds, so each is refused here, before C sees it
        if not (0 <= i < self.n_batch and 0 <= slot < self.b_cap and 0 <= pos < self.ctx_per_seq
                and 0 <= token < self._n_vocab):
            raise EngineError(f"batch row {i} (token {token}, position {pos}, sequence {slot}) is outside the batch "
                              f"of {self.n_batch} rows, {self.b_cap} sequences of {self.ctx_per_seq} positions")
        set_row(self.batch, i, token, pos, slot, logits)
        self._asked += logits

    def step(self) -> BatchStep:
        """One llama_decode. Returns (t_ns, [(key, token_id)], [(key, finish_reason)])."""
        from time import perf_counter_ns

        lib = self._lib
        n, outs = self._fill()
        if n == 0:
            return perf_counter_ns(), [], []
        if not self.ctx:
            raise EngineError("the batch context is closed")
        self.batch.n_tokens = n
        rc = lib.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise EngineError(f"llama_decode returned {rc} for a batch of {n} tokens")
        if not outs:  # only prompt chunks that do not end in this step
            return perf_counter_ns(), [], []
        # llama.cpp keeps the requested logits as one (n_out, vocab) block in batch order, and outs is in
        # batch order: one view and one argmax for the step, not a fetch, a view and an argmax per sequence.
        # The block holds exactly the rows whose logits flag was set; that count must be len(outs).
        ptr = lib.llama_get_logits(self.ctx)
        asked = self._asked
        if not ptr or asked != len(outs):
            raise EngineError(f"llama.cpp returned {'no logits' if not ptr else f'{asked} logit rows'} for a step "
                              f"that asked {len(outs)}")
        rows = np.ctypeslib.as_array(ptr, shape=(len(outs), self._n_vocab))
        ids = rows.argmax(axis=1).tolist()
        t = perf_counter_ns()  # every token of the step is stamped once, when the ids are known
        tokens: list[tuple[Any, int]] = []
        finished: list[tuple[Any, str]] = []
        for row, (s, tok) in enumerate(zip(outs, ids)):
            if self.keep_logits:
                self.last_logits[s.key] = rows[row].copy()
            s.last = tok
            s.generated += 1
            tokens.append((s.key, tok))
            if s.generated >= s.max_tokens:
                finished.append((s.key, "length"))
            elif not s.ignore_eos and lib.llama_vocab_is_eog(self._vocab, tok):
                finished.append((s.key, "stop"))
        for key, _ in finished:
            self.remove(key)
        return t, tokens, finished

    def _fill(self) -> tuple[int, list[_Seq]]:
        """The step's batch: one token of each decoding sequence, then prompt chunks of the admitted ones with
        what room is left; (rows filled, the sequences whose next token this step gives, in batch order)."""
        n = 0
        self._asked = 0  # rows whose logits this step asks for, counted as _put sets their flag
        outs: list[_Seq] = []
        # seq_ids in ascending order: llama.cpp splits a batch whose sequences come out of order (with
        # per-sequence KV streams) into more micro-batches; seen here as 2.2× slower steps at B=8
        seqs = sorted(self.seqs.values(), key=lambda s: s.slot)
        for s in seqs:  # decoding sequences: one token each
            if s.last is not None:
                self._put(n, s.last, s.n_past, s.slot, True)
                s.n_past += 1
                outs.append(s)
                n += 1
        for s in seqs:  # admitted sequences: prompt chunks with what room is left
            left = len(s.prompt) - s.fed
            if s.last is not None or left <= 0:
                continue
            take = min(left, self.n_batch - n)
            if take <= 0:
                break
            for j in range(take):
                idx = s.fed + j
                self._put(n + j, s.prompt[idx], s.n_past + j, s.slot, idx == len(s.prompt) - 1)
            s.fed += take
            s.n_past += take
            n += take
            if s.fed == len(s.prompt):
                outs.append(s)
        return n, outs

    def remove(self, key: Hashable) -> None:
        s = self.seqs.pop(key, None)
        if s is not None:
            self._lib.llama_memory_seq_rm(self.mem, s.slot, -1, -1)
            heapq.heappush(self._free, s.slot)

    def close(self) -> None:
        if self.ctx:
            self._lib.llama_batch_free(self.batch)
            self._lib.llama_free(self.ctx)
            self.ctx = None
