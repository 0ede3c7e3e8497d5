"""The llama.cpp engine itself, in-process, on the embedded model."""
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


def test_a_prompt_with_every_rows_logits_is_timed_and_leaves_the_context_clear(engine):
    toks = engine.tokenize(Prompt("s", synthetic_tokens=64))
    before = [t for t, _ in engine.generate(toks[:8], 4, True)]
    short, long = engine.prompt_logits_s(toks[:8]), engine.prompt_logits_s(toks)
    assert 0 < short < long  # 64 rows' logits (the output matrix multiplied 64 times) cost more than 8
    assert [t for t, _ in engine.generate(toks[:8], 4, True)] == before  # nothing of it is left in the context
    with pytest.raises(EngineError) as e:
        engine.prompt_logits_s([])
    assert str(e.value) == "a prompt of 0 tokens does not fit one micro-batch of 256"
    with pytest.raises(EngineError, match="does not fit one micro-batch of 256"):
        engine.prompt_logits_s(toks * 5)
    with pytest.raises(EngineError, match="outside the vocabulary of 262144"):  # never handed to C
        engine.prompt_logits_s([2, 262144])
