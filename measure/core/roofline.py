"""The roofline predictor: per-stream TPOT, aggregate tok/s and TTFT for a mode, K, B and context, each the
max of the ceilings that apply, and the ceiling that binds.

A decode step of one engine (B sequences) takes the longest of:
- memory bandwidth: bytes per step (work.py: weights + KV at the context) ÷ the bandwidth this engine gets
  (the attainable figure shared by the K engines decoding at once);
- compute: on a CPU, core-seconds per step ÷ the cores the engine's threads really get (threads scale by
  the probe's measured speedup; K × threads above the core count time-share them); on a GPU or another
  chip, FLOPs per step ÷ the chip's FLOP/s;
- a serializing server runs one request at a time (B streams wait in its queue).
Per-stream TPOT = the step; aggregate tok/s = K × B × N ÷ (TTFT + (N − 1) × TPOT) (closed loop, every stream
kept busy); TTFT = prefill + one step.
The wall a level runs against (its `binding`) is named by the one rule the live view uses too (`name_wall`,
docs/design/wall.md), from the level's bandwidth share and the cores its threads keep busy.

The CPU costs come from the probe (ceilings.py: llama.cpp's own decode at 1 … all threads, batches of 2
and 8, prefill) and are refined from at most two measured points (`calibrate`: one B = 1 point, one batch
point; the calibrated model gives each point back, whichever ceiling bound there).
For a chip you do not own (`Machine.from_chip`) the efficiencies are documented assumptions, overridable.
"""
from __future__ import annotations

from collections.abc import Sequence
import statistics
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from measure.core.guard import footprint
from measure.core.readings import Ceilings
from measure.core.records import is_remote
from measure.core.work import LLAMA_UBATCH, WorkModel, quant_family
from presets import Chip, CpuKernels, Kernels, chips, cpu_kernels, kernels, load

# Assumed efficiencies for a chip you do not own (no measurement): the share of the spec figure a decode
# step attains. Memory: llama.cpp, MLX and vLLM decode of one stream are bandwidth-bound and reach most of
# the spec bandwidth, not all of it (refresh, page walks, kernels that do not stream perfectly); 0.8 is an
# assumption, not a measurement, and `--bandwidth-efficiency` replaces it. Compute: dense FP16 GEMMs at
# decode shapes reach well under the tensor-core peak; 0.5 is likewise an assumption.
ASSUMED_BW_EFFICIENCY = 0.8
ASSUMED_FLOP_EFFICIENCY = 0.5
# Past the memory budget on unified memory (docs/design/unified-memory.md) the part of the footprint over it is paged out,
# and every decode step reads all of its weights and KV, so that part comes back from swap each step. The rate
# is an assumption, not a measurement: Apple's internal SSDs read several GB/s sequentially, swap-ins are
# page-sized and pass through the compressor.
ASSUMED_SWAP_GBPS = 3.0

# The wall's naming rule (docs/design/wall.md), one function for the prediction of a level and for the live
# view's figures alike: the first of these that holds names the wall.
BANDWIDTH_WALL = 0.8  # bytes moved ÷ attainable bandwidth at or above which memory bandwidth is the wall
CORES_WALL = 0.9  # cores busy ÷ the machine's cores at or above which the CPU cores are the wall
COMPUTE_BUSY = 0.45  # compute binds only while the cores busy are ≥ this share of those the threads were given
OTHERS_SAID = 0.25  # other work's cores named (the cores wall, a bench cell's note) from this share of the cores


def name_wall(bw_share: float, cores_busy: float = 0.0, cores: int = 0, threads: float = 0.0,
              compute_binds: bool = False, queue: str | None = None, ref: str = "attainable",
              others: float = 0.0) -> tuple[str, str]:
    """(binding, text). `bw_share`: bytes moved ÷ the `ref` bandwidth; `cores_busy`: cores the decode keeps
    busy (a prediction: K × threads, at most the cores; live: the workers' CPU ÷ 100); `threads`: the
    cores the engines' threads were given (K × threads; 0: all); `compute_binds`: the roofline's compute
    time (core-seconds, or FLOPs) is longer than its memory time; `queue`: a server that runs one request
    at a time (its detail); `others`: cores other work on the machine keeps busy (live only: the machine's
    CPU less inference-top's own processes), which the engines cannot have. Binding: server queue | bandwidth |
    cores | compute | none."""
    if queue is not None:
        return "server queue", f"server queue (one request at a time{': ' + queue if queue else ''})"
    if bw_share >= BANDWIDTH_WALL:
        return "bandwidth", f"memory bandwidth ({bw_share:.0%} of {ref})"
    cpu_share = (cores_busy + others) / cores if cores else 0.0
    if cpu_share >= CORES_WALL:
        said = f", {others:.1f} of them other work" if others >= OTHERS_SAID * cores else ""
        return "cores", f"CPU cores ({cores_busy + others:.1f} of {cores} busy{said})"
    given = min(threads, cores) if threads and cores else cores
    if compute_binds and (not cores or cores_busy >= COMPUTE_BUSY * given):
        return "compute", f"compute ({cores_busy:.1f} of {cores} cores busy)" if cores else "compute"
    used = max(bw_share, cpu_share)
    return "none", f"none: {1 - used:.0%} headroom" if used else "none reached"


@dataclass(frozen=True)
class Family:
    """What the chips of one llama.cpp backend fitted on published rows say of a chip nobody measured: their
    effective bandwidth ÷ spec and their step overhead, each (lowest, median, highest), a routing layer's cost, and
    their prefill FLOP/s per GB/s of spec bandwidth (issue 55: a range, never one number that looks measured)."""

    backend: str
    chips: tuple[str, ...]
    efficiency: tuple[float, float, float]
    overhead_ms: tuple[float, float, float]
    moe_layer_ms: float | None
    prefill_per_gbps: float | None

    @classmethod
    def of(cls, chip: Chip, peers: Sequence[Chip]) -> Family | None:
        """The family of `chip`'s backend among `peers` (those with fitted figures), None where it has none."""
        fitted = [c for c in peers if c.backend == chip.backend and c.key != chip.key and c.bandwidth_gbps
                  and c.effective_bandwidth_gbps and c.step_overhead_ms is not None]
        if not chip.backend or not fitted:
            return None
        effs = sorted(float(c.effective_bandwidth_gbps or 0.0) / float(c.bandwidth_gbps or 1.0) for c in fitted)
        overs = sorted(float(c.step_overhead_ms or 0.0) for c in fitted)
        moe = [float(c.moe_layer_ms) for c in fitted if c.moe_layer_ms]
        pre = [float(c.prefill_tflops) / float(c.bandwidth_gbps or 1.0) for c in fitted if c.prefill_tflops]
        return cls(chip.backend, tuple(c.key for c in fitted), (effs[0], statistics.median(effs), effs[-1]),
                   (overs[0], statistics.median(overs), overs[-1]), statistics.median(moe) if moe else None,
                   statistics.median(pre) if pre else None)

    def estimate(self, chip: Chip) -> Chip:
        """`chip` with the family's median figures where it has none of its own, said in its effective_source."""
        eff, over = self.efficiency[1], self.overhead_ms[1]
        spec = float(chip.bandwidth_gbps or 0.0)
        return replace(
            chip, effective_bandwidth_gbps=spec * eff, step_overhead_ms=over, moe_layer_ms=self.moe_layer_ms,
            prefill_tflops=chip.prefill_tflops or (self.prefill_per_gbps * spec if self.prefill_per_gbps else None),
            effective_source=f"no measurement of this chip: an estimate from the {len(self.chips)} {self.backend} chips "
                             f"fitted (efficiency {self.efficiency[0]:.0%}–{self.efficiency[2]:.0%} of spec, median "
                             f"{eff:.0%}; {self.overhead_ms[0]:g}–{self.overhead_ms[2]:g} ms a step, median {over:g})")


