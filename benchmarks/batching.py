"""Continuous batching in the fleet vs the engine's ceiling, in one run.

For B = 1, 2, 4, 8, 16 on the embedded model, same threads:
  (a) bare: a lockstep multi-sequence decode loop written straight on llama.cpp's calls (B sequences,
      one llama_decode per step carrying one token of each, like llama-batched-bench);
  (b) fleet: one worker in batch mode serving B requests at once through the shared queue.
Aggregate decode tok/s = Σ (N − 1) decode tokens ÷ (last token − first token of the wave), both sides.
Steady tok/s = B ÷ the median step (gap between a wave's consecutive step stamps; every token of a step
shares its stamp on both sides): the same decode, with the stalls other tenants of a shared machine put
into a few steps left out. Bare and fleet alternate within each round, so both see the same machine.
Prints (b)/(a) per B, B=16 ÷ B=1, and K=2 instances vs B=2 batch at equal concurrency 2; the last line is
a JSON object of the headline figures.
Goals: (b)/(a) ≥ 0.90 at B=8 and ≥ 0.95 at B=16; B=16 ÷ B=1 ≥ 3×.

--quick: one round of B = 1, 2, 8, 16 at 32 tokens (the headline's B), well within 5 minutes on the 2-core VM;
its JSON line says quick, its wall time, and the full run's estimated time (`full_run_estimate_s`): the
setup measured here + 3 rounds of every B of the full run, each B's time measured here × 64 ÷ 32 tokens (B = 4,
not run, interpolated between its neighbours).

    python benchmarks/batching.py [--tokens 64] [--rounds 3] [--threads N] [--bs 1,2,4,8,16] [--quick]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import presets  # noqa: E402
from measure.machine.probes import auto_threads  # noqa: E402
from measure.sources.fleet import Fleet  # noqa: E402
from measure.machine.model_choice import build_spec, resolve_model, run_meta  # noqa: E402
from measure.core.workload import ClosedLoop, Load  # noqa: E402

BS = (1, 2, 4, 8, 16)
QUICK_BS = (1, 2, 8, 16)  # the headline's B
PROMPT = presets.workload("default").prompts[0]


def bare(model_path: str, threads: int, b: int, n_tokens: int, ctx_per_seq: int) -> list[int]:
    """The wave's step stamps: after the prefill's ids, then after each decode step's ids."""
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
    stamps = [time.perf_counter_ns()]
    for step in range(n_tokens - 1):
        for s in range(b):
            put(s, last[s], len(prompt) + step, s, True)
        batch.n_tokens = b
        lib.llama_decode(ctx, batch)
        last = [int(np.ctypeslib.as_array(ctypes.cast(lib.llama_get_logits_ith(ctx, s), fptr),
                                          shape=(n_vocab,)).argmax()) for s in range(b)]
        stamps.append(time.perf_counter_ns())
    lib.llama_batch_free(batch)
    lib.llama_free(ctx)
    llm.close()
    return stamps


def decode_tps(records) -> float:
    first = min(r.t_first_token_ns for r in records)
    last = max(r.token_ns[-1] for r in records)
    return sum(len(r.token_ns) - 1 for r in records) / ((last - first) / 1e9)


