"""The llama.cpp engine itself, in-process, on the embedded model."""
import ctypes

import numpy as np
import pytest

from engines.base import EngineError, Prompt


def test_greedy_ids_match_the_high_level_api_and_no_reuse(engine):
    toks = engine.tokenize(Prompt("p", text="Why is the sky blue? Answer in two sentences."))
    assert toks[0] == 2  # Gemma's BOS
    first = [t for t, _ in engine.generate(toks, 12, True)]
    again = [t for t, _ in engine.generate(toks, 12, True)]  # memory cleared: same ids, no prefix reuse
    assert first == again
    engine.llm.reset()
    ref = []
    for t in engine.llm.generate(toks, top_k=1, temp=0.0, reset=True):  # the same Llama, flash attention on
        ref.append(t)
        if len(ref) == 12:
            break
    assert first == ref


def test_timestamps_per_token_and_ignore_eos(engine):
    out = list(engine.generate(engine.tokenize(Prompt("p", text="Hi")), 20, True))
    ts = [t for _, t in out]
    assert len(out) == 20 and ts == sorted(ts) and len(set(ts)) == 20


def test_synthetic_prompt_and_context_overflow(engine):
    assert len(engine.tokenize(Prompt("s", synthetic_tokens=200))) == 200
    with pytest.raises(EngineError, match="exceeds the context of 256"):
        list(engine.generate(engine.tokenize(Prompt("s", synthetic_tokens=250)), 10, True))


def logits_row(engine, i: int):
    """Row i's logits of the context's last decode, or None where llama.cpp has none for it."""
    ptr = engine._lib.llama_get_logits_ith(engine._ctx, i)
    if not ptr:
        return None
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(engine._n_vocab,)).copy()


def test_a_prompt_with_every_rows_logits_is_timed_and_leaves_the_context_clear(engine):
    toks = engine.tokenize(Prompt("s", synthetic_tokens=64))
    before = [t for t, _ in engine.generate(toks[:8], 4, True)]
    assert engine.prompt_logits_s(toks) > 0
    assert engine.prompt_logits_s(toks[:8]) > 0
    # every row's logits were asked, so llama.cpp multiplied the output matrix for each (a prompt asks only its
    # last: row 0 would have none); read, not timed: which of two timings is larger is the machine's load's say
    rows = [logits_row(engine, i) for i in range(8)]
    assert all(r is not None for r in rows) and not np.array_equal(rows[0], rows[7])
    assert [t for t, _ in engine.generate(toks[:8], 4, True)] == before  # nothing of it is left in the context
    with pytest.raises(EngineError) as e:
        engine.prompt_logits_s([])
    assert str(e.value) == "a prompt of 0 tokens does not fit one micro-batch of 256"
    with pytest.raises(EngineError, match="does not fit one micro-batch of 256"):
        engine.prompt_logits_s(toks * 5)
    with pytest.raises(EngineError, match="outside the vocabulary of 262144"):  # never handed to C
        engine.prompt_logits_s([2, 262144])
