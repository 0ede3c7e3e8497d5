"""Does the fleet measure what the engine does? A bare llama-cpp-python loop vs the fleet at K=1.

Interleaved A/B, several rounds, in one run: same model, threads, prompt, max_tokens, greedy decoding.
Decode tok/s = 1 / TPOT (docs/design/metrics.md) for both. Goal: fleet ÷ bare ≥ 0.97.

--quick: 2 rounds of 2 requests × 64 tokens, well within 5 minutes on the 2-core VM; its JSON line says quick, its
wall time, and the full run's estimated time (`full_run_estimate_s`): the setup measured here + 5 rounds, each
this run's round time less its decoding + the full round's tokens (4 requests × 128, both sides) at the decode
rates measured here.

    python benchmarks/fidelity.py [--rounds 5] [--requests 4] [--max-tokens 128] [--threads N] [--quick]
"""
from __future__ import annotations

import argparse
import json
import ctypes
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import presets  # noqa: E402
from measure.machine.probes import auto_threads  # noqa: E402
from measure.sources.fleet import Fleet  # noqa: E402
from measure.core.metrics import tpot  # noqa: E402
from measure.machine.model_choice import build_spec, resolve_model, run_meta  # noqa: E402
from measure.core.workload import ClosedLoop, Load  # noqa: E402

PROMPT = presets.workload("default").prompts[0]


def bare_tps(llm, lib, n_vocab, max_tokens: int, requests: int) -> list[float]:
    """The plainest llama-cpp-python greedy loop: llama_decode + argmax of the last logits."""
    ctx = llm.ctx
    mem = lib.llama_get_memory(ctx)
    toks = llm.tokenize(PROMPT.encode(), add_bos=True, special=False)
    out = []
    for _ in range(requests):
        lib.llama_memory_clear(mem, True)
        arr = (lib.llama_token * len(toks))(*toks)
        lib.llama_decode(ctx, lib.llama_batch_get_one(arr, len(toks)))
        stamps = []
        for i in range(max_tokens):
            ptr = lib.llama_get_logits_ith(ctx, -1)
            tok = int(np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,)).argmax())
            stamps.append(time.perf_counter_ns())
            if i + 1 < max_tokens:
                one = (lib.llama_token * 1)(tok)
                lib.llama_decode(ctx, lib.llama_batch_get_one(one, 1))
        out.append((len(stamps) - 1) / ((stamps[-1] - stamps[0]) / 1e9))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=auto_threads(1))
    ap.add_argument("--quick", action="store_true", help="2 rounds of 2 requests × 64 tokens, and the full run's "
                    "estimated time")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.requests, a.max_tokens = 2, 2, 64
    t_start = time.monotonic()
    round_s = []

    import llama_cpp
    from llama_cpp import Llama

    choice = resolve_model("llama", None)
    spec = build_spec("llama", choice, a.threads, 1024, 1)
    print(f"model {choice.name}, threads {a.threads}, {a.requests} requests × {a.max_tokens} tokens per round, "
          f"{a.rounds} rounds interleaved")
    wl = presets.Workload("fidelity", "one prompt", (PROMPT,))
    fleet = Fleet(spec, run_meta("llama", choice), k=1, threads=a.threads)
    fleet.start()
    bare_all, fleet_all = [], []
    try:
        for r in range(a.rounds):
            t_round = time.monotonic()
            # the bare loop lives in this process only while it runs, so the two never share the cores
            llm = Llama(model_path=str(choice.path), n_ctx=1024, n_batch=512, n_threads=a.threads,
                        n_threads_batch=a.threads, flash_attn=spec.flash_attn, verbose=False)
            vocab = llama_cpp.llama_model_get_vocab(llm.model)
            n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
            bare_tps(llm, llama_cpp, n_vocab, 8, 2)  # warmup, as the fleet's workers do
            b = bare_tps(llm, llama_cpp, n_vocab, a.max_tokens, a.requests)
            llm.close()
            del llm
            recs = fleet.run_requests(Load(wl, ClosedLoop(1, a.requests), a.max_tokens, True), timeout=600)
            f = [1 / tpot(x) for x in recs]
            round_s.append(time.monotonic() - t_round)
            bare_all += b
            fleet_all += f
            print(f"round {r + 1}: bare {statistics.median(b):6.1f} tok/s   fleet {statistics.median(f):6.1f} tok/s   "
                  f"ratio {statistics.median(f) / statistics.median(b):.3f}")
    finally:
        fleet.close()
    mb, mf = statistics.median(bare_all), statistics.median(fleet_all)
    print(f"\nmedian decode tok/s: bare {mb:.1f}, fleet K=1 {mf:.1f}")
    print(f"fleet ÷ bare = {mf / mb:.3f}   (goal ≥ 0.97)")
    wall = time.monotonic() - t_start
    timing: dict = {"quick": a.quick, "wall_s": round(wall, 1)}
    if a.quick:  # a round = its fixed part (the bare model's load, the prefills) + its tokens at the rates above
        tokens = a.requests * (a.max_tokens - 1)
        fixed = statistics.median(round_s) - tokens / mb - tokens / mf
        full_tokens = 4 * (128 - 1)
        timing["full_run_estimate_s"] = round(wall - sum(round_s) + 5 * (max(0.0, fixed) + full_tokens / mb
                                                                          + full_tokens / mf))
        print(f"this run: {wall:.0f} s; the full run (5 rounds of 4 requests × 128 tokens) takes about "
              f"{timing['full_run_estimate_s'] / 60:.1f} min here")
    print(json.dumps({"ratio": round(mf / mb, 4), "bare_tps": round(mb, 2), "fleet_tps": round(mf, 2), **timing}))


if __name__ == "__main__":
    main()
