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

The machine: Machine.from_chip(chip), the chip's effective bandwidth, its cost per step and, where fitted, its
batch path (`batch_step_ms` + (B − 1) × `seq_step_ms`: --fit takes them from one dense model's
llama-batched-bench rows marked fit; every other batch row is held out), the routing correlation ρ of a trained
MoE router (work.ROUTING_CORRELATION) and what a routing layer costs more at B ≥ 2 (`moe_batch_layer_ms`; likely
llama.cpp's one-token MoE fusions no longer applying): the pair that best explains
the MoE batch rows marked fit (one model's, B = 2 … 32; least squares on log rate over ρ in steps of 0.005 and the
cost in steps of 0.005 ms), the other MoE models' batches held out.
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
GOAL = (0.05, 0.15)  # issue 42: median and worst |error| over every point of the chosen set
# A chip fitted on one dense row takes its per-step overhead from a chip of the same llama.cpp backend fitted on
# several (see the module docstring): the CUDA cards from DGX Spark (CUDA, six dense rows).
FIXED_OVERHEAD = {"nvidia-rtx-5090": "nvidia-dgx-spark", "nvidia-rtx-pro-6000": "nvidia-dgx-spark",
                  "nvidia-rtx-4090": "nvidia-dgx-spark", "nvidia-rtx-3090": "nvidia-dgx-spark"}
# The llama.cpp backend whose kernels a chip's rows ran (by key prefix): a mixture of experts' cost a routing layer
# (chips.toml moe_layer_ms) is fitted per backend. Strix Halo's MoE rows ran ROCm, the CUDA backend built with HIP.
BACKENDS = {"apple-": "Metal", "nvidia-": "CUDA", "amd-strix-halo": "CUDA"}


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


def context(p: dict[str, Any]) -> int:
    """The KV tokens a decode step of this row reads on average: its depth + half the tokens it generates."""
    return int(p["depth"]) + int(p["tg"]) // 2


def step_bytes(p: dict[str, Any], b: int = 1) -> float:
    """Bytes one decode step of `b` sequences of this row reads, as the predictor counts them."""
    return float(_row_setup(p["chip"], p["model"])[0].bytes_per_step([context(p)] * b))


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


def fit_chips(points: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per chip: effective GB/s, overhead ms, the rows fitted and their residuals (chips of FIXED_OVERHEAD, and
    chips whose rows all read the same bytes, after the chips they borrow their overhead from). A chip with no
    dense single-stream row marked fit is not fitted (its backend's figures stand for it: machine_for)."""
    dense = {c: [p for p in points if p["chip"] == c and p["role"] == "fit" and int(p["b"]) == 1
                 and "moe" not in p.get("needs", "")] for c in sorted({p["chip"] for p in points})}
    several = {c: len({step_bytes(p) for p in rows}) >= 2 for c, rows in dense.items()}
    chips = sorted((c for c, rows in dense.items() if rows), key=lambda c: (c in FIXED_OVERHEAD or not several[c], c))
    out: dict[str, dict[str, Any]] = {}
    for c in chips:
        rows = dense[c]
        xs = [step_bytes(p) for p in rows]
        ys = [1.0 / p["tok_s"] for p in rows]
        fixed, source = None, ""
        if c in FIXED_OVERHEAD and FIXED_OVERHEAD[c] in out:
            source = FIXED_OVERHEAD[c]
        elif len(set(xs)) < 2:  # one distinct x cannot fix both figures: the overhead of its backend's chips
            source = family_overhead_source(c, out)
        if source:
            fixed = out[source]["step_overhead_ms"] / 1e3 if source in out else family_overhead_ms(c, out) / 1e3
        o, slope = fit_line(xs, ys, fixed)
        out[c] = {"effective_bandwidth_gbps": 1.0 / slope / 1e9, "step_overhead_ms": o * 1e3,
                  "overhead_from": source, "rows": [r["row"] for r in rows],
                  "sources": sorted({r["source"] for r in rows}),
                  "residuals": [(o + x * slope) * t - 1.0 for x, t in zip(xs, (r["tok_s"] for r in rows))]}
        batch = [p for p in points if p["chip"] == c and p["role"] == "fit" and int(p["b"]) > 1 and not p.get("needs")]
        if len(batch) >= 2:  # the step beyond overhead + bytes: batch_step + (B − 1) × seq_step
            bx = [int(p["b"]) - 1.0 for p in batch]
            by = [int(p["b"]) / p["tok_s"] - o - step_bytes(p, int(p["b"])) * slope for p in batch]
            jump, seq = fit_line(bx, by)
            out[c].update(batch_step_ms=jump * 1e3, seq_step_ms=seq * 1e3, batch_rows=[p["row"] for p in batch])
    return out


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
    """The routing correlation ρ and the further cost of a routing layer at B ≥ 2 (moe_batch_layer_ms) that best
    explain the MoE batch rows marked fit (one model's, B = 2 … 32: B = 2 alone shows the step from one token to
    two, the larger B the experts' overlap): least squares on log(predicted ÷ published) over ρ = 0, 0.005, … 0.5
    and 0, 0.005, … 0.3 ms, with each chip's other figures as chips.toml holds them."""
    rows = [p for p in points if p["role"] == "fit" and p.get("needs") == "moe" and int(p["b"]) > 1]
    if not rows:
        raise ValueError("no MoE batch row is marked fit: nothing fixes the routing correlation")

    machines = {p["chip"]: machine_of(p["chip"]) if machine_of else None for p in rows}

    def rate(p: dict[str, Any], rho: float, batch_ms: float) -> float:
        return predict_point(p, rho, moe_batch_layer_s=batch_ms / 1e3, machine=machines[p["chip"]])

    def loss(rho: float, batch_ms: float) -> float:
        return sum(math.log(rate(p, rho, batch_ms) / p["tok_s"]) ** 2 for p in rows)

    _, rho, batch_ms = min((loss(i / 200, j / 200), i / 200, j / 200) for i in range(101) for j in range(61))
    return {"routing_correlation": rho, "moe_batch_layer_ms": batch_ms, "rows": [p["row"] for p in rows],
            "residuals": [rate(p, rho, batch_ms) / p["tok_s"] - 1.0 for p in rows]}


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
    pr = predict(wm, m, "batch", 1, int(p["b"]), at=lengths)
    return pr.per_stream_tps * (int(p["b"]) if p["per"] == "aggregate" else 1)


LOSO_GOAL = (0.10, 0.25, 0.07)  # issue 55: each source's median and worst, the pooled held-out median
RHO_PRIOR = 0.0  # a fold with no MoE batch row to fit ρ on: routing independent across tokens (unfitted)


def machine_for(chip_key: str, fold: dict[str, Any]) -> Any:
    """The roofline Machine of a chip from a fold's figures (fold_figures) alone, never from chips.toml's fitted
    ones: a chip the fold fitted takes its own; one it did not takes its backend's (the median efficiency ÷ spec
    and the median step overhead of that backend's fitted chips, else of every fitted chip): what a chip nobody
    measured gets. A routing layer's cost is its backend's, else the median over the backends fitted."""
    import dataclasses

    from measure.core.roofline import Machine
    from presets import chip

    c = chip(chip_key)
    chips, moe, routing = fold["chips"], fold["moe"], fold["routing"]
    m = Machine.from_chip(dataclasses.replace(c, effective_bandwidth_gbps=None, step_overhead_ms=None,
                                              batch_step_ms=None, seq_step_ms=None, moe_layer_ms=None,
                                              moe_batch_layer_ms=None))
    f = chips.get(chip_key)
    if f is not None:
        gbps, over = f["effective_bandwidth_gbps"], f["step_overhead_ms"]
    else:
        effs = {k: v["effective_bandwidth_gbps"] / chip(k).bandwidth_gbps for k, v in chips.items()}
        same = [e for k, e in effs.items() if backend(k) == backend(chip_key)]
        gbps = c.bandwidth_gbps * statistics.median(same or list(effs.values()))
        over = family_overhead_ms(chip_key, chips)
    batch_ms, seq_ms = (f.get("batch_step_ms"), f.get("seq_step_ms")) if f else (None, None)
    moe_ms = (moe.get(backend(chip_key)) or {}).get("moe_layer_ms")
    if moe_ms is None:
        moe_ms = statistics.median(v["moe_layer_ms"] for v in moe.values()) if moe else 0.0
    fitted_batch = batch_ms is not None and seq_ms is not None
    return dataclasses.replace(m, bandwidth_gbps=gbps, step_overhead_s=over / 1e3,
                               batch_step_s=(batch_ms or 0.0) / 1e3, seq_step_s=(seq_ms or 0.0) / 1e3,
                               moe_layer_s=moe_ms / 1e3,
                               moe_batch_layer_s=routing["moe_batch_layer_ms"] / 1e3 if fitted_batch else 0.0)


def fold_figures(train: list[dict[str, Any]]) -> dict[str, Any]:
    """Every figure physics.py fits (each chip's bandwidth, overhead and batch path; a routing layer's cost per
    backend; ρ and a routing layer's batch cost), fitted on `train` alone, in the order --fit fits them."""
    fold: dict[str, Any] = {"chips": fit_chips(train), "moe": {},
                            "routing": {"routing_correlation": RHO_PRIOR, "moe_batch_layer_ms": 0.0, "prior": True}}
    fold["moe"] = fit_moe(train, machine_of=lambda k: machine_for(k, {**fold, "moe": {}}))
    try:
        fold["routing"] = fit_routing(train, machine_of=lambda k: machine_for(k, fold))
    except ValueError:  # no MoE batch row among the training sources: ρ and the batch cost stay at their priors
        pass
    return fold


def leave_one_source_out(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Each source's points (fit and held-out rows alike) predicted from figures fitted on the other sources only
    (issue 55): a row per source, and the pooled figures over every point so predicted."""
    out: dict[str, Any] = {}
    pooled: list[float] = []
    for src in sorted({p["source"] for p in points}):
        fold = fold_figures([p for p in points if p["source"] != src])
        rows = [p for p in points if p["source"] == src]
        errs = [predict_point(p, fold["routing"]["routing_correlation"], machine=machine_for(p["chip"], fold))
                / p["tok_s"] - 1.0 for p in rows]
        pooled += errs
        out[src] = {**summary(errs), "by_backend": sorted({p["chip"] for p in rows} - set(fold["chips"])),
                    "rho": fold["routing"]["routing_correlation"], "rho_prior": bool(fold["routing"].get("prior"))}
    med, worst, pool = LOSO_GOAL
    p = summary(pooled)
    met = p["median_error"] <= pool and all(v["median_error"] <= med and v["worst_error"] <= worst
                                            for v in out.values())
    return {"sources": out, "pooled": p,
            "goal": {"source_median": med, "source_worst": worst, "pooled_median": pool, "met": met}}


def print_loso(loso: dict[str, Any]) -> None:
    print(f"\nleave one source out: each source predicted from figures fitted on the others only\n"
          f"{'source':<9} {'points':>6} {'median':>7} {'worst':>7}  ρ       chips priced by their backend's figures")
    for src, v in loso["sources"].items():
        print(f"{src:<9} {v['points']:>6} {v['median_error']:>7.1%} {v['worst_error']:>7.1%}  "
              f"{v['rho']:<5.3f}{' (prior)' if v['rho_prior'] else '        '} {', '.join(v['by_backend']) or '-'}")
    p = loso["pooled"]
    print(f"{'pooled':<9} {p['points']:>6} {p['median_error']:>7.1%} {p['worst_error']:>7.1%}")


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


def print_fit(data: dict[str, Any]) -> None:
    fits = fit_chips(data["point"])
    for c, f in fits.items():
        res = ", ".join(f"{r:+.1%}" for r in f["residuals"])
        print(f"[{c}]  effective_bandwidth_gbps = {f['effective_bandwidth_gbps']:.1f}  step_overhead_ms = "
              f"{f['step_overhead_ms']:.2f}" + (f"  (overhead from {f['overhead_from']})" if f["overhead_from"] else "")
              + f"  on {len(f['rows'])} rows; residuals {res}"
              + (f"\n    batch_step_ms = {f['batch_step_ms']:.2f}  seq_step_ms = {f['seq_step_ms']:.3f}  on "
                 f"{len(f['batch_rows'])} batch rows" if "batch_step_ms" in f else ""))
    for name, f in fit_moe(data["point"]).items():
        print(f"[{name}]  moe_layer_ms = {f['moe_layer_ms']:.4f}  on {len(f['rows'])} MoE rows; residuals "
              + ", ".join(f"{x:+.1%}" for x in f["residuals"]))
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
        loso = leave_one_source_out(data["point"])
        print_loso(loso)
        out["leave_one_source_out"] = loso
    print(json.dumps(out))


if __name__ == "__main__":
    main()
