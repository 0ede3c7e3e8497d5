"""Continuous batching in the fleet vs the engine's ceiling, in one run.

For B = 1, 2, 4, 8, 16 on the embedded model, same threads:
  (a) bare: a lockstep multi-sequence decode loop written straight on llama.cpp's calls (B sequences,
      one llama_decode per step carrying one token of each, like llama-batched-bench);
  (b) fleet: one worker in batch mode serving B requests at once through the shared queue.
Aggregate decode tok/s = Σ (N − 1) decode tokens ÷ (last token − first token of the wave), both sides.
Prints (b)/(a) per B, B=16 ÷ B=1, and K=2 instances vs B=2 batch at equal concurrency 2.
Goals: (b)/(a) ≥ 0.90 at B=8; B=16 ÷ B=1 ≥ 3×.

    python benchmarks/batching.py [--tokens 64] [--rounds 2] [--threads N]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import presets  # noqa: E402
from measure.core.probes import auto_threads  # noqa: E402
from measure.sources.fleet import Fleet  # noqa: E402
from measure.core.model_choice import build_spec, resolve_model, run_meta  # noqa: E402
from measure.core.workload import ClosedLoop, Load  # noqa: E402

BS = (1, 2, 4, 8, 16)
PROMPT = presets.workload("default").prompts[0]


def bare(model_path: str, threads: int, b: int, n_tokens: int, ctx_per_seq: int) -> float:
    import llama_cpp as lib
    from llama_cpp import Llama

    llm = Llama(model_path=model_path, n_ctx=256, n_threads=threads, n_threads_batch=threads, flash_attn=True,
                verbose=False)
    p = lib.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = b * ctx_per_seq, 512, 512, b
    p.n_threads = p.n_threads_batch = threads
    p.flash_attn_type, p.kv_unified, p.no_perf = 1, False, True
    ctx = lib.llama_init_from_model(llm.model, p)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(llm.model))
    batch = lib.llama_batch_init(512, 0, 1)
    prompt = llm.tokenize(PROMPT.encode(), add_bos=True, special=False)
    fptr = ctypes.POINTER(ctypes.c_float)

    def put(i, tok, pos, seq, logits):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
        batch.seq_id[i][0], batch.logits[i] = seq, int(logits)

    n = 0
    for s in range(b):  # prefill every sequence in one decode
        for j, tok in enumerate(prompt):
            put(n, tok, j, s, j == len(prompt) - 1)
            n += 1
    batch.n_tokens = n
    lib.llama_decode(ctx, batch)
    idx = [len(prompt) * (s + 1) - 1 for s in range(b)]
    last = [int(np.ctypeslib.as_array(ctypes.cast(lib.llama_get_logits_ith(ctx, i), fptr), shape=(n_vocab,)).argmax())
            for i in idx]
    t0 = time.perf_counter_ns()
    for step in range(n_tokens - 1):
        for s in range(b):
            put(s, last[s], len(prompt) + step, s, True)
        batch.n_tokens = b
        lib.llama_decode(ctx, batch)
        last = [int(np.ctypeslib.as_array(ctypes.cast(lib.llama_get_logits_ith(ctx, s), fptr),
                                          shape=(n_vocab,)).argmax()) for s in range(b)]
    dt = (time.perf_counter_ns() - t0) / 1e9
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)
    llm.close()
    return b * (n_tokens - 1) / dt


def decode_tps(records) -> float:
    first = min(r.t_first_token_ns for r in records)
    last = max(r.token_ns[-1] for r in records)
    return sum(len(r.token_ns) - 1 for r in records) / ((last - first) / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=auto_threads(1))
    a = ap.parse_args()
    choice = resolve_model("llama", None)
    wl = presets.Workload("batching", "one prompt", (PROMPT,))
    ctx = 256
    spec = build_spec("llama", choice, a.threads, ctx, 1)
    fleet = Fleet(spec, run_meta("llama", choice, "batch", 1), k=1, threads=a.threads, b_cap=max(BS))
    fleet.start()
    res = {b: ([], []) for b in BS}
    try:
        for r in range(a.rounds):
            for b in BS:
                res[b][0].append(bare(str(choice.path), a.threads, b, a.tokens, ctx))
                fleet.set_batch("batch", b)
                recs = fleet.run_requests(Load(wl, ClosedLoop(b, total=b), a.tokens, True), timeout=600)
                res[b][1].append(decode_tps(recs))
                print(f"round {r + 1} B={b:>2}: bare {res[b][0][-1]:6.1f}  fleet {res[b][1][-1]:6.1f} tok/s",
                      flush=True)
    finally:
        fleet.close()
    # equal concurrency 2: two single-stream instances (cores ÷ 2 threads each) vs one engine with B=2
    inst_fleet = Fleet(build_spec("llama", choice, None, ctx, 2), run_meta("llama", choice), k=2)
    inst_fleet.start()
    try:
        inst = statistics.median(
            decode_tps(inst_fleet.run_requests(Load(wl, ClosedLoop(2, total=2), a.tokens, True), timeout=600))
            for _ in range(a.rounds))
    finally:
        inst_fleet.close()
    print(f"\nthreads {a.threads}, {a.tokens} tokens per sequence, median of {a.rounds}")
    print(f"{'B':>3} {'bare tok/s':>11} {'fleet tok/s':>12} {'fleet/bare':>11}")
    med = {b: (statistics.median(res[b][0]), statistics.median(res[b][1])) for b in BS}
    for b in BS:
        print(f"{b:>3} {med[b][0]:>11.1f} {med[b][1]:>12.1f} {med[b][1] / med[b][0]:>11.3f}")
    print(f"fleet B=16 ÷ B=1: {med[16][1] / med[1][1]:.2f}×  (goal ≥ 3×); fleet/bare at B=8: "
          f"{med[8][1] / med[8][0]:.3f} (goal ≥ 0.90)")
    print(f"concurrency 2: K=2 instances {inst:.1f} tok/s vs B=2 batch {med[2][1]:.1f} tok/s")


if __name__ == "__main__":
    main()
