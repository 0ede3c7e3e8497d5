"""Presets are data (TOML files beside this module); this is the small loader for them."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from importlib.resources import files

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class PresetError(ValueError):
    """A preset name that does not exist, or a TOML file with a bad entry."""


@cache
def load(name: str) -> dict[str, Any]:
    """The parsed TOML file `name` (``chips``, ``models`` or ``workloads``)."""
    table: dict[str, Any] = tomllib.loads(files(__name__).joinpath(f"{name}.toml").read_text(encoding="utf-8"))
    return table


@dataclass(frozen=True)
class Chip:
    key: str
    name: str
    bandwidth_gbps: float | None  # GB/s = 10⁹ B/s, the vendor's figure; None: known chip, figure not verified
    memory_gib: tuple[float, ...] = ()  # the memory options, GiB (2³⁰ B): a "96 GB" Mac holds 96 GiB
    match: tuple[str, ...] = ()
    fp16_tflops: float | None = None  # dense FP16 tensor throughput, vendor datasheet; None: not in presets
    unified: bool = False  # unified memory (Apple Silicon): the GPU may wire only its working set
    # fitted on published llama.cpp single-stream decode (benchmarks/physics.py --fit): a decode step takes
    # step_overhead_ms + bytes read ÷ effective_bandwidth_gbps; None where no published table was fitted
    effective_bandwidth_gbps: float | None = None
    step_overhead_ms: float | None = None
    effective_source: str = ""  # the published table(s) and rows the two figures were fitted on
    # the batch path (B ≥ 2): llama.cpp leaves its matrix-vector kernels for matrix-matrix ones, a step's fixed cost
    # rises by batch_step_ms and each further sequence adds seq_step_ms (fitted on a dense model's llama-batched-bench
    # rows, benchmarks/physics.py --fit); None: not measured on this chip
    batch_step_ms: float | None = None
    seq_step_ms: float | None = None
    # a mixture of experts: each layer that routes adds moe_layer_ms to a step (the router, top-k, the gather and the
    # experts' own kernels), fitted per llama.cpp backend on published MoE rows (benchmarks/physics.py --fit)
    moe_layer_ms: float | None = None
    # … and at B ≥ 2 moe_batch_layer_ms more a routing layer (likely llama.cpp's one-token MoE fusions no longer
    # applying), fitted with the routing correlation on one MoE's batch rows; None: not measured
    moe_batch_layer_ms: float | None = None
    # the llama.cpp backend a decode on this chip runs (presets/kernels.toml: metal, cuda, vulkan), and the
    # arithmetic its tiled matmul kernels attain: prefill FLOP/s from the chip's published prompt rates
    # (benchmarks/physics.py --fit, from benchmarks/data/prompt_rates.toml); None: not published
    backend: str = ""
    prefill_tflops: float | None = None

    @property
    def memory_bytes(self) -> tuple[int, ...]:
        return tuple(int(n * 2**30) for n in self.memory_gib)


def chips() -> dict[str, Chip]:
    return {
        key: Chip(key, d["name"], d.get("bandwidth_gbps"), tuple(d.get("memory_gib", ())), tuple(d.get("match", ())),
                  d.get("fp16_tflops"), bool(d.get("unified_memory", False)), d.get("effective_bandwidth_gbps"),
                  d.get("step_overhead_ms"), str(d.get("effective_source", "")), d.get("batch_step_ms"),
                  d.get("seq_step_ms"), d.get("moe_layer_ms"),
                  d.get("moe_batch_layer_ms"), str(d.get("backend", "")), d.get("prefill_tflops"))
        for key, d in load("chips").items()
    }


@dataclass(frozen=True)
class Kernels:
    """The matmul path a llama.cpp backend takes at each batch size (presets/kernels.toml)."""

    backend: str
    vector_max_b: int
    tiles: tuple[int, ...]
    moe_tiled_min_b: int
    moe_vector_reads: str  # per-token | union
    vector_efficiency: float  # a further column's arithmetic in the vector kernels, × the prompt rate (fitted)
    tile_efficiency: float  # a tile column's arithmetic in the tiled kernels, × the prompt rate (fitted)
    moe_batch_layer_ms: float = 0.0  # a routing layer's further cost at B ≥ 2 (its one-token fusions left; fitted)
    # the vector kernels' dequantisation of K-quant weights: FLOP-equivalents a weight at the prompt rate (fitted;
    # docs/design/kernels.md, "Quant types"); legacy quants and floats: their bytes only
    kquant_ops_per_weight: float = 0.0


def kernels(backend: str) -> Kernels | None:
    """The kernel path of a backend named in kernels.toml, with the fitted efficiencies; None: not described."""
    table = load("kernels")
    d = table.get(backend)
    if not backend or d is None or backend in ("fitted", "cpu"):
        return None
    f = table["fitted"]
    return Kernels(backend, int(d["vector_max_b"]), tuple(int(t) for t in d["tiles"]), int(d["moe_tiled_min_b"]),
                   str(d["moe_vector_reads"]), float(f["vector_efficiency"]), float(f["tile_efficiency"]),
                   float(d.get("moe_batch_layer_ms", 0.0)), float(f.get("kquant_ops_per_weight", 0.0)))


@dataclass(frozen=True)
class CpuKernels:
    """llama.cpp's CPU matmul paths for a batch (presets/kernels.toml [cpu]): which weight types tinyBLAS multiplies
    in column tiles whose leftover columns cost a second pass over the weights, and which the build repacks."""

    tinyblas_q0_types: dict[str, tuple[str, ...]]  # isa family (x86, arm) → types
    tinyblas_q0_width: dict[str, int]  # avx512, avx2, arm → the tile's columns
    repacked_types: dict[str, tuple[str, ...]]  # avx2, avx512, arm_dotprod → types


def cpu_kernels() -> CpuKernels:
    d = load("kernels")["cpu"]
    return CpuKernels({k: tuple(v) for k, v in d["tinyblas_q0_types"].items()},
                      {k: int(v) for k, v in d["tinyblas_q0_width"].items()},
                      {k: tuple(v) for k, v in d["repacked_types"].items()})


def chip(key: str) -> Chip:
    table = chips()
    if key not in table:
        raise PresetError(f"unknown chip {key!r}; known: {', '.join(sorted(table))} (or pass --bandwidth GBPS)")
    return table[key]


def match_chip(reported_name: str) -> Chip | None:
    """The preset whose longest `match` string occurs in the name the OS reports, else None."""
    best, best_len = None, 0
    for c in chips().values():
        for m in c.match:
            if m.lower() in reported_name.lower() and len(m) > best_len:
                best, best_len = c, len(m)
    return best


@dataclass(frozen=True)
class Workload:
    key: str
    description: str
    prompts: tuple[str, ...] = ()
    synthetic_tokens: int | None = None
    source: str = ""
    long_every: int | None = None  # mixed: every n-th request is a long document …
    long_tokens: int | None = None  # … a synthetic prompt of this many tokens


def workloads() -> dict[str, Workload]:
    table = load("workloads")
    return {
        key: Workload(key, d.get("description", ""),
                      tuple(d.get("prompts") or table.get(d.get("prompts_from", ""), {}).get("prompts", ())),
                      d.get("synthetic_tokens"), d.get("source", ""), d.get("long_every"), d.get("long_tokens"))
        for key, d in table.items()
    }


def workload(spec: str) -> Workload:
    """A workload by preset name, or ``synthetic:N`` for one synthetic prompt of N tokens."""
    if spec.startswith("synthetic:"):
        n = spec.split(":", 1)[1]
        if not n.isdigit() or int(n) < 1:
            raise PresetError(f"bad workload {spec!r}: write synthetic:N with N a positive number of tokens")
        return Workload(spec, f"one synthetic prompt of {int(n)} tokens", synthetic_tokens=int(n))
    table = workloads()
    if spec not in table:
        raise PresetError(f"unknown workload {spec!r}; known: {', '.join(sorted(table))}, or synthetic:N")
    return table[spec]


@dataclass(frozen=True)
class ModelPreset:
    key: str
    name: str
    params: int
    weight_bytes: int
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int = 0
    heads: int = 0
    kv_dtype: str = "f16"
    vocab: int = 0
    tied_embeddings: bool = False
    # mixture of experts (0: dense): routed experts per MoE layer, experts each token uses, an expert's FFN
    # width (moe_intermediate_size), shared experts and their width, leading layers with a dense FFN
    experts: int = 0
    experts_used: int = 0
    expert_ffn: int = 0
    shared_experts: int = 0
    shared_expert_ffn: int = 0
    dense_layers: int = 0
    intermediate: int = 0  # a dense FFN's width (intermediate_size)
    # attention: a sliding window (tokens; 0: none) kept by all layers but full_attention_layers (0: every
    # layer is full), layers with linear attention (fixed-size state), latent attention (MLA)
    sliding_window: int = 0
    full_attention_layers: int = 0
    linear_attention_layers: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    file_bytes: int | None = None  # the file as shipped, where it differs from weight_bytes
    # all routed experts' bytes as shipped (weights and biases, every MoE layer): experts are often quantized
    # apart from the rest (gpt-oss: MXFP4 experts beside Q8_0 attention), so params × the average bytes per
    # parameter misplaces them; None: not known, take the average
    expert_bytes: int | None = None
    routing_correlation: float | None = None  # ρ of its router (measure/core/work.py); None: the fitted default
    quant: str = ""  # the weights' llama.cpp type as llama-bench names it (Q4_K_M, Q8_0, F16, MXFP4); "": not said
    extra: dict[str, Any] = field(default_factory=dict)


def models() -> dict[str, ModelPreset]:
    known = {f for f in ModelPreset.__dataclass_fields__ if f not in ("key", "extra")}
    return {
        key: ModelPreset(key, **{k: v for k, v in d.items() if k in known})
        for key, d in load("models").items()
    }


def model(key: str) -> ModelPreset:
    table = models()
    if key not in table:
        raise PresetError(f"unknown model preset {key!r}; known: {', '.join(sorted(table))}")
    return table[key]


@dataclass(frozen=True)
class SLO:
    """Bounds a request must meet (seconds; None: not bounded). See slos.toml for the presets' source."""

    key: str
    name: str
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def describe(self) -> str:
        parts = [f"{n} ≤ {v * 1e3:g} ms" for n, v in (("TTFT", self.ttft_s), ("TPOT", self.tpot_s),
                                                    ("E2E", self.e2e_s)) if v is not None]
        return f"{self.key}: " + ", ".join(parts)


