"""llama.cpp's CPU batch step, `llama_decode` alone, at each B: the passes tinyBLAS makes over its matrices
(presets/kernels.toml [cpu]; docs/design/kernels.md, "The CPU") against what the roofline prices from the probe.

One context of B sequences (the engine's own batch path, llama-cpp-python), each prompted, then 12 steps of one
token each, timed around llama_decode only (no sampling, no Python around it); the median of the steps past the
second, and the median over --rounds rounds (the B values in turn, each round). Beside each B: the passes the
build's tile width gives, the roofline's prediction of the same step (roofline.predict from the cached probe, no
calibration: base × (1 + s × a second pass) + B × seq), and B ÷ the B below it for the steps that take a second pass.

Ends with one JSON line: each B's step, its passes, the prediction, and the mean cost of a column past a whole
tile over the one before it ("second_pass_ms").

    python benchmarks/cpu_passes.py [--bs 1,2,3,4,5,8,9,12,13,16] [--rounds 3] [--threads 2] [--model PATH]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = 12  # timed steps a round; the first two are left out (the context's first steps settle)


def time_steps(engine: object, toks: list[int], b: int) -> float:
    """The median llama_decode time (s) of one step of b sequences, one token each, in a fresh batch context."""
    bt = engine.batch(b, 128)  # type: ignore[attr-defined]
    try:
        for i in range(b):
            bt.add(i, toks, 40, True)
        while any(s.last is None for s in bt.seqs.values()):  # the prompts, in as few steps as fit
            bt.step()
        lib, ts = engine._lib, []  # type: ignore[attr-defined]
        for _ in range(STEPS):
            n, outs = bt._fill()
            bt.batch.n_tokens = n
            t0 = time.perf_counter()
            if lib.llama_decode(bt.ctx, bt.batch) != 0:
                raise RuntimeError(f"llama_decode failed at B = {b}")
            ts.append(time.perf_counter() - t0)
            for s in outs:
                s.last = 1  # the next token: any id (the step's cost does not depend on which)
        return statistics.median(ts[2:])
    finally:
        bt.close()


def main(argv: list[str] | None = None) -> int:
    from engines.base import EngineSpec, Prompt
    from engines.gguf_file import inspect_gguf
    from engines.registry import make_engine
    from measure.core import roofline as RL
    from measure.core.work import from_gguf
    from measure.machine.ceilings import cached
    from measure.machine.model_choice import resolve_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bs", default="1,2,3,4,5,8,9,12,13,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=None, help="a GGUF (default: the embedded Gemma 3 270M)")
    args = ap.parse_args(argv)
    try:
        bs = sorted({int(x) for x in args.bs.split(",")})
    except ValueError:
        ap.error(f"--bs {args.bs!r}: give batch sizes such as 1,4,5,8")
    if not bs or bs[0] < 1 or args.rounds < 1 or args.threads < 1:
        ap.error("--bs, --rounds and --threads must be positive")
    path = args.model or str(resolve_model("llama", None, lambda m: None).path)
    work = from_gguf(inspect_gguf(path))
    e = make_engine(EngineSpec("llama", path, threads=args.threads, ctx=512))
    e.load()
    features = e.cpu_features()  # type: ignore[attr-defined]
    tile, share, note = RL.cpu_batch_path(work, features)
    print(note or f"no tinyBLAS second pass on this build and model (features: {' '.join(features)})")
    toks = e.tokenize(Prompt("cpu_passes", text="The history of the printing press begins"))
    runs: dict[int, list[float]] = {b: [] for b in bs}
    for _ in range(args.rounds):
        for b in bs:
            runs[b].append(time_steps(e, toks, b))
    e.close()
    c = cached()
    m = RL.Machine.from_ceilings(c, work) if c is not None and c.engine.get("cpu_features") is not None else None
    rows, extra = [], []
    for b in bs:
        t = statistics.median(runs[b])
        passes = RL.cpu_passes(tile, b)
        at = RL.Lengths(prompt_tokens=len(toks), output_tokens=2 * STEPS, context=len(toks) + STEPS)
        pred = RL.predict(work, m, "batch", 1, b, args.threads, at=at).tpot_s if m is not None and m.step_core_s else None
        below = max((x for x in bs if x < b), default=None)
        if passes == 2 and below is not None and RL.cpu_passes(tile, below) == 1 and b - below == 1:
            extra.append(t - statistics.median(runs[below]))
        rows.append({"b": b, "step_ms": round(t * 1e3, 2), "passes": passes,
                     "predicted_ms": None if pred is None else round(pred * 1e3, 2),
                     "runs_ms": [round(x * 1e3, 2) for x in runs[b]]})
        shown = f"{pred * 1e3:6.1f} ms ({pred / t - 1:+.0%})" if pred else "     —"
        print(f"B={b:3d}  passes {passes}  llama_decode {t * 1e3:6.1f} ms  probe's price {shown}", flush=True)
    if extra:
        print(f"a column past a whole tile costs {statistics.mean(extra) * 1e3:.1f} ms over the tile's step "
              f"(mean of {len(extra)}); the probe prices its second pass {share:.0%} of a batched step's fixed part")
    print(json.dumps({"tile": tile, "repass_share": round(share, 4), "threads": args.threads, "features": features,
                      "second_pass_ms": round(statistics.mean(extra) * 1e3, 2) if extra else None, "steps": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
