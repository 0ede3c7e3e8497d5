"""The mlx-lm engine in one run: batching, the BLAS it runs on, and the fleet's overhead.

On the embedded model converted for mlx (float32), same threads everywhere:
  (a) bare: mlx-lm's BatchGenerator driven straight in this process, B sequences inserted at once;
  (b) fleet: one mlx worker in batch mode serving B requests through the shared queue;
  (c) fleet on the mlx[cpu] wheel's own reference BLAS (no OpenBLAS shim), B = 1 and 4;
  (d) K=2 single-stream instances vs one engine at B=2 (equal concurrency).
Aggregate decode tok/s = Σ (N − 1) decode tokens ÷ (last token − first token of the wave).
Prints (b)/(a) per B (goal ≥ 0.90), B=4 ÷ B=1, and OpenBLAS shim ÷ reference BLAS.

    python benchmarks/mlx_engine.py [--tokens 32] [--rounds 1] [--threads N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import presets  # noqa: E402
from measure.machine.probes import auto_threads  # noqa: E402
from measure.sources.fleet import Fleet  # noqa: E402
from measure.machine.model_choice import build_spec, resolve_model, run_meta  # noqa: E402
from measure.core.workload import ClosedLoop, Load  # noqa: E402
from batching import decode_tps  # noqa: E402  (benchmarks/batching.py: the same wave metric)
from engines.mlx_blas import REFERENCE  # noqa: E402

BS = (1, 2, 4, 8)
PROMPT = presets.workload("default").prompts[0]


def bare(engine, b: int, n_tokens: int) -> float:
    """B sequences into one BatchGenerator at once; decode tok/s from the first to the last token."""
    from mlx_lm.generate import BatchGenerator

    from engines.base import Prompt

    ids = engine.tokenize(Prompt("p", text=PROMPT))
    gen = BatchGenerator(engine.model, stop_tokens=None, completion_batch_size=b, prefill_batch_size=b)
    gen.insert([ids] * b, max_tokens=[n_tokens] * b)
    first = None
    n = 0
    left = b
    while left:
        _, responses = gen.next()
        t = time.perf_counter_ns()
        if responses and first is None:
            first = t
        else:
            n += len(responses)
        left -= sum(1 for r in responses if r.finish_reason)
    gen.close()
    return n / ((t - first) / 1e9)


def fleet_runs(spec, choice, wl, bs, n_tokens: int, rounds: int, label: str, k: int = 1,
               mode: str = "batch") -> dict[int, list[float]]:
    """One fleet (loaded once); for each B a wave of B requests (K for instances) per round."""
    f = Fleet(spec, run_meta("mlx", choice, mode, bs[0]), k=k, threads=spec.threads, b_cap=max(BS))
    f.start()
    out = {}
    try:
        for b in bs:
            if mode == "batch":
                f.set_batch(mode, b)
            n = b if mode == "batch" else k
            out[b] = [decode_tps(f.run_requests(Load(wl, ClosedLoop(n, total=n), n_tokens, True), timeout=900))
                      for _ in range(rounds)]
            print(f"{label} {'B' if mode == 'batch' else 'K'}={n}: {statistics.median(out[b]):.1f} tok/s", flush=True)
    finally:
        f.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=auto_threads(1))
    a = ap.parse_args()
    choice = resolve_model("mlx", None)
    spec = build_spec("mlx", choice, a.threads, 256, 1)
    wl = presets.Workload("mlx", "one prompt", (PROMPT,))
    from engines.mlx_lm import MlxLmEngine

    eng = MlxLmEngine(spec)
    eng.load()  # loads the shim before mlx, as a worker does
    eng.warmup()
    bare_tps = {b: [] for b in BS}
    for r in range(a.rounds):
        for b in BS:
            bare_tps[b].append(bare(eng, b, a.tokens))
            print(f"round {r + 1} bare B={b}: {bare_tps[b][-1]:.1f} tok/s", flush=True)
    eng.close()
    ref_spec = replace(spec, options={**spec.options, "mlx_blas_shim": None, "mlx_openblas": None, "blas": REFERENCE})
    fleet = fleet_runs(spec, choice, wl, BS, a.tokens, a.rounds, "fleet")
    ref = fleet_runs(ref_spec, choice, wl, (1, 4), a.tokens, a.rounds, "fleet on the reference BLAS")
    inst = fleet_runs(build_spec("mlx", choice, None, 256, 2), choice, wl, (1,), a.tokens, a.rounds, "instances",
                      k=2, mode="instances")[1]
    med = {b: (statistics.median(bare_tps[b]), statistics.median(fleet[b])) for b in BS}
    print(f"\nthreads {a.threads}, {a.tokens} tokens per sequence, median of {a.rounds}; BLAS: {spec.options['blas']}")
    print(f"{'B':>3} {'bare tok/s':>11} {'fleet tok/s':>12} {'fleet/bare':>11}")
    for b in BS:
        print(f"{b:>3} {med[b][0]:>11.1f} {med[b][1]:>12.1f} {med[b][1] / med[b][0]:>11.3f}")
    print(f"fleet B=4 ÷ B=1: {med[4][1] / med[1][1]:.2f}×;  B=8 ÷ B=1: {med[8][1] / med[1][1]:.2f}×")
    r1, r4 = statistics.median(ref[1]), statistics.median(ref[4])
    print(f"reference BLAS: B=1 {r1:.1f}, B=4 {r4:.1f} tok/s (B=4 ÷ B=1 {r4 / r1:.2f}×); "
          f"OpenBLAS shim ÷ reference: B=1 {med[1][1] / r1:.2f}×, B=4 {med[4][1] / r4:.2f}×")
    print(f"concurrency 2: K=2 instances {statistics.median(inst):.1f} tok/s vs B=2 batch {med[2][1]:.1f} tok/s")
    print(json.dumps({"fleet_over_bare": {str(b): round(med[b][1] / med[b][0], 4) for b in BS},
                      "fleet_gain_b4": round(med[4][1] / med[1][1], 3), "fleet_gain_b8": round(med[8][1] / med[1][1], 3),
                      "shim_over_reference_b1": round(med[1][1] / r1, 3), "shim_over_reference_b4": round(med[4][1] / r4, 3),
                      "k2_instances_tps": round(statistics.median(inst), 2), "b2_batch_tps": round(med[2][1], 2)}))


if __name__ == "__main__":
    main()
