"""mlx-lm engine: any mlx-lm model folder, or the embedded GGUF converted by engines.gguf_to_mlx.

Single stream: mlx-lm's own `generate_step` (greedy, a fresh KV cache per request, so nothing is reused
between requests); each id is stamped with perf_counter_ns() when mlx hands it over. Batch mode: mlx-lm's
own continuous-batching `BatchGenerator`; all ids of one `next()` share that step's stamp.

mlx-lm 0.32.2 is pinned (pyproject): BatchGenerator's API changed shape across releases.
"""
from __future__ import annotations

import importlib.util
import json
from collections.abc import Hashable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.base import FILLER, BatchStep, EngineError, EngineSpec, Prompt, TokenStream, check_room, synthetic_ids
from engines.spec import EngineDecl

if TYPE_CHECKING:
    from engines.mlx_blas import LoadedBlas

# mlx and mlx-lm are held as Any here: mlx-lm's annotations are partial and not what it does at run time
# (BatchGenerator's next/remove/close are unannotated, generate_step is annotated as yielding mx.arrays where
# it yields int ids, load as returning two or three values where it returns two without return_config).

MLX = EngineDecl("mlx", "mlx-lm", "in-process", model_kind="mlx", work_model="config", kv_layout="mlx", gpu="mac",
                 factory="engines.mlx_lm:MlxLmEngine", own_blas=True, tune_modes=("instances", "batch"),
                 serve_argv=("mlx_lm.server", "--model", "{model}", "--host", "127.0.0.1", "--port", "{port}"))
# mlx-lm's own server, started by tune on loopback as llama-server is (its client is engines/http_openai.py): it
# batches up to --decode-concurrency requests and prefills up to --prompt-concurrency prompts at once (mlx-lm
# 0.32.2; --kv-bits would serve one at a time, so tune leaves it off); its model, memory and roofline are mlx's
MLX_SERVER = EngineDecl("mlx-server", "mlx_lm.server", "server", model_kind="mlx", work_model="config",
                        kv_layout="mlx", gpu="mac", plan_as="mlx", tune_modes=("slots", "servers"),
                        tune_knobs=("prompt_concurrency",), server_flags="mlx_lm.server", needs="mlx_lm",
                        serve_argv=("mlx_lm.server", "--model", "{model}", "--host", "127.0.0.1", "--port",
                                    "{port}"))

INSTALL_HINT = "pip install 'inference-top[mlx]' (Linux: mlx[cpu]), or use --engine llama"


def require_mlx() -> None:
    """One line when mlx or mlx-lm is missing, before any worker starts."""
    for mod, name in (("mlx.core", "mlx"), ("mlx_lm", "mlx-lm")):
        try:
            found = importlib.util.find_spec(mod) is not None  # finds, does not import (mlx is a namespace)
        except (ImportError, ValueError):
            found = False
        if not found:
            raise EngineError(f"{name} is not installed in this Python: {INSTALL_HINT}")


