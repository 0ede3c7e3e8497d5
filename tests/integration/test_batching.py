"""Continuous batching inside one llama.cpp context, on the embedded model."""
import time

import numpy as np
import pytest

import presets
from measure.core.workload import ClosedLoop, Load
from measure.sources.base import Finished
from engines.base import EngineError, Prompt
from engines.llama_cpp import LlamaBatch

WL = presets.workload("default")


def drain(batch):
    out = {}
    while batch.active():
        t, toks, _ = batch.step()
        for key, tok in toks:
            out.setdefault(key, []).append((tok, t))
    return out


def test_b1_batch_path_equals_single_stream(engine):
    toks = engine.tokenize(Prompt("p", text=WL.prompts[4]))
    single = [t for t, _ in engine.generate(toks, 16, True)]
    b = engine.batch(4)
    b.add("a", toks, 16, True)
    assert [t for t, _ in drain(b)["a"]] == single


def test_timestamps_per_sequence_and_shared_per_step(engine):
    b = engine.batch(4)
    for i in range(3):
        b.add(i, engine.tokenize(Prompt("p", text=WL.prompts[i])), 6, True)
    out = drain(b)
    assert sorted(out) == [0, 1, 2] and all(len(v) == 6 for v in out.values())
    # admitted together: the three sequences' k-th tokens came from the same step, stamped once
    for k in range(6):
        assert len({out[i][k][1] for i in range(3)}) == 1
    ts = [t for _, t in out[0]]
    assert ts == sorted(ts) and len(set(ts)) == 6


def test_isolation_neighbours_content_does_not_touch_logits(engine):
    """Same token counts, different neighbour content: the first sequence's logits are bit-identical."""
    lb = LlamaBatch(engine, 2, 128)
    lb.keep_logits = True
    a = engine.tokenize(Prompt("a", text="The capital of France is"))
    n1 = engine.tokenize(Prompt("n", text="One two three four five"))
    n2 = engine.tokenize(Prompt("n", text="Blue green red yellow pink"))
    assert len(n1) == len(n2)
    runs = []
    for neighbour in (n1, n2):
        lb.add("a", a, 3, True)
        lb.add("n", neighbour, 3, True)
        got = []
        while lb.active():
            lb.step()
            got.append(lb.last_logits["a"].copy())
        runs.append(got)
    lb.close()
    assert all(np.array_equal(x, y) for x, y in zip(*runs))


def test_context_limit_is_refused_with_numbers(engine):
    b = engine.batch(4)
    with pytest.raises(EngineError, match=r"exceeds the 256 tokens each of B≤\d+ sequences gets"):
        b.add("long", engine.tokenize(Prompt("s", synthetic_tokens=250)), 16, True)


def test_fleet_continuous_admission_and_refusal(make_fleet):
    """B=4 in one worker: a request arriving mid-batch starts before the running ones end; a prompt
    that cannot fit is recorded with its error and the others go on."""
    fleet = make_fleet(k=1, threads=2, ctx=256)
    fleet.set_batch("batch", 4)
    fleet.start()
    long_wl = presets.Workload("mix", "", ("Tell me a story.",))
    fleet.set_load(Load(long_wl, ClosedLoop(1, total=1), 120))
    recs = []

    def pump(n, timeout=120):
        end = time.monotonic() + timeout
        while len(recs) < n and time.monotonic() < end:
            try:
                ev = fleet.events.get(timeout=0.2)
            except Exception:
                continue
            if isinstance(ev, Finished):
                recs.append(ev.record)

    # wait until the long request is decoding, then add a short one and an oversized one
    end = time.monotonic() + 60
    while not any(w.active for w in fleet.workers()) and time.monotonic() < end:
        time.sleep(0.05)
    time.sleep(0.5)
    # closed loop counts what is in flight: 2 users so the one short request goes out now
    fleet.set_load(Load(presets.Workload("short", "", ("Hi.",)), ClosedLoop(2, total=1), 8))
    pump(1)
    fleet.set_load(Load(presets.workload("synthetic:300"), ClosedLoop(2, total=1), 8))
    pump(3)
    by = {r.prompt_id: r for r in recs}
    long_r, short_r, big = by["mix-1"], by["short-1"], by["synthetic-300"]
    assert long_r.error is None and long_r.output_tokens == 120 and long_r.mode == "batch" and long_r.b == 4
    assert short_r.error is None and short_r.output_tokens == 8
    assert short_r.t_started_ns < long_r.t_done_ns and short_r.t_done_ns < long_r.t_done_ns  # joined mid-batch
    assert big.error and "exceeds the 256 tokens" in big.error and big.output_tokens == 0


def test_batch_is_filled_to_what_llama_cpp_made_and_rows_are_checked_before_c(engine):
    """llama.cpp clamps n_batch and n_ubatch to n_ctx (B=2 × 128 tokens: 256, not the 512 asked) and asserts
    (aborts) on a decode larger than n_batch; ctypes writes C arrays unchecked. So the batch is filled to the
    sizes read back from the context, and a row outside the batch, a sequence id ≥ n_seq_max, a position past
    the sequence's share or a token outside the vocabulary is refused before llama_decode sees it."""
    lb = LlamaBatch(engine, 2, 128)
    try:
        assert lb.n_batch == 256
        tok = engine.tokenize(Prompt("p", text="The capital of France is"))[1]
        for bad in [(256, tok, 0, 0), (0, tok, 0, 2), (0, tok, 128, 0), (0, lb._n_vocab, 0, 0), (0, -1, 0, 0)]:
            with pytest.raises(EngineError, match="outside the batch"):
                lb._put(*bad, True)
        # two prompts that fill both sequences' shares go through in steps of ≤ n_batch tokens
        for key in ("a", "b"):
            lb.add(key, engine.tokenize(Prompt(key, synthetic_tokens=120)), 4, True)
        done = []
        while lb.active():
            done += [k for k, _ in lb.step()[2]]
        assert sorted(done) == ["a", "b"]
    finally:
        lb.close()