@dataclass(frozen=True)
class Machine:
    name: str
    bandwidth_gbps: float  # what a decode step can get (attainable, or spec × efficiency)
    bandwidth_source: str
    cores: int = 0  # a CPU engine's cores (0: not a CPU engine)
    step_core_s: float | None = None  # CPU: core-seconds of a B = 1 decode step of this model
    # CPU, B ≥ 2: llama.cpp multiplies a matrix by a matrix, not by a vector: a step costs
    # batch_base_core_s + B × seq_core_s (fitted on the probe's two batch sizes)
    batch_base_core_s: float | None = None
    seq_core_s: float = 0.0
    # … past the probe's largest batch (batch_top_b) each further column costs a prompt's further token with its
    # logits at that width (the same tiled matmuls, the output matrix's included: ceilings.logits_times), not the
    # line's slope between two batches of few tiles (docs/design/kernels.md, "The CPU"): column_prices, (width w,
    # core-seconds a column up to w from the width before), column_core. (): the line goes on
    batch_top_b: int = 0
    column_prices: tuple[tuple[int, float], ...] = ()
    # … and what a measured load adds to each sequence's column beyond the probe's short sequences (calibrate)
    seq_extra_core_s: float = 0.0
    prefill_core_s: float | None = None  # CPU: core-seconds per prompt token
    # CPU, B ≥ 2: llama.cpp's tinyBLAS multiplies its legacy-quant matrices in tiles of `cpu_tile` columns, and the
    # columns a B leaves past the last whole tile take a second pass over those matrices (presets/kernels.toml [cpu];
    # cpu_batch_path): it reads them again, `cpu_repass_share` of the step's weight-bound fixed part. 0: not known
    cpu_tile: int = 0
    cpu_repass_share: float = 0.0
    thread_speedup: dict[int | str, float] = field(default_factory=dict)  # threads → speedup over 1 thread
    flops: float | None = None  # FLOP/s for a GPU or chip (spec × efficiency); None: not known
    step_overhead_s: float = 0.0  # a step's fixed cost beyond its bytes and FLOPs (kernel launches, synchronisation)
    batch_step_s: float = 0.0  # B ≥ 2 in one engine: the batch path's extra fixed cost a step (matrix-matrix kernels)
    seq_step_s: float = 0.0  # … and each further sequence's
    moe_layer_s: float = 0.0  # a mixture of experts: each routing layer's fixed cost a step (router, top-k, gather)
    moe_batch_layer_s: float = 0.0  # … and its further cost at B ≥ 2 (fitted; likely one-token fusions left)
    kv_layout: str = "llama.cpp-window"  # how the engine holds windowed layers' KV (work.KV_LAYOUTS), for its footprint
    serializing: bool = False  # a server that decodes one request at a time
    notes: tuple[str, ...] = ()
    # unified memory: what an engine may wire (None: not modelled), what each sequence holds beside its KV,
    # the runtime per engine, and the rate the part over the budget comes back from swap
    memory_budget: int | None = None
    seq_extra_bytes: float = 0.0
    overhead_bytes: int = 0
    swap_gbps: float = ASSUMED_SWAP_GBPS
    # a GPU's llama.cpp backend: the matmul kernels it runs at each B (presets/kernels.toml) and the arithmetic its
    # tiled kernels attain (prefill FLOP/s, from the chip's published prompt rates); None: a step costs its bytes
    kernels: Kernels | None = None
    prefill_flops: float | None = None
    family: Family | None = None  # a chip nobody measured: its backend's figures, whose spread is the range shown
    # what a GPU backend's decode attention reads of a windowed layer (kernels.toml window_kv_reads): "window" (it
    # skips masked cells: the window), "cache" (it reads every cell of the window's cache, masked or not, pad(window
    # + ubatch) once filled); `ubatch` the run's micro-batch (llama.cpp -ub)
    window_kv_reads: str = "window"
    ubatch: int = LLAMA_UBATCH

    def speedup(self, threads: int) -> float:
        if not self.thread_speedup:
            return float(max(1, threads))
        if threads <= 1:
            return 1.0
        known = {int(k): float(v) for k, v in self.thread_speedup.items()}
        if threads in known:
            return known[threads]
        top = max(known)
        return known[top] * threads / top  # beyond what was measured: linear from the last point

    @classmethod
    def from_ceilings(cls, c: Ceilings, work: WorkModel) -> Machine:
        """This machine, from the probe (readings.Ceilings: machine/ceilings.py) of the same model's engine."""
        e = c.engine or {}
        d = {int(k): float(v) for k, v in (e.get("decode_tps") or {}).items()}
        busy = (f"warning: {c.busy_warning()}",) if c.busy else ()
        if not d:
            return cls(c.chip, c.attainable_gbps, "attainable (probe)", cores=c.cores,
                       notes=("no engine rates in the probe: bandwidth ceiling only", *busy))
        step1 = 1.0 / d[1]
        scale = work.read_bytes(1) / e["weight_bytes"] if e.get("weight_bytes") else 1.0  # another model: by bytes
        top = max(d)  # batches and prefill ran with all threads: in one-thread core-seconds, × the speedup
        base, seq = None, 0.0
        bs = {int(k): (1.0 / v) * (d[top] / d[1]) for k, v in (e.get("batch_steps_per_s") or {}).items()}
        tile, share, path_note = cpu_batch_path(work, e.get("cpu_features") or ())
        if len(bs) >= 2:  # step(B) = base × R(B)/R(1) × passes + B × seq: the weights' part grows with the experts read
            lo, hi = min(bs), max(bs)
            rl = work.read_bytes(lo) / work.read_bytes(1) * repass_factor(tile, share, lo)
            rh = work.read_bytes(hi) / work.read_bytes(1) * repass_factor(tile, share, hi)
            det = rl * hi - rh * lo
            base = (bs[lo] * hi - bs[hi] * lo) / det
            seq = (rl * bs[hi] - rh * bs[lo]) / det
            if seq < 0 or base < 0:  # the two points say less than the model: keep the part they fix
                seq = max(0.0, seq)
                base = max(0.0, (bs[lo] - lo * seq) / rl)
        # another model's columns by bytes, as every core cost
        col, extra = ((), 0.0) if base is None else batch_columns(e.get("logits_s"), max(bs), bs[max(bs)] * scale,
                                                                  d[top] / d[1] * scale)
        t_top = 1.0 / d[top] * scale
        t_bytes = work.read_bytes(1) / (c.attainable_gbps * 1e9) if c.attainable_gbps else 0.0
        step = (f"probe: {c.attainable_gbps:.1f} GB/s effective bandwidth (read test); a step of this model takes "
                f"{t_top * 1e3:.1f} ms at {top} threads, {t_bytes * 1e3:.1f} ms of it its bytes: "
                f"{max(0.0, t_top - t_bytes) * 1e3:.1f} ms a step beyond them (compute, fixed costs)")
        return cls(c.chip, c.attainable_gbps, "attainable (probe)", cores=c.cores, step_core_s=step1 * scale,
                   batch_base_core_s=None if base is None else base * scale, seq_core_s=seq * scale,
                   batch_top_b=max(bs) if col else 0, column_prices=col,
                   prefill_core_s=top / e["prefill_tps"] * scale,  # prefill is compute: cores × seconds a token
                   thread_speedup={t: v / d[1] for t, v in d.items()}, cpu_tile=tile, cpu_repass_share=share,
                   notes=(step, *((path_note,) if path_note else ()),
                          *((_column_note(col, extra, max(bs)),) if col else ()),
                          *busy))

    def step_core(self, b: int, reads: float = 1.0) -> float:
        """Core-seconds of one decode step of b sequences (one thread's worth); `reads`: the weight bytes the step
        reads ÷ a one-sequence step's (1 for a dense model; more for a mixture of experts, whose B tokens are
        routed to more experts: work.read_bytes)."""
        if self.step_core_s is None:
            raise ValueError("a decode step's core-seconds are known only from a CPU engine's probe")
        if b <= 1 or self.batch_base_core_s is None:
            return self.step_core_s * reads + (b - 1) * self.seq_core_s
        return (self.batch_base_core_s * reads * repass_factor(self.cpu_tile, self.cpu_repass_share, b)
                + self.columns_core(b) + b * self.seq_extra_core_s)

    def column_core(self, j: int) -> float:
        """Core-seconds of a batch step's j-th column: a prompt's further token at that width, the price of the
        probe's widths j falls between (column_prices); past the widest, the widest's; 0 without prices."""
        for w, price in self.column_prices:
            if j <= w:
                return price
        return self.column_prices[-1][1] if self.column_prices else 0.0

    def column_weights(self, b: int) -> Columns:
        """A batch step's columns at b (Columns): up to the probe's largest batch every column is the line's (the
        probe's own batches, which hold what a tile's padding and each sequence's own work cost); past it, the
        columns top + 1 … b at their own price (column_core). Without prices every column is the line's."""
        top = self.batch_top_b
        if not self.column_prices or b <= top:
            return Columns(b)
        return Columns(top, top + 1, b)

    def priced_core(self, c: Columns) -> float:
        """Core-seconds of the columns `c` prices at their own width's price."""
        return sum(self.column_core(j) for j in range(c.first, c.last + 1))

    def columns_core(self, b: int) -> float:
        """The batch step's per-column core-seconds at b columns (column_weights)."""
        c = self.column_weights(b)
        return c.line * self.seq_core_s + self.priced_core(c)

    def spill_bytes(self, work: WorkModel, k: int, b: int, ctx: int) -> float:
        """Bytes of K engines' footprint (weights as shipped, runtime, B sequences' KV at `ctx` and what each
        sequence holds beside it: guard.footprint) over the memory budget; 0 without a budget."""
        if self.memory_budget is None:
            return 0.0
        per_token = work.kv_alloc_bytes(ctx, self.kv_layout) / ctx if ctx else 0.0  # this engine's KV at ctx
        fp = footprint(k, b, ctx, work.file_bytes, per_token, self.overhead_bytes)
        return max(0.0, fp.total + k * b * self.seq_extra_bytes - self.memory_budget)

    @classmethod
    def from_chip(cls, chip: Chip, bw_efficiency: float | None = None,
                  flop_efficiency: float = ASSUMED_FLOP_EFFICIENCY, peers: Sequence[Chip] | None = None) -> Machine:
        """A chip from presets: its effective bandwidth and per-step cost where published measurements give them
        (chips.toml's effective_* figures, each with its source); a chip nobody measured takes the median figures
        of its backend's fitted chips among `peers` (default: every preset), their spread kept as `family` (the
        range shown beside each prediction: predict_range); else spec bandwidth × the assumed efficiency and no step
        cost, said to be an estimate; FLOP/s × the assumed efficiency (all said in `notes`).
        `bw_efficiency` given: spec × it, whatever was measured."""
        if not chip.bandwidth_gbps:
            raise ValueError(f"chip {chip.name} has no verified bandwidth in presets")
        family = None
        if not chip.effective_bandwidth_gbps and bw_efficiency is None:
            family = Family.of(chip, list(chips().values()) if peers is None else peers)
            if family is not None:
                return replace(cls.from_chip(family.estimate(chip), None, flop_efficiency, ()),
                                           bandwidth_source=f"estimate ({family.backend} family)", family=family)
        eff, overhead_ms = chip.effective_bandwidth_gbps, float(chip.step_overhead_ms or 0.0)
        if eff and bw_efficiency is None:
            src = chip.effective_source or "published measurements"
            notes = [f"bandwidth {eff:g} GB/s effective ({eff / chip.bandwidth_gbps:.0%} of {chip.bandwidth_gbps:g} "
                     f"spec) and {overhead_ms:g} ms a step, "
                     + (src if src.startswith("no measurement") else f"fitted to {src}")]
            gbps, source = float(eff), "effective (published)"
        else:
            bw_efficiency = ASSUMED_BW_EFFICIENCY if bw_efficiency is None else bw_efficiency
            notes = [f"bandwidth {chip.bandwidth_gbps:g} GB/s spec × {bw_efficiency:g} (assumed efficiency): an "
                     "estimate, no published measurement of this chip in presets"]
            gbps, source, overhead_ms = chip.bandwidth_gbps * bw_efficiency, "spec × assumed efficiency", 0.0
        flops = None
        if chip.fp16_tflops:
            flops = chip.fp16_tflops * 1e12 * flop_efficiency
            notes.append(f"compute {chip.fp16_tflops:g} TFLOP/s FP16 spec × {flop_efficiency:g} (assumed)")
        else:
            notes.append("no FLOP/s figure in presets: the compute ceiling is not drawn")
        batch_ms, seq_ms, moe_batch_ms = chip.batch_step_ms, chip.seq_step_ms, chip.moe_batch_layer_ms or 0.0
        path = kernels(chip.backend) if chip.prefill_tflops else None
        if path is not None:
            batch_ms, seq_ms, moe_batch_ms = 0.0, 0.0, path.moe_batch_layer_ms
            notes.append(f"batch path: llama.cpp's {chip.backend} kernels (presets/kernels.toml): vectors up to "
                         f"B = {path.vector_max_b}, then tiles of {'/'.join(map(str, path.tiles[:4]))}"
                         f"{'…' if len(path.tiles) > 4 else ''} tokens at {chip.prefill_tflops:g} TFLOP/s (the chip's "
                         "published prompt rate)"
                         + (f"; K-quant weights decoded at {path.kquant_ops_per_weight:g} FLOP a weight a step beside "
                            "their bytes (vector kernels)" if path.kquant_ops_per_weight else ""))
        elif batch_ms is not None and seq_ms is not None and source.startswith("effective"):
            notes.append(f"batch path: +{batch_ms:g} ms a step at B ≥ 2 and {seq_ms:g} ms each further sequence "
                         "(fitted on a dense model's llama-batched-bench rows)"
                         + (f"; a mixture of experts +{moe_batch_ms:g} ms more a routing layer (fitted on one MoE's)"
                            if moe_batch_ms else ""))
        else:
            batch_ms = seq_ms = moe_batch_ms = 0.0
            notes.append("batch path not measured on this chip: B ≥ 2 costs only its bytes (an estimate)")
        moe_ms = float(chip.moe_layer_ms or 0.0) if source.startswith("effective") else 0.0
        if moe_ms:
            notes.append(f"a mixture of experts: +{moe_ms:g} ms a step for each layer that routes (fitted on published "
                         "MoE rows of this chip's llama.cpp backend)")
        return cls(chip.name, gbps, source, flops=flops, step_overhead_s=overhead_ms / 1e3, window_kv_reads=_reads(chip),
                   batch_step_s=float(batch_ms) / 1e3, seq_step_s=float(seq_ms) / 1e3, moe_layer_s=moe_ms / 1e3,
                   moe_batch_layer_s=float(moe_batch_ms) / 1e3, notes=tuple(notes), kernels=path,
                   prefill_flops=chip.prefill_tflops * 1e12 if path is not None and chip.prefill_tflops else None)