def check_folder(path: str | Path) -> dict[str, Any]:
    """config.json of an mlx-lm model folder, or EngineError naming what is wrong with it."""
    p = Path(path)
    what = "an mlx-lm model folder (config.json, *.safetensors and a tokenizer)"
    if not p.exists():
        raise EngineError(f"model not found: {p} (--engine mlx takes {what}, or a Gemma 3 .gguf to convert)")
    if not p.is_dir():
        raise EngineError(f"{p} is not {what}, nor a GGUF file")
    try:
        config = json.loads((p / "config.json").read_text())
    except FileNotFoundError:
        raise EngineError(f"{p} is not {what}: it has no config.json") from None
    except (OSError, ValueError) as exc:
        raise EngineError(f"{p}/config.json cannot be read as JSON ({exc})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise EngineError(f"{p}/config.json names no model_type; it is not an mlx-lm model config")
    if not any(p.glob("*.safetensors")):
        raise EngineError(f"{p} is not {what}: it has no .safetensors weights")
    if not ((p / "tokenizer.json").exists() or (p / "tokenizer.model").exists()):
        raise EngineError(f"{p} is not {what}: it has no tokenizer.json or tokenizer.model")
    # whether mlx-lm has this model_type is its own check, at load in the worker ("Model type … not
    # supported."): importing mlx-lm here would load mlx before the BLAS shim
    return config


class MlxLmEngine:
    name = "mlx-lm"

    def __init__(self, spec: EngineSpec):
        self.spec = spec
        self.model: Any = None  # mlx-lm's nn.Module
        self.tokenizer: Any = None  # mlx-lm's TokenizerWrapper (encode: the Hugging Face tokenizer's)
        self.blas: LoadedBlas | None = None
        self._batch: MlxBatch | None = None

    def load(self) -> None:
        from engines.mlx_blas import LoadedBlas

        # before mlx is imported: its cblas_sgemm must bind to the OpenBLAS shim
        self.blas = LoadedBlas(self.spec.options.get("mlx_blas_shim"), self.spec.options.get("mlx_openblas"))
        self.blas.set_threads(self.spec.threads)
        try:
            require_mlx()
            import mlx.core as mx
            from mlx_lm.utils import load
        except ImportError as exc:
            raise EngineError(f"mlx-lm cannot be imported ({exc}): {INSTALL_HINT}") from None
        self.mx: Any = mx
        check_folder(self.spec.model_path)
        mlx_load: Any = load  # (see the note above on mlx-lm's annotations)
        try:
            self.model, self.tokenizer = mlx_load(self.spec.model_path)
        except (ValueError, OSError, KeyError) as exc:
            raise EngineError(f"mlx-lm could not load {self.spec.model_path}: {exc}") from None
        self.eos: set[int] = set(self.tokenizer.eos_token_ids or [])

    def warmup(self) -> None:
        """One warmup request: a short prompt and 8 generated tokens."""
        toks = self.tokenize(Prompt("warmup", text="Warm up: count from one to ten."))
        for _ in self.generate(toks, 8, True):
            pass

    def tokenize(self, prompt: Prompt) -> list[int]:
        """The ids llama.cpp feeds for the same prompt (BOS as the tokenizer config says, no special
        tokens parsed from the text: the engines agree on the embedded model, tested)."""
        enc = self.tokenizer  # mlx-lm's wrapper hands encode to the Hugging Face tokenizer
        if prompt.synthetic_tokens:
            bos = enc.encode("", add_special_tokens=True)
            return synthetic_ids(bos, enc.encode(FILLER, add_special_tokens=False), prompt.synthetic_tokens)
        return list(enc.encode(prompt.text or "", add_special_tokens=True, split_special_tokens=True))

    def set_threads(self, n: int) -> None:
        """OpenBLAS's thread count (the shim); with the bundled BLAS mlx has no such knob."""
        assert self.blas is not None, "load() first"
        self.blas.set_threads(n)
        self.spec = replace(self.spec, threads=n)

    def blas_calls(self) -> int | None:
        return self.blas.calls() if self.blas else None

    def generate(self, tokens: list[int], max_tokens: int, ignore_eos: bool) -> TokenStream:
        from time import perf_counter_ns

        from mlx_lm.generate import generate_step, generation_stream

        check_room(len(tokens), max_tokens, self.spec.ctx, f"the context of {self.spec.ctx} tokens")
        mx = self.mx
        # a fresh prompt cache per call: no KV or prefix reuse between requests
        steps: Any = generate_step(mx.array(tokens), self.model, max_tokens=max_tokens)  # yields (int id, logprobs)
        reason = "length"
        try:
            for tok, _logprobs in steps:
                t = perf_counter_ns()
                yield tok, t
                if not ignore_eos and tok in self.eos:
                    reason = "stop"
                    break
        finally:
            steps.close()
            # generate_step has already queued one more step; let it finish here, not in the next TTFT
            mx.synchronize(generation_stream)
        return reason

    def batch(self, b_cap: int, ctx_per_seq: int | None = None) -> MlxBatch:
        """mlx-lm's BatchGenerator for up to b_cap sequences (its KV caches grow as needed, so a new
        capacity only changes its batch sizes; it is remade when idle, like llama.cpp's context)."""
        ctx_per_seq = ctx_per_seq or self.spec.ctx
        if self._batch is None or (self._batch.b_cap, self._batch.ctx_per_seq) != (b_cap, ctx_per_seq):
            if self._batch is not None:
                self._batch.close()
            self._batch = MlxBatch(self, b_cap, ctx_per_seq)
        return self._batch

    def close(self) -> None:
        if self._batch is not None:
            self._batch.close()
            self._batch = None
        self.model = None


class MlxBatch:
    """Continuous batching on mlx-lm's BatchGenerator, behind add / step / remove / active."""

    def __init__(self, engine: MlxLmEngine, b_cap: int, ctx_per_seq: int):
        from mlx_lm.generate import BatchGenerator

        self.engine = engine
        self.b_cap = b_cap
        self.ctx_per_seq = ctx_per_seq
        # no stop tokens by default (ignore-EOS); a request that stops at EOS brings its own
        self.gen: Any = BatchGenerator(engine.model, stop_tokens=None, completion_batch_size=b_cap,
                                  prefill_batch_size=b_cap)
        self.seqs: dict[Hashable, int] = {}  # request key -> BatchGenerator uid
        self._keys: dict[int, Hashable] = {}  # uid -> request key

    def active(self) -> int:
        return len(self.seqs)

    def add(self, key: Hashable, prompt: list[int], max_tokens: int, ignore_eos: bool) -> None:
        from mlx_lm.generate import StopSequences

        check_room(len(prompt), max_tokens, self.ctx_per_seq,
                   f"the {self.ctx_per_seq} tokens each of B≤{self.b_cap} sequences gets")
        if len(self.seqs) >= self.b_cap:
            raise EngineError(f"all {self.b_cap} sequence slots are busy")
        stop = None if ignore_eos else [StopSequences([[e] for e in sorted(self.engine.eos)])]
        (uid,) = self.gen.insert([prompt], max_tokens=[max_tokens], stop_sequences=stop)
        self.seqs[key] = uid
        self._keys[uid] = key

    def step(self) -> BatchStep:
        """One BatchGenerator.next(). Returns (t_ns, [(key, token_id)], [(key, finish_reason)])."""
        from time import perf_counter_ns

        _prompts, responses = self.gen.next()
        t = perf_counter_ns()
        tokens: list[tuple[Any, int]] = []
        finished: list[tuple[Any, str]] = []
        for r in responses:
            key = self._keys.get(r.uid)
            if key is None:
                continue
            tokens.append((key, int(r.token)))
            if r.finish_reason is not None:
                finished.append((key, r.finish_reason))
                self.seqs.pop(key, None)
                self._keys.pop(r.uid, None)
        return t, tokens, finished

    def remove(self, key: Hashable) -> None:
        uid = self.seqs.pop(key, None)
        if uid is not None:
            self._keys.pop(uid, None)
            self.gen.remove([uid])

    def close(self) -> None:
        self.gen.close()