def steady_tps(stamps: list[int], b: int) -> float:
    """B tokens per median step of a wave (stamps: its distinct step times, ascending)."""
    return b / (statistics.median(y - x for x, y in zip(stamps, stamps[1:])) / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=auto_threads(1))
    ap.add_argument("--bs", type=lambda t: tuple(sorted({int(x) for x in t.split(",")} | {1, 2, 8, 16})),
                    default=BS, help="batch sizes (default 1,2,4,8,16; 1, 2, 8 and 16 always)")
    ap.add_argument("--quick", action="store_true", help="one round of B = 1, 2, 8, 16 at 32 tokens, and the full "
                    "run's estimated time")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.tokens, a.bs = 1, 32, QUICK_BS
    t_start = time.monotonic()
    bs_run = a.bs
    choice = resolve_model("llama", None)
    wl = presets.Workload("batching", "one prompt", (PROMPT,))
    ctx = 256
    spec = build_spec("llama", choice, a.threads, ctx, 1)
    fleet = Fleet(spec, run_meta("llama", choice, "batch", 1), k=1, threads=a.threads, b_cap=max(BS))
    fleet.start()
    res = {b: ([], []) for b in bs_run}  # per B: (bare, fleet) lists of (wave tok/s, steady tok/s)
    level_s: dict[int, float] = {}  # per B: one round's time (bare + fleet), the last round's
    try:
        for r in range(a.rounds):
            for b in bs_run:
                t_level = time.monotonic()
                stamps = bare(str(choice.path), a.threads, b, a.tokens, ctx)
                res[b][0].append((b * (len(stamps) - 1) / ((stamps[-1] - stamps[0]) / 1e9), steady_tps(stamps, b)))
                fleet.set_batch("batch", b)
                recs = fleet.run_requests(Load(wl, ClosedLoop(b, total=b), a.tokens, True), timeout=600)
                res[b][1].append((decode_tps(recs), steady_tps(sorted({t for x in recs for t in x.token_ns}), b)))
                level_s[b] = time.monotonic() - t_level
                (bw, bs), (fw, fs) = res[b][0][-1], res[b][1][-1]
                print(f"round {r + 1} B={b:>2}: bare {bw:6.1f}  fleet {fw:6.1f} tok/s   steady: bare {bs:6.1f}  "
                      f"fleet {fs:6.1f} tok/s", flush=True)
    finally:
        fleet.close()
    # equal concurrency 2: two single-stream instances (cores ÷ 2 threads each) vs one engine with B=2
    inst_fleet = Fleet(build_spec("llama", choice, None, ctx, 2), run_meta("llama", choice), k=2)
    inst_fleet.start()
    t_inst = time.monotonic()
    try:
        inst = statistics.median(
            decode_tps(inst_fleet.run_requests(Load(wl, ClosedLoop(2, total=2), a.tokens, True), timeout=600))
            for _ in range(a.rounds))
    finally:
        inst_fleet.close()
    inst_s = (time.monotonic() - t_inst) / a.rounds
    print(f"\nthreads {a.threads}, {a.tokens} tokens per sequence, median of {a.rounds} rounds")
    print(f"{'':>3} {'wave (first → last token)':^38} {'steady (B ÷ median step)':^38}")
    print(f"{'B':>3} {'bare tok/s':>11} {'fleet tok/s':>12} {'fleet/bare':>11}  "
          f"{'bare tok/s':>11} {'fleet tok/s':>12} {'fleet/bare':>11}")
    # med[b][side][0 wave | 1 steady]: the median over rounds of each figure
    med = {b: tuple(tuple(statistics.median(x[i] for x in res[b][side]) for i in (0, 1)) for side in (0, 1))
           for b in bs_run}
    for b in bs_run:
        (bw, bs), (fw, fs) = med[b]
        print(f"{b:>3} {bw:>11.1f} {fw:>12.1f} {fw / bw:>11.3f}  {bs:>11.1f} {fs:>12.1f} {fs / bs:>11.3f}")
    hi, lo = max(bs_run), min(bs_run)
    head = {
        "fleet_over_bare_b8": med[8][1][0] / med[8][0][0],
        "fleet_over_bare_b16": med[hi][1][0] / med[hi][0][0],
        "fleet_gain_b16": med[hi][1][0] / med[lo][1][0],
        "bare_gain_b16": med[hi][0][0] / med[lo][0][0],
        "steady_fleet_over_bare_b16": med[hi][1][1] / med[hi][0][1],
        "steady_fleet_gain_b16": med[hi][1][1] / med[lo][1][1],
        "steady_bare_gain_b16": med[hi][0][1] / med[lo][0][1],
        "k2_instances_tps": inst,
        "b2_batch_tps": med[2][1][0],
    }
    print(f"fleet B=16 ÷ B=1: {head['fleet_gain_b16']:.2f}× (bare {head['bare_gain_b16']:.2f}×; goal ≥ 3×); "
          f"fleet/bare at B=8: {head['fleet_over_bare_b8']:.3f} (goal ≥ 0.90), at B=16: "
          f"{head['fleet_over_bare_b16']:.3f} (goal ≥ 0.95); steady: fleet/bare at B=16 "
          f"{head['steady_fleet_over_bare_b16']:.3f}, B=16 ÷ B=1 {head['steady_fleet_gain_b16']:.2f}× "
          f"(bare {head['steady_bare_gain_b16']:.2f}×)")
    print(f"concurrency 2: K=2 instances {inst:.1f} tok/s vs B=2 batch {med[2][1][0]:.1f} tok/s")
    wall = time.monotonic() - t_start
    timing = run_times(a, wall, level_s, inst_s)
    print(f"this run: {wall:.0f} s" + (f"; the full run (3 rounds of B = {', '.join(map(str, BS))} at 64 tokens) "
                                       f"takes about {timing['full_run_estimate_s'] / 60:.1f} min here"
                                       if a.quick else ""))
    print(json.dumps({**{k: round(v, 3) for k, v in head.items()}, **timing}))


def run_times(a, wall: float, level_s: dict[int, float], inst_s: float) -> dict:
    """The run's own time, and (--quick) the full run's estimate: this run's setup (all but its levels) + 3 rounds
    of every B of the full run, each B's level time here × 64 ÷ its tokens (a B not run: interpolated)."""
    out: dict = {"quick": a.quick, "wall_s": round(wall, 1), "level_s": {str(b): round(t, 1) for b, t in level_s.items()}}
    if not a.quick:
        return out
    ran = sorted(level_s)
    scale = 64 / a.tokens
    per_round = sum(float(np.interp(b, ran, [level_s[x] for x in ran])) for b in BS) * scale + inst_s * scale
    setup = wall - sum(level_s.values()) - inst_s * a.rounds
    out["full_run_estimate_s"] = round(setup + 3 * per_round)
    return out


if __name__ == "__main__":
    main()
