"""llama-cpp-python engine: the embedded GGUF or any GGUF, one sequence per request (instances mode).

The decode loop uses llama.cpp's own calls (llama_decode, llama_get_logits_ith) through the bindings
and takes the greedy token with a numpy argmax over the logits: with Gemma's 262k vocabulary the
bindings' sampler chain costs several ms per token more than the argmax, and that cost is not the
engine's. Each token id is stamped with perf_counter_ns() the moment the argmax returns it.
"""
from __future__ import annotations

import ctypes
from collections.abc import Iterator

import numpy as np

from engines.base import EngineError, EngineSpec, Prompt

FILLER = (
    "The quick brown fox jumps over the lazy dog while the committee reviews the quarterly numbers, "
    "and every engineer on the team measures tokens per second, memory bandwidth and latency again. "
)


class LlamaCppEngine:
    name = "llama.cpp"

    def __init__(self, spec: EngineSpec):
        self.spec = spec
        self.llm = None

    def load(self) -> None:
        try:
            import llama_cpp
            from llama_cpp import Llama
        except ImportError:
            raise EngineError(
                "llama-cpp-python is not installed: pip install 'inference-top[llama]' (or make install)"
            ) from None
        self._lib = llama_cpp
        self.llm = Llama(
            model_path=self.spec.model_path,
            n_ctx=self.spec.ctx,
            n_batch=min(512, self.spec.ctx),
            n_threads=self.spec.threads,
            n_threads_batch=self.spec.threads,
            seed=self.spec.seed,
            flash_attn=self.spec.flash_attn,
            verbose=False,
        )
        self._ctx = self.llm.ctx
        self._vocab = llama_cpp.llama_model_get_vocab(self.llm.model)
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._n_batch = min(512, self.spec.ctx)
        self._mem = llama_cpp.llama_get_memory(self._ctx)

    def warmup(self) -> None:
        """One warmup request: a short prompt and 8 generated tokens."""
        toks = self.tokenize(Prompt("warmup", text="Warm up: count from one to ten."))
        for _ in self.generate(toks, 8, True):
            pass

    def tokenize(self, prompt: Prompt) -> list[int]:
        if prompt.synthetic_tokens:
            return self.synthetic(prompt.synthetic_tokens)
        return self.llm.tokenize((prompt.text or "").encode("utf-8"), add_bos=True, special=False)

    def synthetic(self, n: int) -> list[int]:
        """Exactly n prompt tokens: BOS, then a fixed English filler text tokenized and repeated."""
        body = self.llm.tokenize(FILLER.encode(), add_bos=False, special=False)
        bos = self.llm.tokenize(b"", add_bos=True, special=False)
        out = list(bos)
        while len(out) < n:
            out.extend(body)
        return out[:n]

    def detokenize(self, ids: list[int]) -> str:
        return self.llm.detokenize(ids).decode("utf-8", errors="replace")

    def set_threads(self, n: int) -> None:
        self._lib.llama_set_n_threads(self._ctx, n, n)

    def _decode(self, tokens: list[int]) -> None:
        lib = self._lib
        for i in range(0, len(tokens), self._n_batch):
            chunk = tokens[i : i + self._n_batch]
            arr = (lib.llama_token * len(chunk))(*chunk)
            rc = lib.llama_decode(self._ctx, lib.llama_batch_get_one(arr, len(chunk)))
            if rc != 0:
                raise EngineError(f"llama_decode returned {rc} (context {self.spec.ctx} tokens full?)")

    def _argmax(self) -> int:
        ptr = self._lib.llama_get_logits_ith(self._ctx, -1)
        logits = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(self._n_vocab,))
        return int(logits.argmax())

    def generate(self, tokens: list[int], max_tokens: int, ignore_eos: bool) -> Iterator[tuple[int, int]]:
        from time import perf_counter_ns

        need = len(tokens) + max_tokens
        if need > self.spec.ctx:
            raise EngineError(
                f"prompt of {len(tokens)} tokens + max_tokens {max_tokens} = {need} exceeds the context of "
                f"{self.spec.ctx} tokens (raise --ctx or lower --max-tokens)"
            )
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
        if self.llm is not None:
            try:
                self.llm.close()
            except Exception:
                pass
            self.llm = None


