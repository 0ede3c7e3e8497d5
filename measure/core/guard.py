"""The memory guard: KV-cache and footprint model, admission control, and wall detection.

All pure functions over numbers and probe readings, so each can be tested on injected values.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from measure.core.metrics import kv_bytes_per_token
from measure.core.readings import MacMemory, SystemSample, others_held, working_set
from measure.core.records import is_remote
from measure.core.units import GiB, MiB, UnitError, fmt_gib
from measure.core import units
from measure.core import work as W
from measure.core.work import WorkModel

if TYPE_CHECKING:
    from engines.gguf_file import GGUFInfo

__all__ = ["GiB", "MiB", "fmt_gib"]

# bytes per cached element: llama.cpp block formats store a scale per 32 values
KV_DTYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0,
                  "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32}
DEFAULT_BUDGET_FRACTION = 0.85
DEFAULT_OVERHEAD_BYTES = 100 * MiB  # runtime buffers before a warmup has measured them


class GuardError(ValueError):
    """A bad size, dtype or model description: one line saying what to do."""


def dtype_bytes(name: str) -> float:
    key = name.lower()
    if key not in KV_DTYPE_BYTES:
        raise GuardError(f"unknown KV dtype {name!r}; choose one of: {', '.join(KV_DTYPE_BYTES)}")
    return KV_DTYPE_BYTES[key]


def parse_memory_size(text: str) -> int:
    """units.parse_size, failing with GuardError (a memory size: 48G = 48GB = 48GiB = 48 × 2³⁰ B)."""
    try:
        return units.parse_size(text)
    except UnitError as exc:
        raise GuardError(str(exc)) from None


@dataclass(frozen=True)
class KVShape:
    name: str
    layers: int
    kv_heads: int
    head_dim: int
    weight_bytes: int
    source: str
    hidden: int = 0  # for the prefill activations an mlx engine keeps (0: not known)
    intermediate: int = 0
    work: WorkModel | None = None  # the model's layer kinds (windows, linear layers): KV per engine (docs/design/model-reads.md)

    def per_token(self, dtype: str = "f16") -> float:
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, dtype_bytes(dtype))

    def per_request(self, ctx: int, dtype: str = "f16", layout: str = "llama.cpp-window") -> float:
        """KV of one request of `ctx` tokens as an engine of this layout holds it (work.KV_LAYOUTS); without the
        model's layer kinds, every layer holds the whole context."""
        if self.work is None:
            return ctx * self.per_token(dtype)
        return replace(self.work, kv_element_bytes=dtype_bytes(dtype)).kv_alloc_bytes(ctx, layout)

    @property
    def layouts_differ(self) -> bool:
        """Whether engines hold this model's KV differently (sliding windows or linear layers)."""
        return self.work is not None and bool(self.work.window_layers or self.work.linear_layers)

    def prefill_bytes_per_seq(self, prompt_tokens: int) -> float:
        """mlx_prefill_bytes for this model (0 where its hidden and MLP widths are not known)."""
        return mlx_prefill_bytes(self.hidden, self.intermediate, prompt_tokens)


# mlx-lm's BatchGenerator prefills the B prompts of a batch together (engines/mlx_lm.py: prefill_batch_size =
# B) in chunks of PREFILL_STEP tokens; one layer's activations of a chunk are live at once — the input, its
# norm, the attention's output and projection (≈ 4 × hidden) and the MLP's gate, up and their product (3 ×
# intermediate), 2 bytes each — and mlx keeps freed buffers in its cache (its cache limit defaults to its
# memory limit), so that peak stays wired for the run. An estimate (docs/design/unified-memory.md), per sequence.
MLX_PREFILL_STEP = 2048
ACTIVATION_BYTES = 2


def mlx_prefill_bytes(hidden: int, intermediate: int, prompt_tokens: int) -> float:
    if not (hidden and intermediate):
        return 0.0
    return min(prompt_tokens, MLX_PREFILL_STEP) * (4 * hidden + 3 * intermediate) * ACTIVATION_BYTES