def _reads(chip: Chip) -> str:
    """What the chip's backend's attention reads of a windowed layer (kernels.toml window_kv_reads; window_cells)."""
    return str(load("kernels").get(chip.backend or "", {}).get("window_kv_reads", "window"))


@dataclass(frozen=True)
class Prediction:
    mode: str
    k: int
    b: int
    threads: int
    tpot_s: float
    ttft_s: float
    aggregate_tps: float
    per_stream_tps: float
    bytes_per_s: float  # moved by all engines together
    binding: str  # bandwidth | compute | cores | server queue (name_wall)
    shares: dict[str, float]  # ceiling → its time ÷ the step's
    cores: int = 0  # the machine's cores (0: not a CPU engine)
    cores_busy: float = 0.0  # K × threads decoding, at most the cores
    spill_bytes: float = 0.0  # footprint over the memory budget, read back from swap every step
    regime: str = ""  # the matmul kernels a GPU backend runs at this B (kernel_time): vector, small-batch, tiled
    context: int = 0  # the KV tokens each sequence read a step
    kv_share: float = 0.0  # of the bytes a step reads, the share that is KV (attention), the rest weights

    def binds(self) -> str:
        """What a step of this level spends its time on, the largest part first (issue 55 item 6): 'vector kernels:
        weight bytes 71 % · per-step cost 22 % · KV 7 %'. The kernels' regime names the matmul path (a CPU's
        cores, a GPU backend's vector, small-batch or tiled kernels); its parts: the bytes (weights and the KV
        attention reads) where the bytes bind, else the cores' compute, the tiled or small-batch kernels'
        arithmetic, the attention's arithmetic in the vector kernels, the fixed cost of a step, swap."""
        sh = self.shares
        parts: dict[str, float] = {}
        if sh.get("compute", 0.0) > sh.get("bandwidth", 0.0):
            parts["the cores' compute" if self.cores else "compute"] = sh["compute"]
        else:
            parts["weight bytes"] = sh.get("bandwidth", 0.0) * (1.0 - self.kv_share)
            parts["KV"] = sh.get("bandwidth", 0.0) * self.kv_share
        parts["kernel arithmetic"] = sh.get("kernels", 0.0)
        parts["attention arithmetic"] = sh.get("attention", 0.0)
        parts["K-quant decoding"] = sh.get("dequant", 0.0)
        parts["per-step cost"] = sh.get("overhead", 0.0)
        parts["swap"] = sh.get("swap", 0.0)
        name, _, rest = (self.regime or "vector").partition(" (")
        if self.cores:  # a CPU names its matmul path only where tinyBLAS makes a second pass (predict)
            head = f"CPU ({self.regime})" if self.regime.startswith("2 passes") else "CPU"
        elif name == "bytes only":
            head = name
        else:
            head = f"{name} kernels" + (f" ({rest}" if rest else "")
        shown = sorted(((v, k) for k, v in parts.items() if v >= 0.005), reverse=True)
        return f"{head}: " + " · ".join(f"{k} {v:.0%}" for v, k in shown)

    @property
    def oversubscribed(self) -> bool:
        """More decoding threads than cores (K × threads > cores): the engines time-share the cores, which the
        model only divides out; measured, such levels came within 12 % of it on a quiet box and ran 5–36 % below
        it beside other work (docs/design/roofline.md)."""
        return bool(self.cores) and self.k * self.threads > self.cores

    def caveat(self) -> str:
        """What the screen and the cell say where the prediction holds only on quiet cores (K × threads >
        cores), else ''."""
        if not self.oversubscribed:
            return ""
        return (f"K × threads = {self.k * self.threads} > {self.cores} cores: time-shared, the prediction holds "
                "only while nothing else wants the cores (5–36 % high beside other work)")

    def wall(self) -> str:
        """The wall this level runs against, by the one naming rule (name_wall); past the memory budget,
        the memory wall."""
        if self.spill_bytes > 0:
            return f"memory: {self.spill_bytes / 2**30:.1f} GiB over the budget, read back from swap each step"
        return name_wall(self.shares["bandwidth"], self.cores_busy, self.cores, self.k * self.threads,
                         max(self.shares.get("compute", 0.0), self.shares.get("kernels", 0.0),
                             self.shares.get("dequant", 0.0)) > self.shares["bandwidth"],
                         "" if self.binding == "server queue" else None)[1]


