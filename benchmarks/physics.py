"""Does the roofline explain published llama.cpp decode rates? For every point of benchmarks/data/published.toml
(chips we do not own: Apple M1–M4, DGX Spark, RTX cards, Strix Halo; dense and MoE models; one stream and
llama-batched-bench batches) predict the rate with the project's own work model and roofline and print
predicted against published; the last line is one JSON object:
{"points": N, "median_error": x, "worst_error": y, "fitted": {…}, "held_out": {…}, …} (errors are
|predicted − published| ÷ published).

    python benchmarks/physics.py [--data PATH] [--chip KEY]
    python benchmarks/physics.py --fit [--data PATH]

`--fit` re-derives each chip's `effective_bandwidth_gbps` and `step_overhead_ms` (presets/chips.toml) by least
squares on 1/tok_s = overhead + bytes read per step ÷ effective bandwidth over the rows marked role = "fit"
(dense models, one stream), with the bytes the predictor itself uses (work.from_preset(...).bytes_per_step at
the row's context). The overhead is kept ≥ 0 (a negative one is refitted through the origin). A chip whose fit
rows all read the same bytes (one dense row: the CUDA scoreboard's RTX cards) cannot separate the
two: its overhead is the one fitted on a chip of the same llama.cpp backend with several rows (FIXED_OVERHEAD
names it) and only the bandwidth is fitted. A mixture of experts' cost a routing layer (`moe_layer_ms`) is one
figure per llama.cpp backend (BACKENDS), least squares over that backend's single-stream MoE rows marked fit
(fit_moe). Held-out rows (the other MoE rows, batches, sliding-window models at depth, a second build) are never
fitted: they test the model.

The machine: Machine.from_chip(chip), the chip's effective bandwidth and its cost per step, and at B ≥ 2 the
matmul kernels llama.cpp's backend runs at that B (presets/kernels.toml, read from llama.cpp's source: vectors up
to B = 8, then tiles, B rounded up to the tile; roofline.kernel_time), their arithmetic priced at the chip's prefill
FLOP/s (`prefill_tflops`: --fit takes the median over the chip's published prompt rates, benchmarks/data/
prompt_rates.toml) × two efficiencies fitted by --fit on the dense llama-batched-bench rows marked fit
(kernels.toml [fitted]); the routing correlation ρ of a trained MoE router (work.ROUTING_CORRELATION) and what a
routing layer costs more at B ≥ 2 on CUDA (kernels.toml [cuda] moe_batch_layer_ms: llama.cpp fuses a MoE layer's
ops for one token only): the pair that best explains the MoE batch rows marked fit (one model's, B = 2 … 32; least
squares on log rate over ρ in steps of 0.005 and the cost in steps of 0.005 ms), the other MoE models' batches
held out.

Weight types (benchmarks/data/quant_types.toml: one model on one chip at several types): the vector kernels' decoding
of K-quant weights costs a step kquant_ops_per_weight FLOP-equivalents a weight at the chip's prefill FLOP/s beside its
bytes (roofline.dequant_time; kernels.toml [fitted]), one figure fitted by --fit on the K-quant rows marked fit
(fit_quant); K-quant rows never draw a chip's line (fit_chips). Legacy quants and floats cost their bytes. The rows
are printed after leave-one-source-out with their bytes only and with the decoding, and the held-out errors by type.

Leave one source out (printed after the table; "leave_one_source_out" in the JSON line): each source of
published.toml, of benchmarks/data/batched_sources.toml (llama.cpp's own bench files: M2 Ultra, two DGX Spark
builds; every row held out) and of quant_types.toml (but the sources it names outside_loso) predicted from every
figure above fitted again on the other sources' rows and prompt rates only (fold_figures); a chip the other sources never measured takes its backend's figures (machine_for).
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).parent / "data" / "published.toml"
RATES = Path(__file__).parent / "data" / "prompt_rates.toml"  # the same tables' prompt rates (pp columns)
MORE = Path(__file__).parent / "data" / "batched_sources.toml"  # further sources: every row held out
QUANT = Path(__file__).parent / "data" / "quant_types.toml"  # one model on one chip at several weight types
GOAL = (0.05, 0.15)  # issue 42: median and worst |error| over every point of the chosen set
# A chip fitted on one dense row takes its per-step overhead from a chip of the same llama.cpp backend fitted on
# several (see the module docstring): the CUDA cards from DGX Spark (CUDA, six dense rows).
FIXED_OVERHEAD = {"nvidia-rtx-5090": "nvidia-dgx-spark", "nvidia-rtx-pro-6000": "nvidia-dgx-spark",
                  "nvidia-rtx-4090": "nvidia-dgx-spark", "nvidia-rtx-3090": "nvidia-dgx-spark"}
# The llama.cpp backend whose kernels a chip's rows ran (by key prefix): a mixture of experts' cost a routing layer
# (chips.toml moe_layer_ms) is fitted per backend. Strix Halo's MoE rows ran ROCm, the CUDA backend built with HIP.
BACKENDS = {"apple-": "Metal", "nvidia-": "CUDA", "amd-strix-halo": "CUDA"}


# The micro-batch (llama.cpp -ub) of each source's runs where it is not llama.cpp's default (512): llama.cpp's own bench
# files ran -ub 2048 (batched_sources.toml's header; published.toml's spark rows, its header). A windowed layer's cache
# holds the window + one micro-batch, and CUDA's attention reads all of it (roofline.window_cells).
UBATCH = {"spark": 2048, "spark6989": 2048, "spark7941": 2048, "m2u": 2048}


def ubatch(p: dict[str, Any]) -> int:
    from measure.core.work import LLAMA_UBATCH

    return UBATCH.get(p["source"], LLAMA_UBATCH)


def backend(chip_key: str) -> str:
    for prefix, name in BACKENDS.items():
        if chip_key.startswith(prefix):
            return name
    raise ValueError(f"chip {chip_key!r}: no llama.cpp backend known for it (physics.BACKENDS)")


def load(path: Path = DATA) -> dict[str, Any]:
    with open(path, "rb") as f:
        data: dict[str, Any] = tomllib.load(f)
    for p in data["point"]:
        if p["source"] not in data["sources"]:
            raise ValueError(f"{path}: point {p['chip']} {p['model']} names unknown source {p['source']!r}")
        if p["role"] not in ("fit", "held-out") or p["per"] not in ("stream", "aggregate"):
            raise ValueError(f"{path}: point {p['chip']} {p['model']}: role must be fit|held-out, per stream|aggregate")
    return data


def load_rates(*paths: Path) -> list[dict[str, Any]]:
    """Every published prompt rate ([[rate]]) of these files."""
    out: list[dict[str, Any]] = []
    for path in paths:
        with open(path, "rb") as f:
            out += tomllib.load(f).get("rate", [])
    return out


def fit_prefill(rates: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per chip: the prefill FLOP/s its published prompt rates attain (the tiled kernels' arithmetic): the median
    over its rows at depth 0 of rate × the FLOPs a prompt token of that length takes (work.prefill_flops ÷ pp).
    Rows whose model has no preset are left out."""
    from presets import PresetError

    by_chip: dict[str, list[float]] = {}
    for r in rates:
        if int(r.get("depth", 0)) != 0:
            continue
        try:
            wm = _work(r["model"])
        except PresetError:
            continue
        by_chip.setdefault(r["chip"], []).append(wm.prefill_flops(int(r["pp"])) / int(r["pp"]) * float(r["tok_s"]))
    return {c: {"prefill_tflops": statistics.median(v) / 1e12, "rows": len(v)} for c, v in sorted(by_chip.items())}