def shape_of_config(config: W.ConfigFile) -> KVShape:
    """A Hugging Face / mlx-lm config.json as read (machine/model_files.shape_from_config reads it); weights from
    the safetensors beside it, else params × dtype."""
    p, cfg = config.path, config.text
    try:
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads", heads))
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise GuardError(f"{p} lacks the attention shape ({exc}): need num_hidden_layers, num_attention_heads, "
                         "hidden_size or head_dim") from None
    why = "no parameters"
    try:
        wm: WorkModel | None = W.from_config(config)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        wm, why = None, str(exc)
    weights = config.safetensors_bytes or (wm.file_bytes if wm else 0)  # no weights beside it: params × dtype
    if not weights:  # never 0 B of weights
        raise GuardError(f"{p}: no weights beside it (*.safetensors) and its weights cannot be sized: {why}")
    return KVShape(cfg.get("_name_or_path") or p.parent.name, layers, kv_heads, head_dim, weights,
                   f"config {p}", int(cfg.get("hidden_size") or 0), W.active_ffn(cfg), wm)



def shape_of_gguf(info: GGUFInfo, path: str | Path) -> KVShape:
    """A GGUF's header as read (machine/model_files.shape_from_gguf reads it; `path` as the user gave it)."""
    layers, kv_heads, head_dim = info.layers, info.kv_heads, info.head_dim
    if layers is None or kv_heads is None or head_dim is None:
        raise GuardError(f"{path}: the GGUF metadata lacks the KV shape of architecture {info.architecture}")
    try:
        wm: WorkModel | None = W.from_gguf(info)
    except ValueError:
        wm = None
    return KVShape(info.name, layers, kv_heads, head_dim, info.file_bytes, f"GGUF {path}", work=wm)


def shape_from_preset(name: str) -> KVShape:
    from presets import model

    m = model(name)
    inter = 0
    if m.experts:  # a mixture of experts: the MLP a token runs is its experts' (and the shared ones'), not all of them
        inter = max(m.experts_used * m.expert_ffn + m.shared_experts * m.shared_expert_ffn,
                    m.intermediate if m.dense_layers else 0)
    elif m.intermediate:  # the preset says its FFN's width
        inter = m.intermediate
    elif m.hidden and m.heads and m.vocab:  # a Llama-shaped preset: the gated MLP's width from the parameters
        h, hd = m.hidden, m.head_dim
        attn = h * m.heads * hd * 2 + h * m.kv_heads * hd * 2 + 2 * h  # q, o, k, v and the two norms
        per_layer = (m.params - m.vocab * h * (1 if m.tied_embeddings else 2) - h) / m.layers
        inter = max(0, round((per_layer - attn) / (3 * h)))
    return KVShape(m.name, m.layers, m.kv_heads, m.head_dim, m.weight_bytes, f"preset {name}", m.hidden, inter,
                   W.from_preset(m))


@dataclass(frozen=True)
class Footprint:
    k: int
    b: int
    weights: int
    overhead: int
    kv: int

    @property
    def total(self) -> int:
        return self.weights + self.overhead + self.kv


def footprint(k: int, b: int, ctx: int, weight_bytes: int, kv_per_token: float,
              overhead_bytes: int = DEFAULT_OVERHEAD_BYTES, extra_kv_tokens: int = 0,
              label_b: int | None = None) -> Footprint:
    """K × (weights + runtime overhead) + Σ over workers of the KV for B sequences of `ctx` tokens
    (+ `extra_kv_tokens` per worker an engine allocates beside them, e.g. its single-stream context)."""
    return Footprint(k, b if label_b is None else label_b, k * weight_bytes, k * overhead_bytes,
                     int(k * (b * ctx + extra_kv_tokens) * kv_per_token))


@dataclass(frozen=True)
class EngineMemory:
    """engine_footprint's engine: the batch context's sequences (b_cap) of `seq_ctx` tokens, the single-stream
    context `ctx`, the model's weight bytes and KV bytes per token, the runtime's overhead and the bytes each
    sequence holds beside its KV."""

    b_cap: int
    seq_ctx: int
    ctx: int
    weight_bytes: int
    kv_per_token: float
    overhead_bytes: int = DEFAULT_OVERHEAD_BYTES
    seq_extra_bytes: float = 0.0


