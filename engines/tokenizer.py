"""A model's own tokenizer without its weights: llama.cpp's vocabulary-only load of a GGUF. The HTTP engine
uses it to send a server the same prompt ids the local engines use, once the server's /tokenize agrees."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from engines.base import FILLER, EngineError, Prompt, synthetic_ids


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class GGUFTokenizer:
    def __init__(self, path: str | Path):
        try:
            from llama_cpp import Llama
        except ImportError:
            raise EngineError("llama-cpp-python is not installed: cannot read the tokenizer of a GGUF") from None
        self.path = Path(path)
        with _quiet_stderr():  # llama.cpp's C code warns about the context of a vocabulary-only load
            self.llm = Llama(model_path=str(path), vocab_only=True, verbose=False)

    def __call__(self, prompt: Prompt) -> list[int]:
        """The ids LlamaCppEngine.tokenize gives: BOS + the text, or exactly N synthetic ids."""
        if prompt.synthetic_tokens:
            body = self.llm.tokenize(FILLER.encode(), add_bos=False, special=False)
            return synthetic_ids(self.llm.tokenize(b"", add_bos=True, special=False), body, prompt.synthetic_tokens)
        return self.llm.tokenize((prompt.text or "").encode("utf-8"), add_bos=True, special=False)

    def text_ids(self, text: str) -> list[int]:
        """A text's ids without BOS (a prefix put before another prompt's ids)."""
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def text_of(self, ids: list[int]) -> str:
        """The text of ids without BOS (detokenized: a prompt sent as text to a server that takes no ids)."""
        return self.llm.detokenize(ids).decode("utf-8", errors="replace")