@dataclass(frozen=True)
class Lengths:
    """predict's request lengths: prompt tokens, output tokens and `context`, the KV tokens a sequence reads
    each decode step (None: prompt + half the output)."""

    prompt_tokens: int = 32
    output_tokens: int = 128
    context: int | None = None


class Columns(NamedTuple):
    """A batch step's columns (Machine.column_weights): `line` columns at the probe's line's price a sequence, and
    the columns first … last at a prompt token's price at their width."""

    line: int
    first: int = 0
    last: int = -1


def column_prices(logits_s: dict[str, float] | None, core_per_s: float) -> tuple[tuple[int, float], ...]:
    """(width, core-seconds of each column up to it from the width before) from the probe's prompt with every row's
    logits at its widths (ceilings.logits_times), `core_per_s` core-seconds a second of it; a width that took no
    longer than the one before prices nothing (its columns take the next width's price)."""
    pts = sorted((int(w), float(t)) for w, t in (logits_s or {}).items())
    return tuple((w1, (t1 - t0) / (w1 - w0) * core_per_s) for (w0, t0), (w1, t1) in zip(pts, pts[1:]) if t1 > t0)


def batch_columns(logits_s: dict[str, float] | None, top: int, step_top: float,
                  core_per_s: float) -> tuple[tuple[tuple[int, float], ...], float]:
    """(column_prices, each + what a batch's sequence costs beyond a prompt's token; that cost): the probe's batch
    step of `top` sequences (`step_top` core-seconds) against its prompt of as many tokens with every row's logits,
    the same matmuls, ÷ top (the sequences' own attention and KV cells, each row's argmax: 0.3–0.6 ms a sequence at 2
    threads on an EPYC VM, engine alone; 0 where the prompt is dearer or was not timed at that width). At one width,
    not the difference of the two lines' slopes: inside the first column tile a prompt's columns cost little (the
    tile is computed whole), a batch's do not, and a slope's four timings carry more noise than two."""
    t = {int(w): float(v) for w, v in (logits_s or {}).items()}
    extra = max(0.0, (step_top - t[top] * core_per_s) / top) if top in t and top > 0 else 0.0
    return tuple((w, price + extra) for w, price in column_prices(logits_s, core_per_s)), extra