def engine_footprint(mode: str, k: int, b: int, m: EngineMemory) -> Footprint:
    """What K local engines allocate, by mode (the one rule the dashboard and the sweep use): each worker's
    weights and runtime, its single-stream context of `ctx` tokens (made whole at load), and in batch mode
    a batch context of max(B, b_cap) sequences × `seq_ctx` tokens beside it, each sequence with
    `seq_extra_bytes` more the engine keeps (mlx's prefill activations, mlx_prefill_bytes). A server's memory
    is not ours."""
    if is_remote(mode):  # a server's memory is not ours
        return Footprint(k, b, 0, 0, 0)
    seqs = max(b, m.b_cap) if mode == "batch" else 0
    fp = footprint(k, seqs, m.seq_ctx, m.weight_bytes, m.kv_per_token, m.overhead_bytes, extra_kv_tokens=m.ctx,
                   label_b=b)
    return replace(fp, overhead=fp.overhead + int(k * seqs * m.seq_extra_bytes))


# ---- the budget on unified memory (Apple Silicon) ------------------------------------------------------
# What macOS and the user's other processes hold on a Mac that is not this one (plan --chip): an assumption,
# the idle footprint users report for a headless Mac (≈ 4 GB of 64 GB; docs/design/unified-memory.md). On the Mac itself
# the reading replaces it (host.read_mac_memory: Activity Monitor's Memory Used less our own engines).
ASSUMED_OS_HELD_BYTES = 4 * GiB


def unified_budget(total: int, ws_bytes: int, ws_source: str, others: int | None = None,
                   gpu_share: float = 1.0) -> tuple[int, str]:
    """(bytes, why): the memory an engine may wire on unified memory — Metal's working set, and no more than
    what the OS and the other processes leave of the RAM (`others`: what they hold; None: assumed).
    `gpu_share`: the part of the engine's footprint the GPU wires (llama.cpp: the layers offloaded, docs/design/model-reads.md): the working set bounds only that part, so the footprint may reach ws ÷ share; none offloaded: RAM only."""
    held = ASSUMED_OS_HELD_BYTES if others is None else others
    left = total - held
    held_src = f"{fmt_gib(held)} {'assumed' if others is None else 'read (vm_stat)'} for macOS and other processes"
    if gpu_share <= 0:
        return max(0, left), f"{fmt_gib(total)} less {held_src} (no layer on the GPU: its working set does not apply)"
    if gpu_share < 1:
        ws_bytes = int(ws_bytes / gpu_share)
        ws_source = f"{ws_source}; {gpu_share:.0%} of the footprint on the GPU"
    if ws_bytes <= left:
        return ws_bytes, f"GPU working set {fmt_gib(ws_bytes)} ({ws_source}); {held_src}"
    return max(0, left), (f"{fmt_gib(total)} less {held_src} (below the GPU working set {fmt_gib(ws_bytes)}, "
                          f"{ws_source})")


def mac_budget(total: int, mem: MacMemory | None = None, gpu_share: float = 1.0) -> tuple[int, str]:
    """The default budget on this Mac (host.read_mac_memory's reading) or on a Mac of `total` bytes; `gpu_share`:
    the part of the footprint the GPU wires (unified_budget)."""
    if mem is not None:
        return unified_budget(mem.total, mem.working_set.bytes, mem.working_set.source, others_held(mem), gpu_share)
    ws = working_set(total)
    return unified_budget(total, ws.bytes, ws.source, gpu_share=gpu_share)


def admit(fp: Footprint, budget: int) -> str | None:
    """None if the footprint fits the budget; else the refusal, with the numbers."""
    if fp.total <= budget:
        return None
    return (f"K={fp.k} B={fp.b} needs ≈ {fmt_gib(fp.total)} of {fmt_gib(budget)} budget (weights {fmt_gib(fp.weights)}"
            f" + runtime {fmt_gib(fp.overhead)} + KV {fmt_gib(fp.kv)}); refused (--force or --memory-budget to "
            "override)")


@dataclass(frozen=True)
class OomKill:
    """The kernel's OOM killer ended a worker at this step although the guard's estimate fit the budget: the
    estimate was too low there, so this step and every larger one of the same mode are refused from then on."""
    mode: str
    k: int
    b: int
    estimated: int  # the footprint the guard estimated for the step before it learnt of the kill
    budget: int

    def covers(self, mode: str, k: int, b: int) -> bool:
        return mode == self.mode and k >= self.k and b >= self.b

    def refusal(self, k: int, b: int) -> str:
        fit = "fit" if self.estimated <= self.budget else "exceeded"
        return (f"the kernel's OOM killer ended a worker at K={self.k} B={self.b} {self.mode} earlier in this session "
                f"(estimated {fmt_gib(self.estimated)} {fit} the {fmt_gib(self.budget)} budget): the estimate was too "
                f"low there; K={k} B={b} is refused (--force to try anyway)")