def _duration(text: str, what: str) -> float:
    t = text.strip().lower()
    for suffix, scale in (("ms", 1e-3), ("s", 1.0)):
        if t.endswith(suffix):
            t, unit = t[: -len(suffix)], scale
            break
    else:
        unit = 1e-3  # a bare number is milliseconds
    try:
        v = float(t) * unit
    except ValueError:
        raise PresetError(f"bad {what} bound {text!r}: write e.g. {what}=450ms or {what}=2s") from None
    if v <= 0:
        raise PresetError(f"{what} bound {text!r} must be greater than 0")
    return v


def slo(spec: str) -> SLO:
    """A preset (interactive, server) or bounds written out: ttft=450ms,tpot=40ms[,e2e=10s]."""
    table = load("slos")
    if spec in table:
        d = table[spec]
        def ms(k: str) -> float | None:
            return d[k] / 1e3 if k in d else None
        return SLO(spec, d["name"], ms("ttft_ms"), ms("tpot_ms"), ms("e2e_ms"))
    if "=" not in spec:
        raise PresetError(f"unknown SLO {spec!r}; known: {', '.join(sorted(table))}, or ttft=450ms,tpot=40ms[,e2e=10s]")
    bounds = {}
    for part in spec.split(","):
        key, _, value = part.partition("=")
        key = key.strip().lower()
        if key not in ("ttft", "tpot", "e2e"):
            raise PresetError(f"bad SLO part {part!r}: the bounds are ttft, tpot and e2e (e.g. ttft=450ms)")
        bounds[key + "_s"] = _duration(value, key)
    return SLO(spec, "custom", **bounds)