def _column_note(prices: tuple[tuple[int, float], ...], extra: float, top: int) -> str:
    each = ", ".join(f"{max(prev, top) + 1}–{w} {p * 1e3:.2f}"  # the prices that apply: past the probe's batches
                     for prev, (w, p) in zip((0, *(w for w, _ in prices)), prices) if w > top)
    return (f"batch columns past B = {top} at a prompt's further token's price with its logits at their width and "
            f"{extra * 1e3:.2f} a batch's sequence costs beyond it (B = {top} against a prompt of {top}), core-ms a "
            f"column: {each}")


def cpu_path(ck: CpuKernels, features: Sequence[str]) -> tuple[int, frozenset[str]]:
    """(tinyBLAS's tile width in columns, the weight types it multiplies that the build does not repack) for a
    llama.cpp CPU build whose llama_print_system_info sets `features` (presets/kernels.toml [cpu]); (0, ∅) where
    the build has no tinyBLAS (LLAMAFILE) or an instruction set the table does not describe."""
    f = {x.upper() for x in features}
    if "LLAMAFILE" not in f or "AMX_INT8" in f:  # AMX's own buffer type takes the legacy quants: not described
        return 0, frozenset()
    if "AVX512" in f:
        isa, width, rep = "x86", ck.tinyblas_q0_width["avx512"], ck.repacked_types["avx512"]
    elif "AVX2" in f:
        isa, width, rep = "x86", ck.tinyblas_q0_width["avx2"], ck.repacked_types["avx2"]
    elif "NEON" in f and "DOTPROD" in f:
        isa, width, rep = "arm", ck.tinyblas_q0_width["arm"], ck.repacked_types["arm_dotprod"]
    else:
        return 0, frozenset()
    repacked = set(rep) if "REPACK" in f else set()
    return width, frozenset(t for t in ck.tinyblas_q0_types[isa] if t not in repacked)


def cpu_batch_path(work: WorkModel, features: Sequence[str]) -> tuple[int, float, str]:
    """(the tile width, the share of a step's weight bytes a second pass reads again, a note in words) for this
    model on a CPU build with `features`: (0, 0.0, "") where either is not known or no weight takes tinyBLAS."""
    width, types = cpu_path(cpu_kernels(), features)
    total = work.read_bytes(1)
    again = sum(n for t, n in work.matmul_type_bytes if t in types)
    if not width or not again or not total:
        return 0, 0.0, ""
    share = min(1.0, again / total)
    shown = ", ".join(sorted(t for t, n in work.matmul_type_bytes if t in types))
    return width, share, (f"batch path: llama.cpp's CPU tinyBLAS multiplies this model's {shown} weights "
                          f"({share:.0%} of a step's bytes) in tiles of {width} columns; a B past a whole "
                          f"tile (B = {width + 1}, beyond a multiple of {width}) reads them a second time for the "
                          "columns left (presets/kernels.toml [cpu])")


def cpu_passes(tile: int, b: int) -> int:
    """Passes tinyBLAS makes over its matrices for b columns: one tile-width sweep covering the largest multiple
    of `tile`, and one more for the columns left (sgemm.cpp mnpack); one where b fits a single tile."""
    return 2 if tile and b > tile and b % tile else 1


def repass_factor(tile: int, share: float, b: int) -> float:
    """The CPU batch step's fixed part (its weights' product) at b columns, × the single pass's: the second pass
    re-reads `share` of the weights."""
    return 1.0 + share * (cpu_passes(tile, b) - 1)


def step_reads(work: WorkModel, m: Machine, contexts: Sequence[int]) -> float:
    """Bytes one decode step of len(contexts) sequences reads (work.bytes_per_step), except where the backend's
    vector kernels for a mixture of experts read each token's experts on their own (Metal's mul_mv_id below
    moe_tiled_min_b tokens: presets/kernels.toml), not the step's distinct experts once."""
    b, path, e = len(contexts), m.kernels, work.experts
    total = work.read_bytes(b) + sum(work.kv_read_bytes(c, window_cells(work, m, c, b)) for c in contexts)
    if path and e and 1 < b < path.moe_tiled_min_b and path.moe_vector_reads == "per-token":
        total += (b * e.used - e.distinct(b)) * e.bytes_each
    return total