def oom_refusal(kills: Iterable[OomKill], mode: str, k: int, b: int) -> str | None:
    """The refusal of a step at or above one where a worker was OOM-killed (None: no kill covers it)."""
    hit = next((x for x in kills if x.covers(mode, k, b)), None)
    return hit.refusal(k, b) if hit else None


def overhead_after_oom(fp: Footprint, floor: int, overhead: int) -> int:
    """The per-worker runtime overhead raised so that the footprint of the step that was OOM-killed is no
    longer below `floor` (what it must have needed: at least the budget it was admitted under)."""
    if fp.k < 1 or fp.total > floor:
        return overhead
    return max(overhead, -(-(floor + 1 - fp.weights - fp.kv) // fp.k))


def largest_fitting(budget: int, per_unit: float, fixed: float = 0.0) -> int:
    """The largest n ≥ 0 with fixed + n × per_unit ≤ budget."""
    if per_unit <= 0:
        return 0
    return max(0, int((budget - fixed) // per_unit))


# ---- wall detection ------------------------------------------------------------------------------
@dataclass(frozen=True)
class WallThresholds:
    swap_growth_bps: float = 1 * MiB  # swap used growing faster than this
    swap_in_bps: float = 0.0  # any swap-in at all
    pressure_psi: float = 10.0  # Linux PSI some avg10 %
    pressure_macos: float = 2.0  # kern.memorystatus_vm_pressure_level: 1 normal, 2 warn, 4 critical
    available_fraction: float = 0.05
    collapse_ratio: float = 0.5  # tok/s after a step below half of before it
    settle_s: float = 10.0  # …measured this long after the step
    short_fraction: float = 0.20  # …on a machine short of memory: swap in use, any pressure, or available below this


def detect_wall(prev: SystemSample | None, cur: SystemSample, tps_before: float | None, tps_after: float | None,
                since_step_s: float, th: WallThresholds = WallThresholds()) -> str | None:
    """The reason the machine is at the memory wall, or None. `prev`/`cur`: consecutive SystemSamples."""
    if prev is not None and cur.t_ns > prev.t_ns:
        growth = (cur.swap_used - prev.swap_used) / ((cur.t_ns - prev.t_ns) / 1e9)
        if growth > th.swap_growth_bps:
            return f"swap growing {growth / MiB:.1f} MiB/s"
    if cur.swap_in_bps > th.swap_in_bps:
        return f"swapping in {cur.swap_in_bps / MiB:.1f} MiB/s"
    if cur.pressure is not None:
        if cur.pressure_source.startswith("psi") and cur.pressure >= th.pressure_psi:
            return f"memory pressure {cur.pressure:.0f} % (PSI some avg10)"
        if cur.pressure_source.startswith("macOS") and cur.pressure >= th.pressure_macos:
            return f"memory pressure level {cur.pressure:.0f} (macOS)"
    if cur.mem_total and cur.mem_available < th.available_fraction * cur.mem_total:
        return f"available memory {fmt_gib(cur.mem_available)} < {th.available_fraction:.0%} of {fmt_gib(cur.mem_total)}"
    if (tps_before and tps_after is not None and since_step_s >= th.settle_s
            and tps_after < th.collapse_ratio * tps_before and short_of_memory(cur, th)):
        return f"aggregate tok/s collapsed {tps_before:.0f} → {tps_after:.0f} after the last step"
    return None


def short_of_memory(cur: SystemSample, th: WallThresholds = WallThresholds()) -> bool:
    """Some sign the machine is short of memory, below the thresholds that name the wall by themselves: swap in
    use, any memory pressure, or available memory under th.short_fraction of total. A collapse of tok/s on a
    machine with memory to spare is other work or the cores, not the memory wall."""
    return bool(cur.swap_used > 0 or (cur.pressure or 0.0) > 0.0
                or (cur.mem_total and cur.mem_available < th.short_fraction * cur.mem_total))