@functools.cache
def _work(model_key: str) -> Any:
    from measure.core import work as W
    from presets import model

    return W.from_preset(model(model_key))


def fit_kernels(points: list[dict[str, Any]], machine_of: Any = None) -> dict[str, Any]:
    """The two efficiencies of the kernel path (presets/kernels.toml [fitted]): a further column's arithmetic in
    the vector kernels and a tile column's in the tiled ones, each × the chip's prefill FLOP/s; least squares on
    log(predicted ÷ published) over the dense llama-batched-bench rows marked fit, on a grid of 0.05 then 0.005."""
    import dataclasses

    rows = [p for p in points if p["role"] == "fit" and int(p["b"]) > 1 and "moe" not in p.get("needs", "")]
    machines = {p["chip"]: machine_of(p["chip"]) if machine_of else _row_setup(p["chip"], p["model"])[1]
                for p in rows}
    rows = [p for p in rows if machines[p["chip"]].kernels is not None and machines[p["chip"]].prefill_flops]
    if not rows:
        raise ValueError("no dense batch row marked fit on a chip with a kernel path and a prompt rate")

    def rate(p: dict[str, Any], nu: float, ka: float) -> float:
        m = machines[p["chip"]]
        return predict_point(p, machine=dataclasses.replace(
            m, kernels=dataclasses.replace(m.kernels, vector_efficiency=nu, tile_efficiency=ka)))

    # a row's step is t₀ + a/ν + b/κ (roofline.kernel_time: each regime's arithmetic ÷ its efficiency), so three
    # predictions a row give its parts and the grid is arithmetic on them
    parts = []
    for p in rows:
        t11, t_v, t_k = (1.0 / rate(p, nu, ka) for nu, ka in ((1.0, 1.0), (1e12, 1.0), (1.0, 1e12)))
        parts.append((t_v + t_k - t11, t11 - t_v, t11 - t_k, p["tok_s"]))  # (t₀, a, b) at ν = κ = 1

    def loss(nu: float, ka: float) -> float:
        return sum(math.log(1.0 / (t0 + a / nu + b / ka) / tok) ** 2 for t0, a, b, tok in parts)

    _, nu, ka = min((loss(i / 20, j / 20), i / 20, j / 20) for i in range(1, 41) for j in range(1, 41))
    _, nu, ka = min((loss(nu + i / 200, ka + j / 200), round(nu + i / 200, 3), round(ka + j / 200, 3))
                    for i in range(-9, 10) for j in range(-9, 10) if nu + i / 200 > 0 and ka + j / 200 > 0)
    return {"vector_efficiency": nu, "tile_efficiency": ka, "rows": [f"{p['chip']}: {p['row']}" for p in rows],
            "residuals": [rate(p, nu, ka) / p["tok_s"] - 1.0 for p in rows]}