def window_cells(work: WorkModel, m: Machine, ctx: int, b: int = 1) -> int:
    """The cells of a windowed layer a sequence's attention reads a step at `ctx` tokens in a step of `b` (0: its
    window). Metal's flash_attn_ext_vec skips each block of 32 cells the mask hides (ggml-metal.metal 7562-7565): the
    window, 0 here. CUDA's kernels read every cell below KV_max (fattn-vec.cuh 250-254): llama.cpp's window cache holds
    S = pad(window + ubatch) cells and puts position p in cell p mod S (its ring: find_slot reuses the masked cell at
    its head); one sequence alone reads all S (no KV_max: fattn-common.cuh 1094 scans the mask only for several
    sequences or ≥ 1024 queries), several read up to the last stride of 256 holding a position inside the window
    (flash_attn_mask_to_KV_max, 666-718): up to ctx mod S where the window does not wrap round the ring, else S.
    docs/design/kernels.md, "Attention"."""
    size = work.window_cache_cells(m.ubatch) if m.window_kv_reads == "cache" else 0
    if not size or ctx <= size:
        return ctx if size else 0
    if b <= 1:
        return size
    hi, lo = ctx % size, (ctx - work.window + 1) % size
    return size if lo > hi else min(size, -(-(hi + 1) // 256) * 256)


def attention_time(work: WorkModel, m: Machine, ctx: int) -> float:
    """Seconds one sequence's attention arithmetic takes in the vector flash-attention kernels at `ctx` tokens:
    4 · query heads · head_dim FLOPs a cell it reads, at vector_efficiency × the chip's prefill FLOP/s. With grouped
    queries that is heads ÷ kv_heads FLOPs a byte of F16 KV, which the bytes do not hide (docs/design/kernels.md,
    "Attention's arithmetic"). 0 without a kernel path or a prompt rate."""
    path, f = m.kernels, m.prefill_flops
    if path is None or not f:
        return 0.0
    return (work.flops_per_token(ctx) - work.flops_per_token(0)) / (path.vector_efficiency * f)


def kernel_time(work: WorkModel, m: Machine, b: int, ctx: int) -> tuple[float, str]:
    """(seconds, regime): the arithmetic a step of B tokens costs beyond its bytes in the kernels llama.cpp's
    backend runs at that B (docs/design/kernels.md, "The price of each regime"). Vector kernels (B ≤
    vector_max_b): each further column's arithmetic at vector_efficiency × the chip's prefill FLOP/s, and every
    sequence's attention arithmetic at that rate, the first's too (B = 1: that alone). Tiled kernels:
    B rounded up to the tile, at tile_efficiency × the prefill FLOP/s; a mixture of experts' routed matmuls tile
    each distinct expert's share of the B·k token-expert pairs on its own (from moe_tiled_min_b tokens), at the
    prefill FLOP/s itself: their grid spans every distinct expert's row tiles, as a prompt's does, where a dense
    decode matmul's spans one column of tiles (tile_efficiency: docs/design/kernels.md, "Routed tiles")."""
    path, f = m.kernels, m.prefill_flops
    if path is None or not f:
        return 0.0, "vector" if b < 2 else "bytes only"
    t_attn = attention_time(work, m, ctx)  # the first sequence's attention: its further columns' is in f_dense
    if b < 2:
        return t_attn, "vector"
    e = work.experts
    f_exp = 2.0 * e.used * e.params_each if e else 0.0  # a token's routed experts
    f_dense = work.flops_per_token(ctx) - f_exp  # the rest: shared weights, attention
    vec, tiled = path.vector_efficiency * f, path.tile_efficiency * f
    if b <= path.vector_max_b:
        t, regime = (b - 1) * f_dense / vec + t_attn, "small-batch vector"
    else:
        t, regime = _tile(path, b) * f_dense / tiled, f"tiled (B = {b} priced as {_tile(path, b)})"
    if e:
        if b < path.moe_tiled_min_b:
            t += (b - 1) * f_exp / vec
        else:
            d = e.distinct(b)
            t += d * _tile(path, b * e.used / d) * 2.0 * e.params_each / f  # a prompt's grid: the prompt rate
            regime += "; experts tiled"
    return t, regime


def dequant_time(work: WorkModel, m: Machine, b: int) -> float:
    """Seconds a step's vector kernels spend decoding its K-quant weights beyond reading them (docs/design/kernels.md,
    "Quant types"): the weights the step multiplies × the fitted FLOP-equivalents a weight (kernels.toml
    kquant_ops_per_weight) ÷ the chip's prefill FLOP/s, added to the bytes' time (the published rows say it does not
    hide behind them). 0 for legacy quants, floats and types not known (their bytes alone), for the tiled regime (its
    prompt rate already holds the decoding) and for a machine without a kernel path (a CPU's probe measured its own
    model's kernels)."""
    path, f = m.kernels, m.prefill_flops
    if path is None or not f or not path.kquant_ops_per_weight or b > path.vector_max_b:
        return 0.0
    if quant_family(work.quant) != "k":
        return 0.0
    return work.matmul_weights(b) * path.kquant_ops_per_weight / f


def _tile(path: Kernels, tokens: float) -> int:
    """The tokens a tiled kernel computes for `tokens` columns: the smallest tile width ≥ them, else whole tiles
    of the widest."""
    widest = path.tiles[-1]
    return next((w for w in path.tiles if w >= tokens), widest * -int(-tokens // widest))


def _compute_times(work: WorkModel, m: Machine, k: int, b: int, thr: int, ctx: int,
                   prompt_tokens: int) -> tuple[float, float]:
    """(the compute ceiling of a decode step, the prefill of the level's B prompts) for predict: a CPU's from the
    probe's core-seconds; a GPU with a kernel path prefills at its prompt rate (its decode arithmetic is
    kernel_time's, added to the bytes); another chip's from FLOP/s."""
    if m.cores and m.step_core_s:
        oversub = max(1.0, k * thr / m.cores)  # more threads than cores: each engine gets its share
        rate = m.speedup(thr) / oversub
        ctx_scale = work.flops_per_token(ctx) / work.flops_per_token(0)  # attention grows the step
        reads = work.read_bytes(b) / work.read_bytes(1)  # a mixture of experts: B tokens read more experts
        t_cpu = m.step_core(b, reads) * ctx_scale / rate
        # B users of a closed loop arrive together: one engine prefills B prompts; a prompt is one matrix
        # product: it scales with the engine's cores, not as a decode step does
        t_prefill = b * prompt_tokens * m.prefill_core_s / (thr / oversub) if m.prefill_core_s else 0.0
        return t_cpu, t_prefill
    flops = m.prefill_flops if m.kernels is not None and m.prefill_flops else m.flops
    if not flops:
        return 0.0, 0.0
    t_prefill = max(b * work.prefill_flops(prompt_tokens) / (flops / k),
                    work.read_bytes(b * prompt_tokens) / (m.bandwidth_gbps * 1e9 / k))
    if m.kernels is not None and m.prefill_flops:
        return 0.0, t_prefill
    return work.flops_per_step([ctx] * b) / (flops / k), t_prefill


def predict(work: WorkModel, m: Machine, mode: str, k: int = 1, b: int = 1, threads: int | None = None,
            at: Lengths = Lengths()) -> Prediction:
    """One level of K engines (instances) or B sequences in one (batch), `threads` each, at these lengths."""
    prompt_tokens, output_tokens, context = at.prompt_tokens, at.output_tokens, at.context
    b_eff = 1 if mode == "instances" else b
    ctx = context if context is not None else prompt_tokens + output_tokens // 2
    ctxs = [ctx] * b_eff
    shares = {}
    # memory: K engines decoding at once share the bandwidth
    moved_step = step_reads(work, m, ctxs)
    kv = sum(work.kv_read_bytes(c, window_cells(work, m, c, b_eff)) for c in ctxs)
    t_mem = moved_step / (m.bandwidth_gbps * 1e9 / k)
    shares["bandwidth"] = t_mem
    thr = threads or (max(1, m.cores // k) if m.cores else 1)
    t_cpu, t_prefill = _compute_times(work, m, k, b_eff, thr, ctx, prompt_tokens)
    if t_cpu:
        shares["compute"] = t_cpu  # the engine's own cost (a CPU's cores' time-sharing included), or FLOPs
    t_kernel, regime = kernel_time(work, m, b_eff, ctx)
    if m.cores and cpu_passes(m.cpu_tile, b_eff) > 1:  # the CPU's tinyBLAS: the columns past its last whole tile
        regime = (f"2 passes: {b_eff - b_eff % m.cpu_tile} columns in tiles of {m.cpu_tile}, then "
                  f"{b_eff % m.cpu_tile} more")
    t_kernel *= k  # K engines share the chip's ALUs as they share its bandwidth (B = 1 each: their attention)
    # of it, the vector regime's attention arithmetic (every sequence's), shown apart (Prediction.binds)
    t_attn = k * b_eff * attention_time(work, m, ctx) if m.kernels and b_eff <= m.kernels.vector_max_b else 0.0
    if t_attn:
        shares["attention"] = t_attn
    if t_kernel - t_attn > 1e-15:
        shares["kernels"] = t_kernel - t_attn
    t_deq = k * dequant_time(work, m, b_eff)  # K engines share the chip's ALUs as they share its bandwidth
    if t_deq:
        shares["dequant"] = t_deq
    spill = m.spill_bytes(work, k, b_eff, ctx)
    t_swap = spill / (m.swap_gbps * 1e9)  # the part over the budget comes back from swap every step
    if spill:
        shares["swap"] = t_swap
    t_fixed = m.step_overhead_s + m.moe_layer_s * work.moe_layers + (
        m.batch_step_s + (b_eff - 1) * m.seq_step_s + m.moe_batch_layer_s * work.moe_layers if b_eff > 1 else 0.0)
    if t_fixed:
        shares["overhead"] = t_fixed
    t_step = max(t_mem, t_cpu) + t_kernel + t_deq + t_fixed + t_swap
    busy = float(min(m.cores, k * thr)) if m.cores else 0.0  # a decoding thread keeps its core busy
    binding = "memory" if spill else name_wall(t_mem / t_step, busy, m.cores, k * thr,
                                               max(t_cpu, t_kernel, t_deq) > t_mem,
                                               "" if m.serializing else None)[0]
    tpot = t_step
    ttft = t_prefill + t_step
    if not t_prefill:
        ttft = t_step * 2  # no prefill figure: at least one step for the prompt and one for the first token
    per_request = ttft + (output_tokens - 1) * tpot
    streams = k * b_eff
    if m.serializing:  # one request at a time however many streams: they queue
        streams = 1
        ttft = ttft * (k * b_eff + 1) / 2
    agg = streams * output_tokens / per_request
    moved = k * moved_step / t_step
    return Prediction(mode, k, b_eff, thr, tpot, ttft, agg, 1.0 / tpot, moved, binding,
                      {c: v / t_step for c, v in shares.items()}, m.cores, busy, spill, regime, ctx,
                      kv / moved_step if moved_step else 0.0)


def predict_range(work: WorkModel, m: Machine, mode: str, k: int = 1, b: int = 1, threads: int | None = None,
                  at: Lengths = Lengths()) -> tuple[Prediction, Prediction] | None:
    """A chip nobody measured (m.family): the level predicted at the family's slowest figures (its lowest
    efficiency, its highest step overhead) and at its fastest; None for a measured machine."""
    f = m.family
    if f is None:
        return None
    spec = m.bandwidth_gbps / f.efficiency[1]
    slow = replace(m, bandwidth_gbps=spec * f.efficiency[0], step_overhead_s=f.overhead_ms[2] / 1e3)
    fast = replace(m, bandwidth_gbps=spec * f.efficiency[2], step_overhead_s=f.overhead_ms[0] / 1e3)
    return predict(work, slow, mode, k, b, threads, at), predict(work, fast, mode, k, b, threads, at)


@dataclass(frozen=True)
class Point:
    """A measured level: what calibrate() fits to."""

    mode: str
    k: int
    b: int
    threads: int
    tpot_s: float
    ttft_engine_s: float | None = None
    prompt_tokens: int = 32
    output_tokens: int = 128


def calibrate(work: WorkModel, m: Machine, points: Sequence[Point]) -> Machine:
    """At most two measured points: a B = 1 point rescales the per-step core cost (and the prefill cost
    from its engine TTFT); a batch point rescales the batched step's cost (its fixed part and each
    sequence's; without the probe's batch line, it fixes what each further sequence adds). Each sets the
    compute time at its level to the measured TPOT, whichever ceiling bound there before; a point faster
    than the bandwidth ceiling allows raises the bandwidth to what it moved. So the calibrated model gives
    back each of its points."""
    if len(points) > 2:
        raise ValueError("calibrate takes at most two measured points")
    if not (m.cores and m.step_core_s):
        return m
    single = [p for p in points if (p.b == 1 or p.mode == "instances")]
    batch = [p for p in points if p.mode == "batch" and p.b > 1]
    notes: list[str] = []
    for p in single[:1]:
        pr = predict(work, m, p.mode, p.k, 1, p.threads, at=Lengths(prompt_tokens=p.prompt_tokens,
                                                                    output_tokens=p.output_tokens))
        t_cpu = pr.shares["compute"] * pr.tpot_s  # the compute time, not the step (bandwidth may bind)
        step = m.step_core_s * p.tpot_s / t_cpu
        prefill = m.prefill_core_s
        if p.ttft_engine_s and m.prefill_core_s:  # one prompt an engine: a B = 1 point, or instances (predict)
            cores_used = p.threads / max(1.0, p.k * p.threads / m.cores)
            prefill = max(1e-9, (p.ttft_engine_s - p.tpot_s) * cores_used / p.prompt_tokens)
        m = _bandwidth_at_most(replace(m, step_core_s=step, prefill_core_s=prefill), pr.shares["bandwidth"] * pr.tpot_s,
                               p, notes)
    for p in batch[:1]:
        rate = m.speedup(p.threads) / max(1.0, p.k * p.threads / m.cores)
        ctx = p.prompt_tokens + p.output_tokens // 2
        ctx_scale = work.flops_per_token(ctx) / work.flops_per_token(0)
        core = p.tpot_s * rate / ctx_scale
        reads = work.read_bytes(p.b) / work.read_bytes(1)
        base = m.batch_base_core_s
        if base is None:
            m = replace(m, seq_core_s=max(0.0, (core - (m.step_core_s or 0.0) * reads) / (p.b - 1)))  # see the top
        elif core >= (probed := m.step_core(p.b, reads)):
            # the step's fixed part (the weights' product) and its columns are the probe's; what the load adds beyond
            # the probe's short sequences (attention over longer contexts, each sequence's sampling) is each
            # sequence's, a column priced as a prompt token's as much as one on the probe's line
            m = replace(m, seq_extra_core_s=m.seq_extra_core_s + (core - probed) / p.b)
        else:
            f = core / probed
            m = replace(m, batch_base_core_s=base * f, seq_core_s=m.seq_core_s * f,
                        column_prices=tuple((w, price * f) for w, price in m.column_prices))
        pr = predict(work, m, p.mode, p.k, p.b, p.threads, at=Lengths(prompt_tokens=p.prompt_tokens,
                                                                      output_tokens=p.output_tokens))
        m = _bandwidth_at_most(m, pr.shares["bandwidth"] * pr.tpot_s, p, notes)
    return replace(m, notes=m.notes + (f"calibrated on {len(points)} measured point(s)",) + tuple(notes))


def _bandwidth_at_most(m: Machine, t_mem: float, p: Point, notes: list[str]) -> Machine:
    """A measured step shorter than the bandwidth time at its level moved more than the bandwidth figure
    allows: the figure is raised to what the step moved (a lower one leaves it)."""
    if t_mem <= p.tpot_s:
        return m
    gbps = m.bandwidth_gbps * t_mem / p.tpot_s
    notes.append(f"bandwidth raised {m.bandwidth_gbps:.1f} → {gbps:.1f} GB/s: {p.mode} K={p.k} B={p.b} "
                 f"decoded faster than {m.bandwidth_source} allows")
    return replace(m, bandwidth_gbps=gbps)


def prediction_table(work: WorkModel, m: Machine, ks: Sequence[int] = (1, 2, 3, 4),
                     bs: Sequence[int] = (1, 2, 4, 8, 16, 32, 64), prompt_tokens: int = 128,
                     output_tokens: int = 256, context: int | None = None) -> list[Prediction]:
    """`context`: the KV tokens each sequence holds during decode (plan --context; None: prompt + half the
    output), so each step's attention reads the KV of the context asked."""
    at = Lengths(prompt_tokens, output_tokens, context)
    return ([predict(work, m, "instances", k, 1, None, at) for k in ks]
            + [predict(work, m, "batch", 1, b, None, at) for b in bs])


def format_predictions(work: WorkModel, m: Machine, rows: Sequence[Prediction], prompt_tokens: int,
                       output_tokens: int) -> str:
    lines = [f"predicted on {m.name}: {m.bandwidth_gbps:.0f} GB/s ({m.bandwidth_source})"
             + (f", {m.flops / 1e12:.0f} TFLOP/s" if m.flops else "")
             + (f", {m.cores} cores" if m.cores else ""),
             *(f"  {n}" for n in m.notes),
             f"work: {work.describe()} read per step ({work.note}), "
             f"{work.flops_per_token(0) / 1e9:.1f} GFLOP per token; prompt {prompt_tokens}, output {output_tokens} tokens",
             *(f"  assumed: {a}" for a in work.assumed),
             "",
             f"{'mode':<9} {'K':>2} {'B':>3} {'TPOT':>9} {'tok/s/user':>10} {'tok/s all':>10} {'TTFT':>9} "
             f"{'K×tok/s×W':>10}  binding"]
    for p in rows:
        lines.append(f"{p.mode:<9} {p.k:>2} {p.b:>3} {p.tpot_s * 1e3:>7.1f}ms {p.per_stream_tps:>10.1f} "
                     f"{p.aggregate_tps:>10.1f} {p.ttft_s * 1e3:>7.0f}ms "
                     f"{p.bytes_per_s / 1e9:>7.0f}GB/s  "
                     f"{p.wall()}" + (f" · {p.regime}" if p.regime not in ("", "vector") else "")
                     + _range_text(work, m, p, prompt_tokens, output_tokens))
    lines.append("K×tok/s×W: the bytes all engines read a second (weights actually read, experts routed to, KV); it "
                 "pins near the bandwidth once one stream saturates it (seed 000).")
    return "\n".join(lines)


def _range_text(work: WorkModel, m: Machine, p: Prediction, prompt_tokens: int, output_tokens: int) -> str:
    """' · range 31.2–41.0 tok/s/user (metal family)' for a chip nobody measured, else ''."""
    r = predict_range(work, m, p.mode, p.k, p.b, p.threads, Lengths(prompt_tokens, output_tokens, p.context))
    if r is None or m.family is None:
        return ""
    return f" · range {r[0].per_stream_tps:.1f}–{r[1].per_stream_tps:.1f} tok/s/user ({m.family.backend} family)"


@dataclass(frozen=True)
class Roofline:
    """What the live view predicts with: the work, the machine, and the lines it draws."""

    work: WorkModel
    machine: Machine
    attainable_gbps: float

    def level(self, mode: str, k: int, b: int, threads: int | None, prompt_tokens: int,
              output_tokens: int) -> Prediction | None:
        if is_remote(mode):  # no roofline of ours for a server's machine
            return None
        return predict(self.work, self.machine, mode, k, b, threads, at=Lengths(prompt_tokens=prompt_tokens,
                                                                                output_tokens=output_tokens))

    def span(self, p: Prediction, prompt_tokens: int, output_tokens: int) -> tuple[float, float] | None:
        """The level's aggregate tok/s as a range (slowest, fastest) where the machine is a chip nobody measured
        (predict_range: its backend family's figures), else None: a measured machine's prediction is one number."""
        r = predict_range(self.work, self.machine, p.mode, p.k, p.b, p.threads,
                          Lengths(prompt_tokens, output_tokens, p.context))
        return None if r is None else (r[0].aggregate_tps, r[1].aggregate_tps)