def context(p: dict[str, Any]) -> int:
    """The KV tokens a decode step of this row reads on average: its depth + half the tokens it generates."""
    return int(p["depth"]) + int(p["tg"]) // 2


def step_bytes(p: dict[str, Any], b: int = 1) -> float:
    """Bytes one decode step of `b` sequences of this row reads, as the predictor counts them."""
    import dataclasses

    from measure.core.roofline import step_reads

    wm, m = _row_setup(p["chip"], p["model"])
    return float(step_reads(wm, dataclasses.replace(m, ubatch=ubatch(p)), [context(p)] * b))


def fit_line(xs: list[float], ys: list[float], overhead: float | None = None) -> tuple[float, float]:
    """Least squares y = overhead + x · slope; (overhead, slope). `overhead` given: only the slope is fitted
    (through that intercept). A negative fitted intercept is refitted through the origin (a step never costs
    less than its bytes)."""
    if not xs or len(xs) != len(ys):
        raise ValueError("fit_line needs as many x as y, at least one")
    if overhead is None and len(set(xs)) >= 2:
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        if my - slope * mx >= 0:
            return my - slope * mx, slope
        overhead = 0.0
    if overhead is None:
        raise ValueError("one distinct x cannot fix both the overhead and the slope: pass the overhead")
    slope = sum(x * (y - overhead) for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    return overhead, slope


def attention_s(p: dict[str, Any], machine: Any) -> float:
    """Seconds a single-stream step of this row spends on its attention's arithmetic on `machine` (roofline
    kernel_time at B = 1: 0 without a kernel path or a prompt rate)."""
    import dataclasses

    from measure.core.roofline import kernel_time

    wm, _ = _row_setup(p["chip"], p["model"])
    return kernel_time(wm, dataclasses.replace(machine, ubatch=ubatch(p)), 1, context(p))[0]


def fit_chips(points: list[dict[str, Any]], machine_of: Any = None) -> dict[str, dict[str, Any]]:
    """Per chip: effective GB/s, overhead ms, the rows fitted and their residuals (chips of FIXED_OVERHEAD, and
    chips whose rows all read the same bytes, after the chips they borrow their overhead from). A chip with no
    dense single-stream row marked fit is not fitted (its backend's figures stand for it: machine_for).
    `machine_of` (chip → Machine with a kernel path and a prompt rate): each row's time less its attention's
    arithmetic (attention_s) is what the line explains; without it the whole time (the first pass, before the
    kernel path's efficiency is fitted)."""
    from presets import chip

    dense = {c: [p for p in points if p["chip"] == c and p["role"] == "fit" and int(p["b"]) == 1
                 and "moe" not in p.get("needs", "") and not kquant(p)] for c in sorted({p["chip"] for p in points})}
    several = {c: len({step_bytes(p) for p in rows}) >= 2 for c, rows in dense.items()}
    chips = sorted((c for c, rows in dense.items() if rows), key=lambda c: (c in FIXED_OVERHEAD or not several[c], c))
    out: dict[str, dict[str, Any]] = {}
    for c in chips:
        rows = dense[c]
        xs = [step_bytes(p) for p in rows]
        m = machine_of(c) if machine_of else None  # the chip's machine, once for its rows
        ys = [1.0 / p["tok_s"] - (attention_s(p, m) if m is not None else 0.0) for p in rows]
        fixed, source = None, ""
        if c in FIXED_OVERHEAD and FIXED_OVERHEAD[c] in out:
            source = FIXED_OVERHEAD[c]
        elif len(set(xs)) < 2:  # one distinct x cannot fix both figures: the overhead of its backend's chips
            source = family_overhead_source(c, out)
        if source:
            fixed = out[source]["step_overhead_ms"] / 1e3 if source in out else family_overhead_ms(c, out) / 1e3
        o, slope = fit_line(xs, ys, fixed)
        spec = chip(c).bandwidth_gbps * 1e9
        if source and spec and slope < 1.0 / spec:  # a borrowed overhead that leaves the bytes faster than the
            # chip's memory can move them: the bytes at the spec bandwidth, the overhead what the rows leave
            slope = 1.0 / spec
            o = max(0.0, statistics.fmean(y - x * slope for x, y in zip(xs, ys)))
            source += ", less: at it the bytes would beat the spec bandwidth"
        out[c] = {"effective_bandwidth_gbps": 1.0 / slope / 1e9, "step_overhead_ms": o * 1e3,
                  "overhead_from": source, "rows": [r["row"] for r in rows],
                  "sources": sorted({r["source"] for r in rows}),
                  "residuals": [(o + x * slope + 1.0 / r["tok_s"] - y) * r["tok_s"] - 1.0
                                for x, y, r in zip(xs, ys, rows)]}
    return out


def kquant(p: dict[str, Any]) -> bool:
    """A row whose weights are K-quants: the vector kernels' decoding may bind it, so it never draws a chip's line
    (fit_chips); it fits that decoding's cost (fit_quant)."""
    from measure.core.work import quant_family

    return bool(quant_family(_work(p["model"]).quant) == "k")


def fit_quant(points: list[dict[str, Any]], machine_of: Any = None) -> dict[str, Any]:
    """The K-quants' decoding cost (kernels.toml kquant_ops_per_weight: FLOP-equivalents a weight at the chip's
    prefill FLOP/s, roofline.dequant_time) that best explains the single-stream K-quant rows marked fit: least
    squares on log(predicted ÷ published) over 0, 0.5, … 60 then ± 0.45 in steps of 0.05, the smallest of equal
    losses (a cost that never binds leaves the bytes). No such row: 0 (their bytes only), said as a prior."""
    import dataclasses

    rows = [p for p in points if p["role"] == "fit" and int(p["b"]) == 1 and kquant(p)]
    machines = {p["chip"]: machine_of(p["chip"]) if machine_of else _row_setup(p["chip"], p["model"])[1] for p in rows}
    rows = [p for p in rows if machines[p["chip"]].kernels is not None and machines[p["chip"]].prefill_flops]
    if not rows:
        return {"kquant_ops_per_weight": 0.0, "rows": [], "residuals": [], "prior": True}

    def rate(p: dict[str, Any], c: float) -> float:
        m = machines[p["chip"]]
        assert m.kernels is not None
        return predict_point(p, machine=dataclasses.replace(
            m, kernels=dataclasses.replace(m.kernels, kquant_ops_per_weight=c)))

    def loss(c: float) -> float:
        return round(sum(math.log(rate(p, c) / p["tok_s"]) ** 2 for p in rows), 12)

    _, c = min((loss(i / 2), i / 2) for i in range(121))
    _, c = min((loss(c + i / 20), round(c + i / 20, 2)) for i in range(-9, 10) if c + i / 20 >= 0)
    return {"kquant_ops_per_weight": c, "rows": [f"{p['chip']}: {p['row']}" for p in rows],
            "residuals": [rate(p, c) / p["tok_s"] - 1.0 for p in rows]}


def _several_rows(out: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c: f for c, f in out.items() if not f["overhead_from"]}


def family_overhead_source(chip_key: str, out: dict[str, dict[str, Any]]) -> str:
    """Where a chip whose rows cannot fix its overhead takes it from: the chips of its llama.cpp backend fitted on
    several rows ("backend:NAME"), else every such chip ("backend:any")."""
    name = backend(chip_key)
    return f"backend:{name}" if any(backend(c) == name for c in _several_rows(out)) else "backend:any"


def family_overhead_ms(chip_key: str, out: dict[str, dict[str, Any]]) -> float:
    """The median step overhead of the chips fitted on several rows, of chip_key's backend where there are any."""
    several = _several_rows(out)
    same = [f["step_overhead_ms"] for c, f in several.items() if backend(c) == backend(chip_key)]
    every = [f["step_overhead_ms"] for f in several.values()]
    if not (same or every):
        raise ValueError(f"{chip_key}: no chip fitted on several rows to take a step overhead from")
    return statistics.median(same or every)


def fit_routing(points: list[dict[str, Any]], machine_of: Any = None) -> dict[str, Any]:
    """The routing correlation ρ and the further cost of a routing layer at B ≥ 2 (kernels.toml moe_batch_layer_ms:
    llama.cpp fuses a MoE layer's ops for one token only) that best explain the MoE batch rows marked fit (one
    model's, B = 2 … 32: B = 2 shows the step from one token to two, the larger B the experts' overlap): least
    squares on log(predicted ÷ published) over ρ = 0, 0.005, … 0.5 and 0, 0.005, … 0.3 ms, each step priced by its
    chip's kernel path (roofline.kernel_time). For a given ρ a row's step is t(ρ) + L × the cost (L its routing
    layers), so one prediction a row and ρ gives the whole line of costs."""
    import dataclasses

    rows = [p for p in points if p["role"] == "fit" and p.get("needs") == "moe" and int(p["b"]) > 1]
    if not rows:
        raise ValueError("no MoE batch row is marked fit: nothing fixes the routing correlation")
    machines = {p["chip"]: machine_of(p["chip"]) if machine_of else _row_setup(p["chip"], p["model"])[1] for p in rows}

    def rate(p: dict[str, Any], rho: float, batch_ms: float) -> float:
        m = dataclasses.replace(machines[p["chip"]], moe_batch_layer_s=batch_ms / 1e3)
        return predict_point(p, rho, machine=m)

    mult = [int(p["b"]) if p["per"] == "aggregate" else 1 for p in rows]
    layers = [moe_layers(p) for p in rows]
    best = (math.inf, 0.0, 0.0)
    for i in range(101):
        steps = [n / rate(p, i / 200, 0.0) for p, n in zip(rows, mult)]
        for j in range(61):
            loss = sum(math.log(n / (t + L * j / 200e3) / p["tok_s"]) ** 2
                       for t, L, n, p in zip(steps, layers, mult, rows))
            best = min(best, (loss, i / 200, j / 200))
    _, rho, batch_ms = best
    return {"routing_correlation": rho, "moe_batch_layer_ms": batch_ms, "rows": [p["row"] for p in rows],
            "backends": sorted({chip_backend(p["chip"]) for p in rows}),
            "residuals": [rate(p, rho, batch_ms) / p["tok_s"] - 1.0 for p in rows]}


def chip_backend(chip_key: str) -> str:
    """The llama.cpp backend chips.toml names for a chip (presets/kernels.toml's tables)."""
    from presets import chip

    return chip(chip_key).backend


def fit_moe(points: list[dict[str, Any]], machine_of: Any = None) -> dict[str, dict[str, Any]]:
    """Per backend: the fixed cost each routing layer adds to a step (moe_layer_ms), least squares on what each
    single-stream MoE row marked fit takes beyond its prediction without it: c = Σ L·(t − t₀) ÷ Σ L², L its
    model's routing layers, t its published step, t₀ the step predicted from its chip's figures alone."""
    by_backend: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        if p["role"] == "fit" and "moe" in p.get("needs", "") and int(p["b"]) == 1:
            by_backend.setdefault(backend(p["chip"]), []).append(p)
    out: dict[str, dict[str, Any]] = {}
    for name, rows in by_backend.items():
        ls = [moe_layers(p) for p in rows]
        ms = [machine_of(p["chip"]) if machine_of else None for p in rows]
        beyond = [1.0 / p["tok_s"] - 1.0 / predict_point(p, moe_layer_s=0.0, machine=m)
                  for p, m in zip(rows, ms)]  # t − t₀
        c = sum(n * d for n, d in zip(ls, beyond)) / sum(n * n for n in ls)
        out[name] = {"moe_layer_ms": c * 1e3, "rows": [f"{p['chip']}: {p['row']}" for p in rows],
                     "residuals": [predict_point(p, moe_layer_s=c, machine=m) / p["tok_s"] - 1.0
                                   for p, m in zip(rows, ms)]}
    return out


def moe_layers(p: dict[str, Any]) -> int:
    return int(_row_setup(p["chip"], p["model"])[0].moe_layers)


@functools.cache
def _row_setup(chip_key: str, model_key: str) -> tuple[Any, Any]:
    """The work model and machine of a row's preset and chip (read once: the fits predict each row many times)."""
    from measure.core import work as W
    from measure.core.roofline import Machine
    from presets import chip, model

    return W.from_preset(model(model_key)), Machine.from_chip(chip(chip_key))


def predict_point(p: dict[str, Any], correlation: float | None = None, moe_layer_s: float | None = None,
                  moe_batch_layer_s: float | None = None, machine: Any = None) -> float:
    """The predicted rate of this row: per stream, or B × per stream for an aggregate (llama-batched-bench's
    S_TG counts decode only: B sequences × TG tokens ÷ the decode time). `correlation`: the MoE router's ρ in
    place of the model's (the fit's trial values); `moe_layer_s` / `moe_batch_layer_s`: a routing layer's costs in
    place of the chip's; `machine`: a roofline Machine in place of the one chips.toml gives the row's chip (a
    leave-one-source-out fold's)."""
    import dataclasses

    from measure.core.roofline import Lengths, predict

    wm, m = _row_setup(p["chip"], p["model"])
    m = m if machine is None else machine
    if correlation is not None and wm.experts:
        wm = dataclasses.replace(wm, experts=dataclasses.replace(wm.experts, correlation=correlation))
    lengths = Lengths(prompt_tokens=int(p["depth"]) or 1, output_tokens=int(p["tg"]), context=context(p))
    if moe_layer_s is not None:
        m = dataclasses.replace(m, moe_layer_s=moe_layer_s)
    if moe_batch_layer_s is not None:
        m = dataclasses.replace(m, moe_batch_layer_s=moe_batch_layer_s)
    pr = predict(wm, dataclasses.replace(m, ubatch=ubatch(p)), "batch", 1, int(p["b"]), at=lengths)
    return pr.per_stream_tps * (int(p["b"]) if p["per"] == "aggregate" else 1)


LOSO_GOAL = (0.10, 0.25, 0.07)  # issue 55: each source's median and worst, the pooled held-out median
RHO_PRIOR = 0.0  # a fold with no MoE batch row to fit ρ on: routing independent across tokens (unfitted)


def machine_for(chip_key: str, fold: dict[str, Any]) -> Any:
    """The roofline Machine of a chip from a fold's figures (fold_figures) alone, never from chips.toml's or
    kernels.toml's fitted ones: a chip the fold fitted takes its own; one it did not takes its backend's (the median
    efficiency ÷ spec and the median step overhead of that backend's fitted chips, else of every fitted chip): what
    a chip nobody measured gets. Its prefill FLOP/s are the fold's prompt rates of it, else its backend's median
    FLOP/s per GB/s of bandwidth × its own bandwidth. A routing layer's cost is its backend's, else the median over
    the backends fitted; the kernel path's efficiencies are the fold's."""
    import dataclasses

    from measure.core.roofline import Machine
    from presets import chip, kernels

    c = chip(chip_key)
    chips, moe = fold["chips"], fold["moe"]
    m = Machine.from_chip(dataclasses.replace(c, effective_bandwidth_gbps=None, step_overhead_ms=None,
                                              batch_step_ms=None, seq_step_ms=None, moe_layer_ms=None,
                                              moe_batch_layer_ms=None, prefill_tflops=None), peers=())
    f = chips.get(chip_key)
    if f is not None:
        gbps, over = f["effective_bandwidth_gbps"], f["step_overhead_ms"]
    else:
        effs = {k: v["effective_bandwidth_gbps"] / chip(k).bandwidth_gbps for k, v in chips.items()}
        same = [e for k, e in effs.items() if backend(k) == backend(chip_key)]
        gbps = c.bandwidth_gbps * statistics.median(same or list(effs.values()))
        over = family_overhead_ms(chip_key, chips)
    moe_ms = (moe.get(backend(chip_key)) or {}).get("moe_layer_ms")
    if moe_ms is None:
        moe_ms = statistics.median(v["moe_layer_ms"] for v in moe.values()) if moe else 0.0
    pre = fold["prefill"].get(chip_key, {}).get("prefill_tflops")
    if pre is None:
        per_gb = [v["prefill_tflops"] / chip(k).bandwidth_gbps for k, v in fold["prefill"].items()
                  if chip(k).backend == c.backend and chip(k).bandwidth_gbps]
        pre = statistics.median(per_gb) * c.bandwidth_gbps if per_gb else None
    path = kernels(c.backend) if fold.get("kernels") else None
    if path is not None:
        path = dataclasses.replace(path, vector_efficiency=fold["kernels"]["vector_efficiency"],
                                   tile_efficiency=fold["kernels"]["tile_efficiency"],
                                   kquant_ops_per_weight=(fold.get("quant") or {}).get("kquant_ops_per_weight", 0.0))
    return dataclasses.replace(m, bandwidth_gbps=gbps, step_overhead_s=over / 1e3, batch_step_s=0.0, seq_step_s=0.0,
                               moe_layer_s=moe_ms / 1e3,
                               moe_batch_layer_s=fold["routing"]["moe_batch_layer_ms"] / 1e3
                               if pre and c.backend in fold["routing"].get("backends", ()) else 0.0,
                               kernels=path if pre else None, prefill_flops=pre * 1e12 if pre else None)


def fold_figures(train: list[dict[str, Any]], rates: list[dict[str, Any]]) -> dict[str, Any]:
    """Every figure physics.py fits, fitted on `train` (its rows, whatever their role) and `rates` alone, in the
    order --fit fits them: each chip's bandwidth and overhead, its prefill FLOP/s, the kernel path's efficiencies,
    a routing layer's cost per backend, ρ."""
    train = [dict(p, role="fit") for p in train if _has_preset(p)]
    fold: dict[str, Any] = {"chips": fit_chips(train), "moe": {}, "prefill": fit_prefill(rates), "kernels": None,
                            "routing": {"routing_correlation": RHO_PRIOR, "moe_batch_layer_ms": 0.0, "prior": True}}
    fold["kernels"] = {"vector_efficiency": 1.0, "tile_efficiency": 1.0}  # the path; fit_kernels sets both
    try:
        fold["kernels"] = fit_kernels(train, machine_of=lambda k: machine_for(k, fold))
    except ValueError:  # no dense batch row among the training sources: no kernel path, a batch costs its bytes
        fold["kernels"] = None
    if fold["kernels"] is not None:  # the chips' lines again, less each row's attention arithmetic, and ν, κ on them
        fold["chips"] = fit_chips(train, machine_of=lambda k: machine_for(k, {**fold, "moe": {}}))
        fold["kernels"] = fit_kernels(train, machine_of=lambda k: machine_for(k, fold))
    fold["moe"] = fit_moe(train, machine_of=lambda k: machine_for(k, {**fold, "moe": {}}))
    try:
        fold["routing"] = fit_routing(train, machine_of=lambda k: machine_for(k, fold))
    except ValueError:  # no MoE batch row among the training sources: ρ stays at its prior
        pass
    fold["quant"] = fit_quant(train, machine_of=lambda k: machine_for(k, fold))
    return fold


def _has_preset(p: dict[str, Any]) -> bool:
    from presets import models

    return p["model"] in models()


def leave_one_source_out(points: list[dict[str, Any]], rates: list[dict[str, Any]]) -> dict[str, Any]:
    """Each source's points (fit and held-out rows alike) predicted from figures fitted on the other sources only
    (issue 55), their prompt rates included: a row per source, and the pooled figures over every point so
    predicted. A point whose model has no preset cannot be predicted: counted apart ("no_preset")."""
    out: dict[str, Any] = {}
    pooled: list[float] = []
    by_quant: dict[str, list[float]] = {}
    for src in sorted({p["source"] for p in points}):
        fold = fold_figures([p for p in points if p["source"] != src], [r for r in rates if r["source"] != src])
        rows = [p for p in points if p["source"] == src and _has_preset(p)]
        errs = [predict_point(p, fold["routing"]["routing_correlation"], machine=machine_for(p["chip"], fold))
                / p["tok_s"] - 1.0 for p in rows]
        pooled += errs
        for p, e in zip(rows, errs):
            by_quant.setdefault(_work(p["model"]).quant or "?", []).append(e)
        out[src] = {**summary(errs), "by_backend": sorted({p["chip"] for p in rows} - set(fold["chips"])),
                    "rho": fold["routing"]["routing_correlation"], "rho_prior": bool(fold["routing"].get("prior")),
                    "kernels": ([fold["kernels"]["vector_efficiency"], fold["kernels"]["tile_efficiency"]]
                                if fold["kernels"] else None),
                    "kquant": fold["quant"]["kquant_ops_per_weight"],
                    "no_preset": sum(p["source"] == src and not _has_preset(p) for p in points)}
    med, worst, pool = LOSO_GOAL
    p = summary(pooled)
    met = p["median_error"] <= pool and all(v["median_error"] <= med and v["worst_error"] <= worst
                                            for v in out.values() if v["points"])
    return {"sources": out, "pooled": p, "by_quant": {q: summary(v) for q, v in sorted(by_quant.items())},
            "goal": {"source_median": med, "source_worst": worst, "pooled_median": pool, "met": met}}


def print_loso(loso: dict[str, Any]) -> None:
    print(f"\nleave one source out: each source predicted from figures fitted on the others only\n"
          f"{'source':<10} {'points':>6} {'median':>7} {'worst':>7}  ρ              ν / κ       K-quant  chips priced by "
          "their backend's figures")
    for src, v in loso["sources"].items():
        if not v["points"]:
            print(f"{src:<10} {0:>6}  (no point with a preset; {v['no_preset']} without)")
            continue
        print(f"{src:<10} {v['points']:>6} {v['median_error']:>7.1%} {v['worst_error']:>7.1%}  "
              f"{v['rho']:<5.3f}{' (prior)' if v['rho_prior'] else '        '} "
              + (f"{v['kernels'][0]:.3f}/{v['kernels'][1]:.3f}" if v["kernels"] else "bytes only ")
              + f"  {v['kquant']:>6.2f}  {', '.join(v['by_backend']) or '-'}"
              + (f"  ({v['no_preset']} points without a preset)" if v["no_preset"] else ""))
    p = loso["pooled"]
    print(f"{'pooled':<9} {p['points']:>6} {p['median_error']:>7.1%} {p['worst_error']:>7.1%}")
    print(f"\nleft out, by the weights' type (every source's points as above)\n{'type':<10} {'points':>6} {'median':>7} "
          f"{'worst':>7}")
    for q, v in loso["by_quant"].items():
        print(f"{q:<10} {v['points']:>6} {v['median_error']:>7.1%} {v['worst_error']:>7.1%}")


def summary(errs: list[float]) -> dict[str, Any]:
    a = [abs(e) for e in errs]
    return {"points": len(a), "median_error": round(statistics.median(a), 4) if a else None,
            "worst_error": round(max(a), 4) if a else None}


def report(data: dict[str, Any], only_chip: str | None) -> dict[str, Any]:
    rows = [p for p in data["point"] if not only_chip or p["chip"] == only_chip]
    if not rows:
        raise SystemExit(f"no published point for chip {only_chip!r}")
    print(f"{'chip':<20} {'model':<26} {'B':>3} {'ctx':>6} {'per':<5} {'published':>9} {'predicted':>9} {'error':>7}  role")
    errs: dict[str, list[float]] = {}
    for p in rows:
        pred = predict_point(p)
        e = pred / p["tok_s"] - 1.0
        group = "fit" if p["role"] == "fit" else "held-out:" + (p.get("needs") or "dense")
        errs.setdefault(group, []).append(e)
        print(f"{p['chip']:<20} {p['model']:<26} {p['b']:>3} {context(p):>6} {p['per'][:5]:<5} {p['tok_s']:>9.2f} "
              f"{pred:>9.2f} {e:>+7.1%}  {group}")
    every = [e for v in errs.values() for e in v]
    held = [e for g, v in errs.items() if g != "fit" for e in v]
    head = summary(every)
    return {**head, "goal": {"median_error": GOAL[0], "worst_error": GOAL[1],
                             "met": head["median_error"] <= GOAL[0] and head["worst_error"] <= GOAL[1]},
            "fitted": summary(errs.get("fit", [])),
            "held_out": {**summary(held), **{g.split(":", 1)[1]: summary(v) for g, v in errs.items() if g != "fit"}}}


def quant_report(data: dict[str, Any]) -> dict[str, Any]:
    """benchmarks/data/quant_types.toml's rows (one model, one chip, several weight types) predicted with the
    shipped figures, with their bytes only (kquant_ops_per_weight = 0) and with the K-quants' decoding cost: a row
    each, then the held-out rows' errors by weight type, both ways."""
    import dataclasses

    print(f"\none model at several weight types (quant_types.toml): their bytes only, and with the vector kernels' "
          f"K-quant decoding\n{'chip':<16} {'model':<26} {'type':<7} {'published':>9} {'bytes':>7} {'error':>7} "
          f"{'decoded':>7} {'error':>7}  role (source)")
    errs: dict[str, dict[str, list[float]]] = {}
    for p in data["point"]:
        m = _row_setup(p["chip"], p["model"])[1]
        bare = m if m.kernels is None else dataclasses.replace(
            m, kernels=dataclasses.replace(m.kernels, kquant_ops_per_weight=0.0))
        r0, r1 = predict_point(p, machine=bare), predict_point(p)
        e0, e1 = r0 / p["tok_s"] - 1.0, r1 / p["tok_s"] - 1.0
        if p["role"] != "fit":
            kind = errs.setdefault(p["quant"], {"bytes": [], "decoded": []})
            kind["bytes"].append(e0)
            kind["decoded"].append(e1)
        print(f"{p['chip']:<16} {p['model']:<26} {p['quant']:<7} {p['tok_s']:>9.2f} {r0:>7.2f} {e0:>+7.1%} {r1:>7.2f} "
              f"{e1:>+7.1%}  {p['role']} ({p['source']})")
    print(f"held out, by type: {'type':<7} {'points':>6} {'bytes only: median':>19} {'worst':>7} "
          f"{'decoded: median':>16} {'worst':>7}")
    out = {}
    for q, v in sorted(errs.items()):
        b, d = summary(v["bytes"]), summary(v["decoded"])
        out[q] = {"bytes_only": b, "decoded": d}
        print(f"{'':<19}{q:<7} {b['points']:>6} {b['median_error']:>19.1%} {b['worst_error']:>7.1%} "
              f"{d['median_error']:>16.1%} {d['worst_error']:>7.1%}")
    return out


def loso_points(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every point leave-one-source-out predicts: published.toml, batched_sources.toml and quant_types.toml's sources
    but those it names outside_loso."""
    quant = load(QUANT)
    points: list[dict[str, Any]] = data["point"] + load(MORE)["point"]
    return points + [p for p in quant["point"] if p["source"] not in quant.get("outside_loso", [])]


def fit_stored(points: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The chips' lines as chips.toml holds them: each row's attention arithmetic at the stored kernel path and
    prompt rate (kernels.toml, chips.toml) taken out first (fit_chips' second pass)."""
    from measure.core.roofline import Machine
    from presets import chip

    return fit_chips(points, machine_of=lambda c: Machine.from_chip(chip(c)))


def print_fit(data: dict[str, Any]) -> None:
    fits = fit_stored(data["point"])
    for c, f in fits.items():
        res = ", ".join(f"{r:+.1%}" for r in f["residuals"])
        print(f"[{c}]  effective_bandwidth_gbps = {f['effective_bandwidth_gbps']:.1f}  step_overhead_ms = "
              f"{f['step_overhead_ms']:.2f}" + (f"  (overhead from {f['overhead_from']})" if f["overhead_from"] else "")
              + f"  on {len(f['rows'])} rows; residuals {res}")
    for name, f in fit_moe(data["point"]).items():
        print(f"[{name}]  moe_layer_ms = {f['moe_layer_ms']:.4f}  on {len(f['rows'])} MoE rows; residuals "
              + ", ".join(f"{x:+.1%}" for x in f["residuals"]))
    for c, f in fit_prefill(load_rates(RATES)).items():
        print(f"[{c}]  prefill_tflops = {f['prefill_tflops']:.1f}  from {f['rows']} prompt rates")
    k = fit_kernels(data["point"])
    print(f"[kernels]  vector_efficiency = {k['vector_efficiency']:.3f}  tile_efficiency = {k['tile_efficiency']:.3f}  "
          f"on {len(k['rows'])} batch rows; residuals " + ", ".join(f"{x:+.1%}" for x in k["residuals"]))
    q = fit_quant(load(QUANT)["point"])
    print(f"[quant]  kquant_ops_per_weight = {q['kquant_ops_per_weight']:.2f}  on {len(q['rows'])} K-quant rows; "
          "residuals " + ", ".join(f"{x:+.1%}" for x in q["residuals"]))
    r = fit_routing(data["point"])
    print(f"[routing]  routing_correlation = {r['routing_correlation']:.3f}  moe_batch_layer_ms = "
          f"{r['moe_batch_layer_ms']:.3f}  on {len(r['rows'])} MoE batch rows; residuals "
          + ", ".join(f"{x:+.1%}" for x in r["residuals"]))
    print(json.dumps({c: {"effective_bandwidth_gbps": round(f["effective_bandwidth_gbps"], 1),
                          "step_overhead_ms": round(f["step_overhead_ms"], 2), "rows": len(f["rows"])}
                      for c, f in fits.items()}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="published points (TOML)")
    ap.add_argument("--fit", action="store_true", help="fit each chip's effective bandwidth and step overhead")
    ap.add_argument("--chip", help="only this chip's points")
    a = ap.parse_args()
    try:
        data = load(a.data)
    except (OSError, ValueError, KeyError, tomllib.TOMLDecodeError) as e:
        raise SystemExit(f"physics.py: cannot read {a.data}: {e}") from None
    if a.fit:
        print_fit(data)
        return
    out = report(data, a.chip)
    if not a.chip:
        points = loso_points(data) if a.data == DATA else data["point"]
        loso = leave_one_source_out(points, load_rates(RATES, MORE) if a.data == DATA else [])
        print_loso(loso)
        out["leave_one_source_out"] = loso
        if a.data == DATA:
            out["quant_types"] = quant_report(load(QUANT))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
