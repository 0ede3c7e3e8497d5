"""core/roofline.py and core/work.py by hand: a toy model (1 GB read a step, 0.5 G weights multiplied, 10 layers) on
a toy GPU (100 GB/s, 1 ms a step, vectors to B = 8 then tiles of 16/32/64 at 10 TFLOP/s) and a toy CPU, each
figure worked out in the comments (benchmarks/mutation.py runs these against the modules' mutants)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from measure.core import roofline as RL
from measure.core import work as W
from measure.core.readings import Ceilings
from presets import Chip, Kernels, cpu_kernels

# KV: 2 (K and V) × 2 kv heads × 64 × 2 B = 512 B a layer and token
TOY = W.WorkModel(name="toy", source="hand", params=1_000_000_000, file_bytes=1_000_000_000,
                  weight_bytes=1_000_000_000, embd_row_bytes=0.0, matmul_params=500_000_000, layers=10, heads=8,
                  kv_heads=2, head_dim=64)
PATH = Kernels("cuda", vector_max_b=8, tiles=(16, 32, 64), moe_tiled_min_b=32, moe_vector_reads="union",
               vector_efficiency=0.5, tile_efficiency=0.25)
GPU = RL.Machine("toy-gpu", 100.0, "hand", step_overhead_s=0.001, kernels=PATH, prefill_flops=1e13)
AT = RL.Lengths(prompt_tokens=100, output_tokens=11, context=1000)
# 2 cores; a step 20 core-ms at one thread, 2 threads 1.5× as fast; a prompt token 1 core-ms; bandwidth to spare
CPU = RL.Machine("toy-cpu", 1000.0, "probe", cores=2, step_core_s=0.02, prefill_core_s=0.001,
                 thread_speedup={1: 1.0, 2: 1.5})


def test_work_figures_by_hand() -> None:
    assert TOY.kv_layer_token_bytes == 512 and TOY.kv_bytes_per_token == 5120
    assert TOY.kv_read_bytes(1000) == 10 * 1000 * 512
    # 2 × 0.5 G weights + 4 × 8 heads × 64 × 10 layers × 1000 tokens
    assert TOY.flops_per_token(1000) == 1e9 + 4 * 8 * 64 * 10 * 1000
    assert TOY.flops_per_step([1000, 0]) == 2e9 + 4 * 8 * 64 * 10 * 1000
    # a prompt of 100: 100 × 1e9 + 4 × 10 layers × 8 × 64 × (100 · 99 / 2)
    assert TOY.prefill_flops(100) == 100 * 1e9 + 4 * 10 * 8 * 64 * 4950
    assert TOY.read_bytes(4) == 1e9 and TOY.matmul_weights(4) == 5e8 and TOY.active_params == 5e8
    assert TOY.bytes_per_step([1000, 1000]) == 1e9 + 2 * 5.12e6
    untied = replace(TOY, embd_row_bytes=100.0)
    assert untied.read_bytes(3) == 1e9 + 300
    assert TOY.moe_layers == 0 and TOY.attention_layers == 10 and TOY.full_layers == 10


# a sequence's attention at 1000 tokens: 4 × 8 query heads × 64 × 10 layers × 1000 cells = 20.48 MFLOP, at the
# vector kernels' 0.5 × 10 TFLOP/s: 4.096 µs a step
ATTN = 2.048e7 / 5e12


def test_one_stream_on_the_toy_gpu() -> None:
    # step: 1 GB + 5.12 MB of KV at 100 GB/s = 10.0512 ms, + its attention's 4.096 µs, + 1 ms = 11.055296 ms
    p = RL.predict(TOY, GPU, "instances", 1, 1, at=AT)
    t = 0.0110512 + ATTN
    assert p.tpot_s == pytest.approx(t) and t == pytest.approx(0.011055296)
    # prefill: max(1.00101376e11 FLOP / 1e13, 1 GB / 100 GB/s) = 10.0101376 ms; TTFT = it + a step
    assert p.ttft_s == pytest.approx(0.0100101376 + t)
    # a request: TTFT + 10 × TPOT; 11 tokens a request
    assert p.aggregate_tps == pytest.approx(11 / (0.0100101376 + t + 10 * t))
    assert p.per_stream_tps == pytest.approx(1 / t)
    assert p.bytes_per_s == pytest.approx(1.00512e9 / t)
    assert p.shares == pytest.approx({"bandwidth": 0.0100512 / t, "attention": ATTN / t, "overhead": 0.001 / t})
    assert RL.attention_time(TOY, GPU, 1000) == pytest.approx(ATTN)
    assert p.binding == "bandwidth" and p.regime == "vector" and p.context == 1000
    assert p.kv_share == pytest.approx(5.12e6 / 1.00512e9)


def test_attention_arithmetic_at_long_context_is_named() -> None:
    # 100,000 tokens: 1 GB of weights (10 ms) + 0.512 GB of KV (5.12 ms) + 2.048 GFLOP of attention at 5 TFLOP/s
    # (0.4096 ms) + 1 ms = 16.5296 ms
    p = RL.predict(TOY, GPU, "instances", 1, 1, at=RL.Lengths(100, 11, context=100_000))
    assert p.tpot_s == pytest.approx(0.0165296)
    assert p.binds() == "vector kernels: weight bytes 60% · KV 31% · per-step cost 6% · attention arithmetic 2%"


def test_attention_is_shown_apart_in_the_vector_regime_only() -> None:
    # B = 8 (the widest vector step): its 8 sequences' attention (8 × 4.096 µs) apart from the weights' 7 further
    # columns (7 × 1 GFLOP at 5 TFLOP/s)
    p = RL.predict(TOY, GPU, "batch", 1, 8, at=AT)
    assert p.shares["attention"] * p.tpot_s == pytest.approx(8 * ATTN)
    assert p.shares["kernels"] * p.tpot_s == pytest.approx(7 * 1e9 / 5e12)
    # B = 9, tiled: the tile's columns carry the attention with the weights (16 × 1.02048 GFLOP at 2.5 TFLOP/s)
    p = RL.predict(TOY, GPU, "batch", 1, 9, at=AT)
    assert "attention" not in p.shares and p.shares["kernels"] * p.tpot_s == pytest.approx(16 * 1.02048e9 / 2.5e12)
    # no kernel path: neither
    assert not {"attention", "kernels"} & set(RL.predict(TOY, replace(GPU, kernels=None), "batch", 1, 4, at=AT).shares)


def test_k_instances_share_the_bandwidth() -> None:
    # K = 2: each engine's 1.00512 GB at 50 GB/s = 20.1024 ms, its attention at half the ALUs (2 × 4.096 µs),
    # + 1 ms; the prefill at half the FLOP/s
    p = RL.predict(TOY, GPU, "instances", 2, 1, at=AT)
    t = 0.0211024 + 2 * ATTN
    assert p.tpot_s == pytest.approx(t)
    assert p.ttft_s == pytest.approx(max(1.00101376e11 / 5e12, 1e9 / 5e10) + t)
    assert p.aggregate_tps == pytest.approx(2 * 11 / (p.ttft_s + 10 * t))
    assert p.bytes_per_s == pytest.approx(2 * 1.00512e9 / t)


def test_small_batch_vector_kernels() -> None:
    # B = 4 (≤ 8): bytes 1 GB + 4 × 5.12 MB = 10.2048 ms; each further column's arithmetic at 0.5 × 10 TFLOP/s:
    # 3 × 1.02048 GFLOP / 5e12 = 0.612288 ms, and the first sequence's attention (4.096 µs); + 1 ms
    p = RL.predict(TOY, GPU, "batch", 1, 4, at=AT)
    k = 3 * 1.02048e9 / 5e12 + ATTN
    t = 0.0102048 + k + 0.001
    assert p.tpot_s == pytest.approx(t) and p.regime == "small-batch vector"
    assert p.ttft_s == pytest.approx(4 * 1.00101376e11 / 1e13 + t)
    assert p.aggregate_tps == pytest.approx(4 * 11 / (p.ttft_s + 10 * t))
    assert set(p.shares) == {"bandwidth", "kernels", "attention", "overhead"}
    # the four sequences' attention (4 × 4.096 µs) apart; the rest the weights' further columns: 3 × 1 GFLOP
    assert p.shares["attention"] == pytest.approx(4 * ATTN / t)
    assert p.shares["kernels"] == pytest.approx(3 * 1e9 / 5e12 / t)
    assert RL.kernel_time(TOY, GPU, 4, 1000) == (pytest.approx(k), "small-batch vector")
    assert RL.kernel_time(TOY, GPU, 8, 1000)[1] == "small-batch vector"


@pytest.mark.parametrize("b,tile", [(9, 16), (16, 16), (17, 32), (33, 64), (64, 64), (65, 128), (100, 128),
                                    (129, 192)])
def test_tiled_kernels_round_b_up_to_the_tile(b: int, tile: int) -> None:
    # tiles at 0.25 × 10 TFLOP/s for B rounded up to the tile (whole tiles of the widest past it)
    t, regime = RL.kernel_time(TOY, GPU, b, 1000)
    assert t == pytest.approx(tile * 1.02048e9 / 2.5e12)
    assert regime == f"tiled (B = {b} priced as {tile})"
    assert RL._tile(PATH, b) == tile


def test_kernel_time_without_a_kernel_path() -> None:
    # one sequence: its attention's arithmetic alone (none at no context)
    assert RL.kernel_time(TOY, GPU, 1, 1000) == (pytest.approx(ATTN), "vector")
    assert RL.kernel_time(TOY, GPU, 1, 0) == (0.0, "vector")
    # grouped queries: 8 query heads on 2 KV heads read the same bytes for 4 × the arithmetic of 2 on 2
    assert RL.kernel_time(replace(TOY, heads=2), GPU, 1, 1000)[0] == pytest.approx(ATTN / 4)
    assert RL.kernel_time(TOY, replace(GPU, kernels=None), 1, 1000) == (0.0, "vector")
    assert RL.kernel_time(TOY, replace(GPU, kernels=None), 4, 1000) == (0.0, "bytes only")
    assert RL.kernel_time(TOY, replace(GPU, prefill_flops=None), 4, 1000) == (0.0, "bytes only")


MOE = replace(TOY, experts=W.Experts(count=8, used=2, bytes_each=1e8, params_each=5e7))


def test_experts_distinct_by_hand() -> None:
    e = MOE.experts
    assert e is not None
    assert e.distinct(1) == pytest.approx(2.0)  # 8 × (1 − 6/8)
    assert e.distinct(4) == pytest.approx(8 * (1 - 0.75 ** 4))
    assert e.distinct(0) == 0.0
    # ρ = 0.5: B′ = 4 ÷ (1 + 3 × 0.5) = 1.6 independent tokens
    assert replace(e, correlation=0.5).distinct(4) == pytest.approx(8 * (1 - 0.75 ** 1.6))
    assert replace(e, correlation=1.0).distinct(32) == pytest.approx(2.0)
    assert MOE.read_bytes(4) == pytest.approx(1e9 + 8 * (1 - 0.75 ** 4) * 1e8)
    assert MOE.matmul_weights(4) == pytest.approx(5e8 + 8 * (1 - 0.75 ** 4) * 5e7)
    assert MOE.active_params == 5e8 + 2 * 5e7 and MOE.moe_layers == 10
    assert replace(MOE, experts=replace(e, layers=4)).moe_layers == 4


def test_moe_batch_per_token_reads_and_routed_tiles() -> None:
    d4 = 8 * (1 - 0.75 ** 4)
    # Metal-like: vector kernels read each token's experts on their own below moe_tiled_min_b
    per_token = replace(GPU, kernels=replace(PATH, moe_vector_reads="per-token"))
    assert RL.step_reads(MOE, per_token, [0] * 4) == pytest.approx(1e9 + d4 * 1e8 + (4 * 2 - d4) * 1e8)
    assert RL.step_reads(MOE, GPU, [0] * 4) == pytest.approx(1e9 + d4 * 1e8)  # union: the distinct ones once
    assert RL.step_reads(MOE, per_token, [0]) == pytest.approx(1e9 + 2e8)
    # B = 4 < 32: the routed experts' further columns in the vector kernels too
    f_exp = 2 * 2 * 5e7
    f_dense = MOE.flops_per_token(0) - f_exp
    t, regime = RL.kernel_time(MOE, GPU, 4, 0)
    assert t == pytest.approx(3 * f_dense / 5e12 + 3 * f_exp / 5e12) and regime == "small-batch vector"
    # B = 40 ≥ 32: dense part tiled at 64; each distinct expert's share of the 80 pairs tiled on its own at the
    # prompt rate itself
    d40 = 8 * (1 - 0.75 ** 40)
    t, regime = RL.kernel_time(MOE, GPU, 40, 0)
    assert t == pytest.approx(64 * f_dense / 2.5e12 + d40 * 16 * 2 * 5e7 / 1e13)
    assert regime == "tiled (B = 40 priced as 64); experts tiled"


def test_windows_read_by_each_backend() -> None:
    swa = replace(TOY, window=128, window_layers=8)
    assert swa.window_cache_cells() == 768  # pad(128 + 512, 256)
    assert swa.window_cache_cells(100) == 256 and TOY.window_cache_cells() == 0
    cache = replace(GPU, window_kv_reads="cache")
    # a backend that skips masked cells reads the window (0 here: work takes its window)
    assert RL.window_cells(swa, GPU, 1000, 1) == 0
    assert swa.kv_read_bytes(1000, 0) == (2 * 1000 + 8 * 128) * 512
    # one that reads the cache: the context while within it; all 768 alone
    assert RL.window_cells(swa, cache, 500, 1) == 500 and RL.window_cells(swa, cache, 768, 4) == 768
    assert RL.window_cells(swa, cache, 1000, 1) == 768
    # several sequences: up to the last stride of 256 holding a position inside the window, unwrapped:
    # 1000 mod 768 = 232, (1000 − 127) mod 768 = 105 ≤ 232: ceil(233 / 256) × 256 = 256
    assert RL.window_cells(swa, cache, 1000, 2) == 256
    # wrapped: 800 mod 768 = 32 < (800 − 127) mod 768 = 673: the whole cache
    assert RL.window_cells(swa, cache, 800, 2) == 768
    # 1500: 732 and 605: ceil(733 / 256) × 256 = 768
    assert RL.window_cells(swa, cache, 1500, 2) == 768
    assert swa.kv_read_bytes(1000, 256) == (2 * 1000 + 8 * 256) * 512
    assert RL.step_reads(swa, cache, [1000, 1000]) == pytest.approx(1e9 + 2 * (2 * 1000 + 8 * 256) * 512)
    # flops: windowed layers attend their window
    assert swa.flops_per_token(1000) == 1e9 + 4 * 8 * 64 * (2 * 1000 + 8 * 128)


def test_kv_alloc_by_layout() -> None:
    swa = replace(TOY, window=128, window_layers=8)
    per = 512
    assert swa.kv_alloc_bytes(1000) == (2 * 1000 + 8 * 768) * per  # llama.cpp's window cache
    assert swa.kv_alloc_bytes(500) == (2 * 500 + 8 * 500) * per
    assert swa.kv_alloc_bytes(1000, "llama.cpp-full") == 10 * 1000 * per
    assert swa.kv_alloc_bytes(1000, "full") == 10 * 1000 * per
    assert swa.kv_alloc_bytes(1000, "mlx") == (2 * 1000 + 8 * 128) * per
    assert swa.kv_alloc_bytes(100, "mlx") == 10 * 100 * per
    assert swa.kv_alloc_bytes(1000, ubatch=256) == (2 * 1000 + 8 * 512) * per
    assert replace(swa, state_bytes=7.0, linear_layers=2).kv_alloc_bytes(100) == (0 + 8 * 100) * per + 7.0
    with pytest.raises(ValueError, match="unknown KV layout 'x'"):
        swa.kv_alloc_bytes(1, "x")
    assert W._pad(1) == 256 and W._pad(256) == 256 and W._pad(257) == 512 and W._pad(0) == 0
    mla = replace(TOY, mla_dim=576)
    assert mla.kv_layer_token_bytes == 576 * 2


def test_fixed_costs_of_a_batch_and_of_routing_layers() -> None:
    m = replace(GPU, kernels=None, prefill_flops=None, flops=None, batch_step_s=0.002, seq_step_s=0.0005,
                moe_layer_s=0.0001, moe_batch_layer_s=0.00002)
    # dense, B = 3: bytes 1 GB + 3 × 5.12 MB at 100 GB/s, + 1 ms + 2 ms + 2 × 0.5 ms
    p = RL.predict(TOY, m, "batch", 1, 3, at=AT)
    assert p.tpot_s == pytest.approx((1e9 + 3 * 5.12e6) / 1e11 + 0.001 + 0.002 + 0.001)
    # no prefill figure: TTFT two steps
    assert p.ttft_s == pytest.approx(2 * p.tpot_s)
    # a mixture of experts, B = 1: + 10 routing layers × 0.1 ms; B = 2 adds 10 × 0.02 ms besides the batch's
    p1 = RL.predict(MOE, m, "batch", 1, 1, at=AT)
    assert p1.tpot_s == pytest.approx((1e9 + 2e8 + 5.12e6) / 1e11 + 0.001 + 0.001)
    p2 = RL.predict(MOE, m, "batch", 1, 2, at=AT)
    reads = 1e9 + 8 * (1 - 0.75 ** 2) * 1e8 + 2 * 5.12e6
    assert p2.tpot_s == pytest.approx(reads / 1e11 + 0.001 + 0.001 + 0.002 + 0.0005 + 0.0002)


def test_a_serializing_server_queues_its_streams() -> None:
    m = replace(GPU, serializing=True)
    one = RL.predict(TOY, GPU, "instances", 1, 1, at=AT)
    p = RL.predict(TOY, m, "batch", 1, 3, at=AT)
    b3 = RL.predict(TOY, GPU, "batch", 1, 3, at=AT)
    assert p.tpot_s == pytest.approx(b3.tpot_s)
    # one stream at a time: TTFT × (3 + 1) / 2, one request's tokens over its time
    assert p.ttft_s == pytest.approx(b3.ttft_s * 2)
    assert p.aggregate_tps == pytest.approx(11 / (b3.ttft_s + 10 * b3.tpot_s))
    assert p.binding == "server queue" and one.binding == "bandwidth"


def test_a_cpu_step_from_the_probe_core_seconds() -> None:
    cpu = replace(CPU, bandwidth_gbps=50.0)  # the toy CPU with its bytes binding
    at = RL.Lengths(prompt_tokens=10, output_tokens=5, context=0)
    p = RL.predict(TOY, cpu, "instances", 1, 1, at=at)
    # compute 20 ms ÷ 1.5 = 13.33 ms over bytes 1 GB ÷ 50 GB/s = 20 ms: the bytes bind; prefill 10 × 1 ms ÷ 2
    assert p.tpot_s == pytest.approx(0.02) and p.ttft_s == pytest.approx(0.005 + 0.02)
    assert p.threads == 2 and p.cores_busy == 2.0
    assert p.binding == "bandwidth"  # the bytes take the whole step (checked before the cores)
    # K = 4 engines of one thread on 2 cores: each gets half a core: 20 ms × 2 = 40 ms; bytes 1 GB at 12.5 GB/s
    p4 = RL.predict(TOY, cpu, "instances", 4, 1, at=at)
    assert p4.tpot_s == pytest.approx(max(0.04, 1e9 / 12.5e9)) and p4.threads == 1
    assert p4.oversubscribed
    assert p4.ttft_s == pytest.approx(10 * 0.001 / (1 / 2) + p4.tpot_s)
    # the speedup past what was measured: linear from the last point
    assert cpu.speedup(4) == pytest.approx(3.0) and cpu.speedup(1) == 1.0 and cpu.speedup(2) == 1.5
    assert RL.Machine("m", 1.0, "x").speedup(3) == 3.0
    # B sequences: the batch path's base and per-sequence core-seconds
    batched = replace(cpu, batch_base_core_s=0.018, seq_core_s=0.003)
    assert batched.step_core(1) == pytest.approx(0.02) and batched.step_core(4) == pytest.approx(0.018 + 4 * 0.003)
    assert batched.step_core(4, reads=2.0) == pytest.approx(0.036 + 0.012)
    assert replace(cpu, seq_core_s=0.003).step_core(3) == pytest.approx(0.02 + 2 * 0.003)
    with pytest.raises(ValueError):
        RL.Machine("m", 1.0, "x").step_core(1)


def test_name_wall_thresholds() -> None:
    assert RL.name_wall(0.8) == ("bandwidth", "memory bandwidth (80% of attainable)")
    assert RL.name_wall(0.79, 1.8, 2) == ("cores", "CPU cores (1.8 of 2 busy)")
    assert RL.name_wall(0.5, 1.0, 2, 2, compute_binds=True) == ("compute", "compute (1.0 of 2 cores busy)")
    assert RL.name_wall(0.5, 0.8, 2, 2, compute_binds=True)[0] == "none"  # 0.8 < 0.45 × 2
    assert RL.name_wall(0.5, 0.5, 4, 1, compute_binds=True)[0] == "compute"  # given 1 core: 0.5 ≥ 0.45
    assert RL.name_wall(0.3, compute_binds=True) == ("compute", "compute")
    assert RL.name_wall(0.3) == ("none", "none: 70% headroom")
    assert RL.name_wall(0.0) == ("none", "none reached")
    assert RL.name_wall(0.9, queue="") == ("server queue", "server queue (one request at a time)")
    assert RL.name_wall(0.9, queue="slots 1")[1] == "server queue (one request at a time: slots 1)"


# ---- a chip from presets, and one nobody measured --------------------------------------------------------------
def _chip(key: str = "a", **kw: object) -> Chip:
    return Chip(key=key, name=key.upper(), **kw)  # type: ignore[arg-type]


def test_a_measured_chip_takes_its_fitted_figures() -> None:
    c = _chip(bandwidth_gbps=1000.0, fp16_tflops=100.0, effective_bandwidth_gbps=800.0, step_overhead_ms=2.0,
              effective_source="src", batch_step_ms=1.0, seq_step_ms=0.1, moe_layer_ms=0.05, moe_batch_layer_ms=0.01)
    m = RL.Machine.from_chip(c)
    assert (m.name, m.bandwidth_gbps, m.bandwidth_source) == ("A", 800.0, "effective (published)")
    assert m.step_overhead_s == pytest.approx(0.002) and m.flops == pytest.approx(5e13)  # FP16 × 0.5 assumed
    assert (m.batch_step_s, m.seq_step_s) == (pytest.approx(0.001), pytest.approx(0.0001))
    assert (m.moe_layer_s, m.moe_batch_layer_s) == (pytest.approx(0.00005), pytest.approx(0.00001))
    assert m.kernels is None and m.prefill_flops is None and m.window_kv_reads == "window" and m.family is None
    assert m.notes == (
        "bandwidth 800 GB/s effective (80% of 1000 spec) and 2 ms a step, fitted to src",
        "compute 100 TFLOP/s FP16 spec × 0.5 (assumed)",
        "batch path: +1 ms a step at B ≥ 2 and 0.1 ms each further sequence (fitted on a dense model's "
        "llama-batched-bench rows); a mixture of experts +0.01 ms more a routing layer (fitted on one MoE's)",
        "a mixture of experts: +0.05 ms a step for each layer that routes (fitted on published MoE rows of this "
        "chip's llama.cpp backend)")
    assert RL.Machine.from_chip(c, flop_efficiency=0.25).flops == pytest.approx(2.5e13)


def test_an_efficiency_given_overrides_what_was_measured() -> None:
    c = _chip(bandwidth_gbps=1000.0, effective_bandwidth_gbps=800.0, step_overhead_ms=2.0, batch_step_ms=1.0,
              seq_step_ms=0.1, moe_layer_ms=0.05)
    m = RL.Machine.from_chip(c, bw_efficiency=0.5)
    assert (m.bandwidth_gbps, m.bandwidth_source, m.step_overhead_s) == (500.0, "spec × assumed efficiency", 0.0)
    assert (m.batch_step_s, m.seq_step_s, m.moe_layer_s, m.moe_batch_layer_s, m.flops) == (0.0, 0.0, 0.0, 0.0, None)
    assert m.notes == ("bandwidth 1000 GB/s spec × 0.5 (assumed efficiency): an estimate, no published measurement "
                       "of this chip in presets", "no FLOP/s figure in presets: the compute ceiling is not drawn",
                       "batch path not measured on this chip: B ≥ 2 costs only its bytes (an estimate)")
    # nothing measured and no family: spec × 0.8
    alone = RL.Machine.from_chip(_chip(bandwidth_gbps=1000.0, backend="nobody"), peers=[])
    assert (alone.bandwidth_gbps, alone.bandwidth_source) == (800.0, "spec × assumed efficiency")
    with pytest.raises(ValueError, match="chip B has no verified bandwidth in presets"):
        RL.Machine.from_chip(_chip("b", bandwidth_gbps=None))


def test_a_chip_with_a_kernel_path_prices_its_batches_by_the_kernels() -> None:
    from presets import kernels

    c = _chip(bandwidth_gbps=1000.0, effective_bandwidth_gbps=800.0, step_overhead_ms=2.0, backend="cuda",
              prefill_tflops=50.0, batch_step_ms=1.0, seq_step_ms=0.1, moe_batch_layer_ms=7.0)
    m = RL.Machine.from_chip(c)
    path = kernels("cuda")
    assert m.kernels == path and m.prefill_flops == pytest.approx(5e13) and m.window_kv_reads == "cache"
    assert (m.batch_step_s, m.seq_step_s) == (0.0, 0.0)  # the kernels' arithmetic instead of a fitted batch cost
    assert m.moe_batch_layer_s == pytest.approx(path.moe_batch_layer_ms / 1e3)
    assert any(n.startswith("batch path: llama.cpp's cuda kernels (presets/kernels.toml): vectors up to B = 8, then "
                            "tiles of 8/16/24/32… tokens at 50 TFLOP/s") for n in m.notes)
    # a backend with a path but no prompt rate for this chip: its fitted batch figures
    m2 = RL.Machine.from_chip(replace(c, prefill_tflops=None))
    assert m2.kernels is None and m2.batch_step_s == pytest.approx(0.001)


def test_a_chip_nobody_measured_takes_its_familys_median_and_range() -> None:
    peers = [_chip("p1", bandwidth_gbps=100.0, effective_bandwidth_gbps=60.0, step_overhead_ms=1.0, backend="metal",
                   moe_layer_ms=0.1, prefill_tflops=10.0),
             _chip("p2", bandwidth_gbps=200.0, effective_bandwidth_gbps=140.0, step_overhead_ms=3.0, backend="metal",
                   moe_layer_ms=0.3, prefill_tflops=30.0),
             _chip("p3", bandwidth_gbps=400.0, effective_bandwidth_gbps=320.0, step_overhead_ms=2.0, backend="metal"),
             _chip("other", bandwidth_gbps=400.0, effective_bandwidth_gbps=40.0, step_overhead_ms=9.0, backend="cuda"),
             _chip("unfitted", bandwidth_gbps=400.0, backend="metal")]
    new = _chip("new", bandwidth_gbps=500.0, backend="metal")
    f = RL.Family.of(new, peers + [new])
    assert f is not None and f.chips == ("p1", "p2", "p3")
    assert f.efficiency == pytest.approx((0.6, 0.7, 0.8)) and f.overhead_ms == (1.0, 2.0, 3.0)
    assert f.moe_layer_ms == pytest.approx(0.2) and f.prefill_per_gbps == pytest.approx(0.125)  # 0.1 and 0.15
    est = f.estimate(new)
    assert est.effective_bandwidth_gbps == pytest.approx(350.0) and est.step_overhead_ms == 2.0
    assert est.prefill_tflops == pytest.approx(62.5) and est.moe_layer_ms == pytest.approx(0.2)
    assert est.effective_source == ("no measurement of this chip: an estimate from the 3 metal chips fitted "
                                    "(efficiency 60%–80% of spec, median 70%; 1–3 ms a step, median 2)")
    assert f.estimate(replace(new, prefill_tflops=5.0)).prefill_tflops == 5.0
    assert RL.Family.of(_chip("x", bandwidth_gbps=1.0, backend="vulkan"), peers) is None
    assert RL.Family.of(_chip("x", bandwidth_gbps=1.0), peers) is None
    m = RL.Machine.from_chip(new, peers=peers)
    assert (m.bandwidth_gbps, m.bandwidth_source, m.family) == (pytest.approx(350.0), "estimate (metal family)", f)
    assert m.step_overhead_s == pytest.approx(0.002)
    # the range: the family's slowest (60 %, 3 ms) and fastest (80 %, 1 ms) figures
    slow, fast = RL.predict_range(TOY, m, "instances", 1, 1, at=AT)
    assert m.prefill_flops == pytest.approx(62.5e12) and m.kernels is not None
    attn = 2.048e7 / (m.kernels.vector_efficiency * 62.5e12)  # the attention's arithmetic (ATTN's FLOPs) on it
    assert slow.tpot_s == pytest.approx(1.00512e9 / 300e9 + 0.003 + attn + m.moe_layer_s * 0)
    assert fast.tpot_s == pytest.approx(1.00512e9 / 400e9 + 0.001 + attn)
    assert RL.predict_range(TOY, GPU, "instances") is None


def test_the_part_over_a_memory_budget_comes_back_from_swap_each_step() -> None:
    # K = 2 engines of B = 4 at 1000 tokens: 2 × (1 GB + 0.1 GB) + 8 × 1000 × 5120 B of KV + 8 × 1 MB beside it
    m = replace(GPU, memory_budget=2_000_000_000, overhead_bytes=100_000_000, seq_extra_bytes=1e6)
    assert m.spill_bytes(TOY, 2, 4, 1000) == pytest.approx(2.2e9 + 40.96e6 + 8e6 - 2e9)
    assert m.spill_bytes(TOY, 1, 1, 0) == 0.0  # 1.1 GB: within
    assert GPU.spill_bytes(TOY, 8, 8, 1000) == 0.0  # no budget
    swa = replace(TOY, window=128, window_layers=8)
    full = replace(m, kv_layout="llama.cpp-full", memory_budget=1_000_000_000)
    # every layer holds the context: 1.1 G + 1000 × 5120 + 1 MB − 1 G
    assert full.spill_bytes(swa, 1, 1, 1000) == pytest.approx(1.1e9 + 5.12e6 + 1e6 - 1e9)
    # the window cache: 2 × 1000 + 8 × 768 cells of 512 B
    win = replace(full, kv_layout="llama.cpp-window")
    assert win.spill_bytes(swa, 1, 1, 1000) == pytest.approx(1.1e9 + (2 * 1000 + 8 * 768) * 512 + 1e6 - 1e9)
    # in the step: 7.448e7 B over the budget at 3 GB/s (assumed), added to the B = 4 step of test_small_batch…
    b = replace(GPU, memory_budget=1_050_000_000, overhead_bytes=100_000_000, seq_extra_bytes=1e6)
    p = RL.predict(TOY, b, "batch", 1, 4, at=AT)
    spill = 1.1e9 + 4 * 5.12e6 + 4e6 - 1.05e9
    t = 0.0102048 + 3 * 1.02048e9 / 5e12 + ATTN + 0.001 + spill / 3e9
    assert p.spill_bytes == pytest.approx(spill) and p.tpot_s == pytest.approx(t)
    assert p.binding == "memory" and p.shares["swap"] == pytest.approx(spill / 3e9 / t)


def test_instances_read_one_sequence_each_and_the_defaults() -> None:
    # a K-instances level is one sequence an engine whatever B is passed
    assert RL.predict(TOY, GPU, "instances", 2, 4, at=AT) == RL.predict(TOY, GPU, "instances", 2, 1, at=AT)
    # no context given: the prompt and half the output (11 // 2 = 5)
    p = RL.predict(TOY, GPU, "instances", 1, 1, at=RL.Lengths(100, 11))
    # (its attention: 4 × 8 × 64 × 10 layers × 105 cells at 5 TFLOP/s)
    assert p.context == 105 and p.tpot_s == pytest.approx((1e9 + 10 * 105 * 512) / 1e11 + 2.1504e6 / 5e12 + 0.001)
    # a machine without cores: one thread, no core busy
    assert (p.threads, p.cores, p.cores_busy) == (1, 0, 0.0)
    rows = RL.prediction_table(TOY, GPU, prompt_tokens=100, output_tokens=11, context=1000)
    assert [(r.mode, r.k, r.b) for r in rows] == [("instances", k, 1) for k in (1, 2, 3, 4)] + [
        ("batch", 1, b) for b in (1, 2, 4, 8, 16, 32, 64)]
    assert rows[5] == RL.predict(TOY, GPU, "batch", 1, 2, at=AT)
    assert RL.prediction_table(TOY, GPU, ks=(3,), bs=())[0].context == 128 + 128


def test_binds_names_the_regime_and_its_parts_largest_first() -> None:
    # one stream: bandwidth 90.95 % of the step (KV 0.51 % of its bytes: 0.46 %, under the half-percent shown)
    assert RL.predict(TOY, GPU, "instances", 1, 1, at=AT).binds() == "vector kernels: weight bytes 90% · per-step cost 9%"
    # B = 4: bandwidth 86.36 % (KV 2.01 % of it), kernels 5.18 %, the step's 1 ms 8.46 %
    assert RL.predict(TOY, GPU, "batch", 1, 4, at=AT).binds() == (
        "small-batch vector kernels: weight bytes 85% · per-step cost 8% · kernel arithmetic 5% · KV 2%")
    tiled = RL.predict(TOY, GPU, "batch", 1, 10, at=AT).binds()
    assert tiled.startswith("tiled kernels (B = 10 priced as 16): weight bytes ")
    bytes_only = RL.predict(TOY, replace(GPU, kernels=None), "batch", 1, 4, at=AT).binds()
    assert bytes_only.startswith("bytes only: weight bytes ")
    p = RL.predict(TOY, CPU, "instances", 1, 1, at=RL.Lengths(10, 5, 0))
    # the cores: 20 core-ms ÷ 1.5 = 13.33 ms, the bytes 1 ms under it: compute 100 %
    assert p.binds() == "CPU: the cores' compute 100%"
    flops = replace(GPU, kernels=None, prefill_flops=None, flops=1e11)
    assert RL.predict(TOY, flops, "instances", 1, 1, at=AT).binds().startswith("vector kernels: compute ")
    swap = replace(GPU, memory_budget=1_050_000_000, overhead_bytes=100_000_000)
    assert "swap " in RL.predict(TOY, swap, "batch", 1, 4, at=AT).binds()


def _ceilings(**engine: object) -> Ceilings:
    return Ceilings("box", "toy-cpu", 2, 8 * 2**30, 0, {"1": 60.0, "2": 100.0}, dict(engine))


def test_a_cpu_machine_from_its_probe_by_hand() -> None:
    # the probe of this model (1 GB a step): 50 tok/s at 1 thread, 75 at 2; batches of 2 and 8 at 40 and 20
    # steps/s with 2 threads, in one-thread core-seconds: × 75/50 = 0.0375 and 0.075 s. A step of B:
    # base + B × seq through both: seq = (0.075 − 0.0375) / 6 = 6.25 ms, base = (0.0375·8 − 0.075·2) / 6 = 25 ms.
    # A prompt token: 2 threads ÷ 400 tok/s = 5 core-ms.
    c = _ceilings(decode_tps={"1": 50.0, "2": 75.0}, batch_steps_per_s={"2": 40.0, "8": 20.0}, prefill_tps=400.0,
                  weight_bytes=1e9)
    m = RL.Machine.from_ceilings(c, TOY)
    assert (m.name, m.bandwidth_gbps, m.bandwidth_source, m.cores) == ("toy-cpu", 100.0, "attainable (probe)", 2)
    assert m.step_core_s == pytest.approx(0.02) and m.prefill_core_s == pytest.approx(0.005)
    assert m.batch_base_core_s == pytest.approx(0.025) and m.seq_core_s == pytest.approx(0.00625)
    assert m.thread_speedup == {1: 1.0, 2: 1.5}
    assert m.notes == ("probe: 100.0 GB/s effective bandwidth (read test); a step of this model takes 13.3 ms at 2 "
                       "threads, 10.0 ms of it its bytes: 3.3 ms a step beyond them (compute, fixed costs)",)
    # another model of 2 GB a step: every core cost × 2
    big = replace(TOY, weight_bytes=2_000_000_000)
    m2 = RL.Machine.from_ceilings(c, big)
    assert (m2.step_core_s, m2.prefill_core_s, m2.batch_base_core_s, m2.seq_core_s) == pytest.approx(
        (0.04, 0.01, 0.05, 0.0125))
    # the probe's own model: no weight_bytes said, scale 1
    m3 = RL.Machine.from_ceilings(_ceilings(decode_tps={"1": 50.0}, prefill_tps=100.0), big)
    assert m3.step_core_s == pytest.approx(0.02) and m3.batch_base_core_s is None and m3.seq_core_s == 0.0
    assert m3.prefill_core_s == pytest.approx(0.01)
    # two batch points that say less than the model (the larger B faster a step): the per-sequence part 0, the base
    # the smaller B's step
    neg = RL.Machine.from_ceilings(_ceilings(decode_tps={"1": 50.0, "2": 75.0}, batch_steps_per_s={"2": 10.0,
                                                                                                    "8": 20.0},
                                             prefill_tps=400.0), TOY)
    assert neg.seq_core_s == 0.0 and neg.batch_base_core_s == pytest.approx(0.15)
    # a mixture of experts: the B-token steps read more weights, base × R(B)/R(1) + B × seq
    r2, r8 = MOE.read_bytes(2) / MOE.read_bytes(1), MOE.read_bytes(8) / MOE.read_bytes(1)
    mo = RL.Machine.from_ceilings(_ceilings(decode_tps={"1": 50.0, "2": 75.0}, batch_steps_per_s={"2": 40.0,
                                                                                                   "8": 20.0},
                                            prefill_tps=400.0, weight_bytes=MOE.read_bytes(1)), MOE)
    det = r2 * 8 - r8 * 2
    assert mo.batch_base_core_s == pytest.approx((0.0375 * 8 - 0.075 * 2) / det)
    assert mo.seq_core_s == pytest.approx((r2 * 0.075 - r8 * 0.0375) / det)
    # no engine rates: the bandwidth ceiling only, and a busy probe says so
    bare = RL.Machine.from_ceilings(replace(_ceilings(), busy_cores=1.5, measured_at="t"), TOY)
    assert (bare.step_core_s, bare.cores, bare.bandwidth_gbps) == (None, 2, 100.0)
    assert bare.notes[0] == "no engine rates in the probe: bandwidth ceiling only"
    assert bare.notes[1].startswith("warning: the probe of t ran while other work used 1.5 of 2 cores")
    assert RL.Machine.from_ceilings(_ceilings(), TOY).notes == ("no engine rates in the probe: bandwidth ceiling "
                                                                  "only",)



# the toy's weights by type: 0.6 GB of Q8_0 (tinyBLAS on every x86 build), 0.3 GB of Q4_0 (tinyBLAS unless the
# build repacks it), 0.1 GB of Q6_K (the vec_dot loop)
TYPED = replace(TOY, matmul_type_bytes=(("Q4_0", 300_000_000), ("Q6_K", 100_000_000), ("Q8_0", 600_000_000)))
X86 = ["AVX", "AVX2", "AVX512", "LLAMAFILE", "REPACK"]


def test_the_cpu_batch_path_from_the_build_and_the_weight_types() -> None:
    ck = cpu_kernels()
    # AVX512 (32 vector registers): tiles of 4; REPACK takes Q4_0 and IQ4_NL, tinyBLAS keeps Q8_0 and Q5_0
    assert RL.cpu_path(ck, X86) == (4, frozenset({"Q8_0", "Q5_0"}))
    # AVX2 without REPACK: tiles of 2, every legacy quant tinyBLAS knows on x86
    assert RL.cpu_path(ck, ["AVX2", "LLAMAFILE"]) == (2, frozenset({"Q8_0", "Q4_0", "Q5_0", "IQ4_NL"}))
    # ARM with dotprod: tiles of 3; with REPACK both of its types are repacked: nothing makes a second pass
    assert RL.cpu_path(ck, ["NEON", "DOTPROD", "LLAMAFILE"]) == (3, frozenset({"Q8_0", "Q4_0"}))
    assert RL.cpu_path(ck, ["NEON", "DOTPROD", "LLAMAFILE", "REPACK"]) == (3, frozenset())
    # no tinyBLAS, AMX's own buffers, an instruction set the table does not describe: not known
    for f in (["AVX512", "REPACK"], [*X86, "AMX_INT8"], ["LLAMAFILE", "SSE3"], []):
        assert RL.cpu_path(ck, f) == (0, frozenset())
    # passes over tinyBLAS's matrices: one while B fits a tile or is a multiple of it, two past it
    assert [RL.cpu_passes(4, b) for b in range(1, 14)] == [1, 1, 1, 1, 2, 2, 2, 1, 2, 2, 2, 1, 2]
    assert [RL.cpu_passes(2, b) for b in range(1, 6)] == [1, 1, 2, 1, 2]
    assert RL.cpu_passes(3, 8) == 2 and RL.cpu_passes(0, 9) == 1
    # the toy on AVX512 with REPACK: Q8_0 only, 0.6 of its 1 GB; without REPACK Q4_0 too, 0.9
    tile, share, note = RL.cpu_batch_path(TYPED, X86)
    assert (tile, share) == (4, pytest.approx(0.6)) and "Q8_0 weights (60% of a step's bytes) in tiles of 4" in note
    assert RL.cpu_batch_path(TYPED, ["AVX512", "LLAMAFILE"])[:2] == (4, pytest.approx(0.9))
    # types not known (a model from its config) or no tinyBLAS type among them: no second pass
    assert RL.cpu_batch_path(TOY, X86) == (0, 0.0, "")
    assert RL.cpu_batch_path(replace(TOY, matmul_type_bytes=(("Q6_K", 10),)), X86) == (0, 0.0, "")
    assert RL.repass_factor(4, 0.6, 9) == pytest.approx(1.6) and RL.repass_factor(4, 0.6, 8) == 1.0


def test_a_cpu_batch_past_a_whole_tile_reads_its_tinyblas_weights_again() -> None:
    # a step of B: base 25 core-ms × (1 + 0.6 for a second pass) + B × 6.25 core-ms
    cpu = replace(CPU, batch_base_core_s=0.025, seq_core_s=0.00625, cpu_tile=4, cpu_repass_share=0.6)
    assert cpu.step_core(8) == pytest.approx(0.025 + 0.05)  # one pass: 75 ms
    assert cpu.step_core(9) == pytest.approx(0.025 * 1.6 + 9 * 0.00625)  # two: 96.25 ms
    # one more column costs its 6.25 ms and the second pass's 15 ms; B = 12 (one pass) only 3.75 ms more than B = 9
    assert cpu.step_core(9) - cpu.step_core(8) == pytest.approx(0.015 + 0.00625)
    assert cpu.step_core(12) == pytest.approx(0.1)
    assert cpu.step_core(1) == pytest.approx(0.02)  # one sequence: the vector path's own cost
    p9 = RL.predict(TOY, cpu, "batch", 1, 9, threads=2, at=RL.Lengths(10, 5, 0))
    assert p9.tpot_s == pytest.approx(0.09625 / 1.5) and p9.regime == "2 passes: 8 columns in tiles of 4, then 1 more"
    assert p9.binds().startswith("CPU (2 passes: 8 columns in tiles of 4, then 1 more): the cores' compute")
    assert RL.predict(TOY, cpu, "batch", 1, 8, threads=2, at=RL.Lengths(10, 5, 0)).binds().startswith("CPU: ")
    # the probe's two batches through it: ARM's tiles of 3 make its B = 8 two passes (base × 1.6 + 8 × seq),
    # B = 2 one: 0.0375 = base + 2 seq, 0.075 = 1.6 base + 8 seq → base = 0.0375·8 − 0.075·2 over 8 − 3.2
    c = _ceilings(decode_tps={"1": 50.0, "2": 75.0}, batch_steps_per_s={"2": 40.0, "8": 20.0}, prefill_tps=400.0,
                  weight_bytes=1e9, cpu_features=["NEON", "DOTPROD", "LLAMAFILE"])
    arm = RL.Machine.from_ceilings(c, replace(TOY, matmul_type_bytes=(("Q8_0", 600_000_000),)))
    base = (0.0375 * 8 - 0.075 * 2) / (8 - 1.6 * 2)
    assert (arm.cpu_tile, arm.cpu_repass_share) == (3, pytest.approx(0.6))
    assert arm.batch_base_core_s == pytest.approx(base) and arm.seq_core_s == pytest.approx((0.0375 - base) / 2)
    assert any(n.startswith("batch path: llama.cpp's CPU tinyBLAS multiplies this model's Q8_0") for n in arm.notes)
    # an AVX2 build (tiles of 2) whose smaller batch is the one past a tile: B = 3 two passes, B = 8 one:
    # 1/30 = 1.6 base + 3 seq, 1/20 × 1.5 = 0.075 = base + 8 seq
    c2 = _ceilings(decode_tps={"1": 50.0, "2": 75.0}, batch_steps_per_s={"3": 45.0, "8": 20.0}, prefill_tps=400.0,
                   weight_bytes=1e9, cpu_features=["AVX2", "LLAMAFILE"])
    avx2 = RL.Machine.from_ceilings(c2, replace(TOY, matmul_type_bytes=(("Q8_0", 600_000_000),)))
    b3 = 1.5 / 45.0
    base2 = (b3 * 8 - 0.075 * 3) / (1.6 * 8 - 3)
    assert avx2.cpu_tile == 2 and avx2.batch_base_core_s == pytest.approx(base2)
    assert avx2.seq_core_s == pytest.approx((0.075 - base2) / 8)
    # a calibration point past a whole tile: its fixed part counted with the second pass, the rest each sequence's
    pt = RL.Point("batch", 1, 9, 2, tpot_s=0.08, ttft_engine_s=0.2, prompt_tokens=10, output_tokens=10)
    cal = RL.calibrate(TOY, cpu, [pt])
    core = 0.08 * 1.5 / (TOY.flops_per_token(15) / TOY.flops_per_token(0))
    assert cal.seq_core_s + cal.seq_extra_core_s == pytest.approx((core - 0.025 * 1.6) / 9)  # the load's, each of 9


def test_calibrate_gives_back_each_of_its_points() -> None:
    one = RL.Point("instances", 1, 1, 2, tpot_s=0.01, ttft_engine_s=0.03, prompt_tokens=32, output_tokens=128)
    m = RL.calibrate(TOY, CPU, [one])
    at = RL.Lengths(32, 128)
    p = RL.predict(TOY, m, "instances", 1, 1, 2, at)
    assert p.tpot_s == pytest.approx(0.01)
    # the prefill from the engine TTFT: (30 − 10 ms) × 2 cores ÷ 32 tokens = 1.25 core-ms a token
    assert m.prefill_core_s == pytest.approx(0.00125) and p.ttft_s == pytest.approx(0.03)
    ctx_scale = TOY.flops_per_token(96) / TOY.flops_per_token(0)
    assert m.step_core_s == pytest.approx(0.01 * 1.5 / ctx_scale)
    assert m.notes == ("calibrated on 1 measured point(s)",)
    # with a batch point too, both given back: the batch line's base kept, each sequence's cost fitted
    batched = replace(CPU, batch_base_core_s=0.018, seq_core_s=0.003)
    b8 = RL.Point("batch", 1, 8, 2, tpot_s=0.05, prompt_tokens=32, output_tokens=128)
    m = RL.calibrate(TOY, batched, [one, b8])
    assert RL.predict(TOY, m, "instances", 1, 1, 2, at).tpot_s == pytest.approx(0.01)
    assert RL.predict(TOY, m, "batch", 1, 8, 2, at).tpot_s == pytest.approx(0.05)
    core = 0.05 * 1.5 / ctx_scale
    assert m.batch_base_core_s == pytest.approx(0.018) and m.seq_core_s + m.seq_extra_core_s == pytest.approx(
        (core - 0.018) / 8)
    assert m.notes == ("calibrated on 2 measured point(s)",)
    # a batch point faster than the probe's base: both parts scaled by one factor
    fast = RL.Point("batch", 1, 8, 2, tpot_s=0.01, prompt_tokens=32, output_tokens=128)
    m = RL.calibrate(TOY, batched, [fast])
    f = (0.01 * 1.5 / ctx_scale) / (0.018 + 8 * 0.003)
    assert (m.batch_base_core_s, m.seq_core_s) == pytest.approx((0.018 * f, 0.003 * f))
    assert RL.predict(TOY, m, "batch", 1, 8, 2, at).tpot_s == pytest.approx(0.01)
    # no batch line: each further sequence's cost from the B = 1 step
    m = RL.calibrate(TOY, CPU, [b8])
    assert m.seq_core_s == pytest.approx((core - 0.02) / 7)
    assert RL.predict(TOY, m, "batch", 1, 8, 2, at).tpot_s == pytest.approx(0.05)
    # K engines time-sharing the cores: a point at K = 4 of one thread
    k4 = RL.Point("instances", 4, 1, 1, tpot_s=0.08, ttft_engine_s=0.2, prompt_tokens=32, output_tokens=128)
    m = RL.calibrate(TOY, CPU, [k4])
    assert RL.predict(TOY, m, "instances", 4, 1, 1, at).tpot_s == pytest.approx(0.08)
    assert m.prefill_core_s == pytest.approx((0.2 - 0.08) * 0.5 / 32)
    with pytest.raises(ValueError, match="at most two"):
        RL.calibrate(TOY, CPU, [one, one, one])
    assert RL.calibrate(TOY, GPU, [one]) is GPU  # not a CPU engine's probe: nothing to calibrate


def test_calibrate_raises_the_bandwidth_a_point_beat() -> None:
    # 10 GB/s: the step's 1.0492 GB (KV at 96 tokens) takes 104.9 ms; measured 50 ms: it moved 2.098× as much
    slow = replace(CPU, bandwidth_gbps=10.0)
    one = RL.Point("instances", 1, 1, 2, tpot_s=0.05, prompt_tokens=32, output_tokens=128)
    m = RL.calibrate(TOY, slow, [one])
    t_mem = (1e9 + 10 * 96 * 512) / 10e9
    assert m.bandwidth_gbps == pytest.approx(10.0 * t_mem / 0.05)
    assert m.notes[1] == (f"bandwidth raised 10.0 → {10.0 * t_mem / 0.05:.1f} GB/s: instances K=1 B=1 decoded "
                          "faster than probe allows")
    assert RL.predict(TOY, m, "instances", 1, 1, 2, RL.Lengths(32, 128)).tpot_s == pytest.approx(0.05)


def test_calibrate_at_other_lengths_and_k_and_a_moe() -> None:
    at = RL.Lengths(64, 256)
    # K = 2 engines of 2 threads on 2 cores: each gets a core; the point's own lengths, not the defaults
    k2 = RL.Point("instances", 2, 1, 2, tpot_s=0.03, ttft_engine_s=0.09, prompt_tokens=64, output_tokens=256)
    m = RL.calibrate(TOY, CPU, [k2])
    assert RL.predict(TOY, m, "instances", 2, 1, 2, at).tpot_s == pytest.approx(0.03)
    # the prefill: (90 − 30 ms) × 2 threads ÷ (2 × 2 / 2 cores) ÷ 64 tokens
    assert m.prefill_core_s == pytest.approx(0.06 * 1.0 / 64)
    assert RL.predict(TOY, m, "instances", 2, 1, 2, at).ttft_s == pytest.approx(0.09)
    # a batch point of B = 2 (the smallest batch), K = 1, a mixture of experts: its B tokens read more experts
    b2 = RL.Point("batch", 1, 2, 2, tpot_s=0.03, prompt_tokens=64, output_tokens=256)
    moe_cpu = replace(CPU, batch_base_core_s=0.05, seq_core_s=0.002)
    m = RL.calibrate(MOE, moe_cpu, [b2])
    assert RL.predict(MOE, m, "batch", 1, 2, 2, at).tpot_s == pytest.approx(0.03)
    reads = MOE.read_bytes(2) / MOE.read_bytes(1)
    core = 0.03 * 1.5 / (MOE.flops_per_token(64 + 128) / MOE.flops_per_token(0))
    assert core < 0.05 * reads  # faster than the probe's base: both parts scaled
    f = core / (0.05 * reads + 2 * 0.002)
    assert (m.batch_base_core_s, m.seq_core_s) == pytest.approx((0.05 * f, 0.002 * f))
    slow_b2 = RL.Point("batch", 1, 2, 2, tpot_s=0.2, prompt_tokens=64, output_tokens=256)
    m = RL.calibrate(MOE, moe_cpu, [slow_b2])
    core = 0.2 * 1.5 / (MOE.flops_per_token(64 + 128) / MOE.flops_per_token(0))
    assert m.seq_core_s + m.seq_extra_core_s == pytest.approx((core - 0.05 * reads) / 2)
    # a point between the probe's step at one token's experts and at two tokens' (0.05 × reads + 0.004): faster than
    # the probe's step with the experts B = 2 reads, so every part × f and nothing more for each sequence
    ctx_scale = MOE.flops_per_token(64 + 128) / MOE.flops_per_token(0)
    mid = (0.054 + 0.05 * reads + 0.004) / 2
    assert reads > 1.1
    m = RL.calibrate(MOE, moe_cpu, [replace(slow_b2, tpot_s=mid * ctx_scale / 1.5)])
    f = mid / (0.05 * reads + 0.004)
    assert m.seq_extra_core_s == 0.0 and (m.batch_base_core_s, m.seq_core_s) == pytest.approx((0.05 * f, 0.002 * f))
    m = RL.calibrate(MOE, CPU, [slow_b2])  # no batch line
    assert m.seq_core_s == pytest.approx(max(0.0, (core - 0.02 * reads) / 1))
    # only the first point of each kind counts; a batch-mode point of B = 1 is a single point
    one = RL.Point("instances", 1, 1, 2, tpot_s=0.01, prompt_tokens=64, output_tokens=256)
    other = RL.Point("batch", 1, 1, 2, tpot_s=0.5, prompt_tokens=64, output_tokens=256)
    assert RL.calibrate(TOY, CPU, [one, other]).step_core_s == RL.calibrate(TOY, CPU, [one]).step_core_s
    assert RL.calibrate(TOY, CPU, [other]).seq_core_s == 0.0
    assert RL.predict(TOY, RL.calibrate(TOY, CPU, [other]), "batch", 1, 1, 2, at).tpot_s == pytest.approx(0.5)


def test_cpu_compute_times_with_shared_cores_and_flops() -> None:
    four = replace(CPU, cores=4, thread_speedup={1: 1.0, 2: 1.8, 4: 3.0})
    at = RL.Lengths(10, 5, 0)
    # K = 3 on 4 cores: one thread each (4 // 3), no core shared: 20 core-ms a step at one thread
    p = RL.predict(TOY, four, "instances", 3, 1, at=at)
    assert p.threads == 1 and p.tpot_s == pytest.approx(0.02) and p.cores_busy == 3.0
    # K = 3 engines of 2 threads on 2 cores: 6 threads, each engine 1/3 of its speed: 20 ms ÷ (1.5 / 3)
    p = RL.predict(TOY, CPU, "instances", 3, 1, 2, at=at)
    assert p.tpot_s == pytest.approx(0.02 / (1.5 / 3)) and p.ttft_s == pytest.approx(10 * 0.001 / (2 / 3) + p.tpot_s)
    # a chip known by its FLOP/s only (no kernel path): K = 2 share them; the prefill the longer of its FLOPs and
    # its bytes (an untied model reads a row a prompt token)
    flops = replace(GPU, kernels=None, prefill_flops=None, flops=1e11, step_overhead_s=0.0)
    untied = replace(TOY, embd_row_bytes=1e6)
    p = RL.predict(untied, flops, "instances", 2, 1, at=AT)
    t_cpu = untied.flops_per_token(1000) / (1e11 / 2)
    t_mem = (1e9 + 1e6 + 5.12e6) / 5e10
    assert p.tpot_s == pytest.approx(max(t_mem, t_cpu))
    pre = max(untied.prefill_flops(100) / 5e10, untied.read_bytes(100) / 5e10)
    assert p.ttft_s == pytest.approx(pre + p.tpot_s)
    # the kernels binding: B = 64 tiled on a slow prompt rate, the kernels' arithmetic longer than the bytes
    slow = replace(GPU, prefill_flops=1e11)
    p = RL.predict(TOY, slow, "batch", 1, 64, at=AT)
    assert p.binding == "compute" and p.shares["kernels"] > p.shares["bandwidth"]
    # the KV share counts the cells the backend reads of a window's cache
    swa = replace(TOY, window=128, window_layers=8)
    cache = replace(GPU, window_kv_reads="cache")
    p = RL.predict(swa, cache, "batch", 1, 2, at=AT)
    kv = 2 * (2 * 1000 + 8 * 256) * 512
    assert p.kv_share == pytest.approx(kv / (1e9 + kv))


def test_the_live_views_roofline() -> None:
    r = RL.Roofline(TOY, GPU, 100.0)
    assert r.level("instances", 2, 1, None, 100, 11) == RL.predict(TOY, GPU, "instances", 2, 1, None,
                                                                   RL.Lengths(100, 11))
    assert r.level("batch", 1, 4, 1, 64, 32) == RL.predict(TOY, GPU, "batch", 1, 4, 1, RL.Lengths(64, 32))
    assert r.level("http", 1, 4, None, 64, 32) is None
    p = r.level("batch", 1, 4, None, 100, 11)
    assert p is not None and r.span(p, 100, 11) is None  # a measured machine: one number
    peers = [_chip("p1", bandwidth_gbps=100.0, effective_bandwidth_gbps=60.0, step_overhead_ms=1.0, backend="metal"),
             _chip("p2", bandwidth_gbps=100.0, effective_bandwidth_gbps=80.0, step_overhead_ms=3.0, backend="metal")]
    fam = RL.Machine.from_chip(_chip("new", bandwidth_gbps=500.0, backend="metal"), peers=peers)
    r = replace(r, machine=fam)
    p = r.level("batch", 1, 4, 2, 100, 11)
    assert p is not None
    slow, fast = RL.predict_range(TOY, fam, "batch", 1, 4, 2, RL.Lengths(100, 11, p.context))
    assert r.span(p, 100, 11) == (slow.aggregate_tps, fast.aggregate_tps)
    assert slow.aggregate_tps < p.aggregate_tps < fast.aggregate_tps


def test_k_quant_decoding_in_the_vector_kernels() -> None:
    # 2 FLOP-equivalents a weight at 10 TFLOP/s: 0.5 G weights × 2 ÷ 1e13 = 0.1 ms a step, up to B = 8
    kq = replace(GPU, kernels=replace(PATH, kquant_ops_per_weight=2.0))
    q4 = replace(TOY, quant="Q4_K_M")
    assert RL.dequant_time(q4, kq, 1) == pytest.approx(1e-4) and RL.dequant_time(q4, kq, 8) == pytest.approx(1e-4)
    assert RL.dequant_time(q4, kq, 9) == 0.0  # the tiled kernels' prompt rate holds it
    assert RL.dequant_time(replace(TOY, quant="Q8_0"), kq, 1) == 0.0 and RL.dequant_time(q4, GPU, 1) == 0.0
    moe = replace(MOE, quant="Q4_K_M")
    assert RL.dequant_time(moe, kq, 4) == pytest.approx(moe.matmul_weights(4) * 2.0 / 1e13)
    p = RL.predict(q4, kq, "instances", 2, 1, at=AT)
    # K = 2 engines share the ALUs as they share the bandwidth
    assert p.tpot_s == pytest.approx(1.00512e9 / 5e10 + 2 * 1e-4 + 2 * ATTN + 0.001)
    assert p.shares["dequant"] == pytest.approx(2e-4 / p.tpot_s)
    # the decoding longer than the bytes: compute binds
    heavy = replace(GPU, kernels=replace(PATH, kquant_ops_per_weight=4000.0))
    assert RL.predict(q4, heavy, "instances", 1, 1, at=AT).binding == "compute"


def test_boundaries_of_the_kernel_paths() -> None:
    per_token = replace(GPU, kernels=replace(PATH, moe_vector_reads="per-token"))
    # per-token reads from B = 2 up to B = moe_tiled_min_b − 1 (31); at 32 the union
    assert RL.step_reads(MOE, per_token, [0] * 2) == pytest.approx(1e9 + 4 * 1e8)
    assert RL.step_reads(MOE, per_token, [0] * 32) == pytest.approx(1e9 + MOE.experts.distinct(32) * 1e8)
    # routed tiles: B = 100 tokens × 2 experts over ≈ 8 distinct: 25 a expert, a tile of 32
    d = MOE.experts.distinct(100)
    f_dense = MOE.flops_per_token(0) - 2 * 2 * 5e7
    assert RL.kernel_time(MOE, GPU, 100, 0)[0] == pytest.approx(128 * f_dense / 2.5e12 + d * 32 * 2 * 5e7 / 1e13)
    assert RL.kernel_time(TOY, replace(GPU, kernels=None), 2, 0) == (0.0, "bytes only")
    cache = replace(GPU, window_kv_reads="cache")
    swa = replace(TOY, window=128, window_layers=8)
    # 1023: 255 and 128 — the position 1023 needs the stride to 256; 894: 126 and 767 (wrapped): the whole cache
    assert RL.window_cells(swa, cache, 1023, 2) == 256
    assert RL.window_cells(swa, cache, 894, 2) == 768
    assert CPU.step_core(1, 2.0) == pytest.approx(0.04)


def test_prefill_bound_by_its_bytes_and_the_cores_given() -> None:
    # 1 PFLOP/s: the prompt's FLOPs take 0.2 ms at K = 2; its bytes (1 GB + 100 rows of 1 MB) 22 ms at 50 GB/s
    fast = replace(GPU, kernels=None, prefill_flops=None, flops=1e15, step_overhead_s=0.0)
    untied = replace(TOY, embd_row_bytes=1e6)
    p = RL.predict(untied, fast, "instances", 2, 1, at=AT)
    assert p.ttft_s == pytest.approx(untied.read_bytes(100) / 5e10 + p.tpot_s)
    # a compute-bound CPU level of one thread on 4 cores: compute binds (1 of the 1 core given is busy)
    four = RL.Machine("toy-cpu", 1000.0, "probe", cores=4, step_core_s=0.02, thread_speedup={1: 1.0})
    assert RL.predict(TOY, four, "instances", 1, 1, 1, at=AT).binding == "compute"


def test_calibrate_batch_points_at_k_2_and_beating_the_bandwidth() -> None:
    at = RL.Lengths(64, 256)
    # a batch point of K = 2 engines of 2 threads on 2 cores: each engine has a core's worth
    k2 = RL.Point("batch", 2, 4, 2, tpot_s=0.06, prompt_tokens=64, output_tokens=256)
    m = RL.calibrate(TOY, CPU, [k2])
    assert RL.predict(TOY, m, "batch", 2, 4, 2, at).tpot_s == pytest.approx(0.06)
    # two batch points: the first only
    b8 = RL.Point("batch", 1, 8, 2, tpot_s=0.05, prompt_tokens=64, output_tokens=256)
    b2 = RL.Point("batch", 1, 2, 2, tpot_s=0.5, prompt_tokens=64, output_tokens=256)
    assert RL.calibrate(TOY, CPU, [b8, b2]).seq_core_s == RL.calibrate(TOY, CPU, [b8]).seq_core_s
    # a batch point faster than the bandwidth allows at its own lengths: raised to what it moved
    slow = replace(CPU, bandwidth_gbps=10.0)
    m = RL.calibrate(TOY, slow, [b8])
    t_mem = (1e9 + 8 * 10 * (64 + 128) * 512) / 10e9
    assert m.bandwidth_gbps == pytest.approx(10.0 * t_mem / 0.05)
    assert m.notes[-1].startswith("bandwidth raised 10.0 → ") and m.notes[-1].endswith(
        ": batch K=1 B=8 decoded faster than probe allows")


# ---- round 23: what mutmut's survivors showed no test held (benchmarks/mutation.py, roofline.py) --------------------
def test_name_wall_counts_other_works_cores() -> None:
    # 0.2 of 4 cores the engines', 3.5 other work's: 3.7 ÷ 4 = 0.925 ≥ 0.9; 3.5 ≥ 0.25 × 4 named
    assert RL.name_wall(0.1, 0.2, 4, others=3.5) == ("cores", "CPU cores (3.7 of 4 busy, 3.5 of them other work)")
    assert RL.name_wall(0.1, 0.2, 4, others=0.9) == ("none", "none: 72% headroom")  # 1.1 ÷ 4 = 0.275
    assert RL.name_wall(0.1, 3.0, 4, others=0.9) == ("cores", "CPU cores (3.9 of 4 busy)")  # 0.9 < 1.0: not named
    assert RL.name_wall(0.1, others=3.5) == ("none", "none: 90% headroom")  # no cores known: no share of them


def test_name_wall_defaults_of_the_cores_and_their_threads() -> None:
    # 4 cores, nothing said busy: 0 of them, so the headroom is the bytes' (1 − 0.1)
    assert RL.name_wall(0.1, cores=4) == ("none", "none: 90% headroom")
    # 1 of 4 cores busy, no threads given: all 4 given, 1 < 0.45 × 4 = 1.8, so compute does not bind even though its
    # time is the longer; the headroom is the cores' (1 − 0.25)
    assert RL.name_wall(0.1, 1.0, 4, compute_binds=True) == ("none", "none: 75% headroom")


def test_a_family_whose_chip_steps_cost_nothing() -> None:
    # a fitted overhead of 0 ms is a figure, not a missing one: the family's range starts at 0
    peers = [_chip("z", bandwidth_gbps=100.0, effective_bandwidth_gbps=80.0, step_overhead_ms=0.0, backend="metal"),
             _chip("t", bandwidth_gbps=100.0, effective_bandwidth_gbps=90.0, step_overhead_ms=3.0, backend="metal")]
    f = RL.Family.of(_chip("new", bandwidth_gbps=200.0, backend="metal"), peers)
    assert f is not None and f.overhead_ms == (0.0, 1.5, 3.0) and f.efficiency == pytest.approx((0.8, 0.85, 0.9))


def test_thread_speedups_by_hand() -> None:
    plain = RL.Machine("m", 10.0, "x")
    assert (plain.speedup(1), plain.speedup(3), plain.speedup(0)) == (1.0, 3.0, 1.0)  # no table: linear, ≥ 1
    two = RL.Machine("m", 10.0, "x", thread_speedup={2: 1.5})
    # one thread is 1× whatever the table holds; 4 threads: linear from its last point, 1.5 × 4 ÷ 2
    assert (two.speedup(1), two.speedup(2), two.speedup(4)) == (1.0, 1.5, 3.0)


def test_a_probe_without_engine_rates_prices_by_bytes_alone() -> None:
    m = RL.Machine.from_ceilings(_ceilings(), TOY)
    assert (m.name, m.bandwidth_gbps, m.bandwidth_source, m.cores) == ("toy-cpu", 100.0, "attainable (probe)", 2)
    assert m.step_core_s is None and m.notes == ("no engine rates in the probe: bandwidth ceiling only",)
    # a step: 1 GB + 5.12 MB of KV at 100 GB/s, no core-seconds to add, no prefill figure (TTFT two steps)
    p = RL.predict(TOY, m, "instances", 1, 1, at=AT)
    assert p.tpot_s == pytest.approx(0.0100512) and p.ttft_s == pytest.approx(2 * 0.0100512)
    one = RL.Point("instances", 1, 1, 2, tpot_s=0.01, ttft_engine_s=0.03)
    assert RL.calibrate(TOY, m, [one]) is m  # nothing of a CPU's steps to calibrate


def test_a_probe_whose_batches_say_less_than_the_line() -> None:
    # 2 threads 75 tok/s ÷ 50 at one: × 1.5. Batches at 40 and 5 steps/s: 0.0375 and 0.3 core-s. Through both,
    # seq = (0.3 − 0.0375) ÷ 6 = 43.75 ms and base = (0.0375·8 − 0.3·2) ÷ 6 = −50 ms: below 0, so the base is what
    # B = 2 leaves of its step, max(0, 0.0375 − 2 × 0.04375) = 0
    c = _ceilings(decode_tps={"1": 50.0, "2": 75.0}, batch_steps_per_s={"2": 40.0, "8": 5.0}, prefill_tps=400.0,
                  weight_bytes=1e9)
    m = RL.Machine.from_ceilings(c, TOY)
    assert m.batch_base_core_s == 0.0 and m.seq_core_s == pytest.approx(0.04375)
    # a mixture of experts whose B = 8 is barely slower than B = 2 (39 and 40 steps/s): each sequence's cost would be
    # below 0, so it is 0 and the base is B = 2's step over the bytes B = 2 reads (÷ R(2), not × it)
    moe = _ceilings(decode_tps={"1": 50.0, "2": 75.0}, batch_steps_per_s={"2": 40.0, "8": 39.0}, prefill_tps=400.0,
                    weight_bytes=MOE.read_bytes(1))
    r2, r8 = MOE.read_bytes(2) / MOE.read_bytes(1), MOE.read_bytes(8) / MOE.read_bytes(1)
    assert r2 > 1.0 and r8 * 0.0375 > r2 * (1.5 / 39)  # so the line's seq < 0
    m = RL.Machine.from_ceilings(moe, MOE)
    assert m.seq_core_s == 0.0 and m.batch_base_core_s == pytest.approx(0.0375 / r2)


def test_the_probes_step_in_words() -> None:
    # 1 and 2 tok/s at 1 and 2 threads, a probe of a model half this one's bytes (× 2): 1 ÷ 2 × 2 = 1000.0 ms a step
    # at 2 threads; its 1 GB at 2 GB/s 500.0 ms; 500.0 ms beyond them
    c = Ceilings("box", "toy-cpu", 2, 8 * 2**30, 0, {"1": 2.0}, {"decode_tps": {"1": 1.0, "2": 2.0},
                                                             "prefill_tps": 10.0, "weight_bytes": 5e8})
    m = RL.Machine.from_ceilings(c, TOY)
    assert m.step_core_s == pytest.approx(2.0) and m.notes[0] == (
        "probe: 2.0 GB/s effective bandwidth (read test); a step of this model takes 1000.0 ms at 2 threads, "
        "500.0 ms of it its bytes: 500.0 ms a step beyond them (compute, fixed costs)")
    # a read test of 0 GB/s: no byte time to take off, not a division by zero
    zero = replace(c, read_gbps={"1": 0.0})
    assert RL.Machine.from_ceilings(zero, TOY).notes[0].endswith(
        "1000.0 ms at 2 threads, 0.0 ms of it its bytes: 1000.0 ms a step beyond them (compute, fixed costs)")
    # a mixture of experts: the bytes of one token's step (its k experts), not of two tokens'
    moe = replace(c, engine={**c.engine, "weight_bytes": MOE.read_bytes(1)})
    t_bytes = MOE.read_bytes(1) / 2e9
    assert f"{t_bytes * 1e3:.1f} ms of it its bytes" in RL.Machine.from_ceilings(moe, MOE).notes[0]
    assert f"{MOE.read_bytes(2) / 2e9 * 1e3:.1f}" != f"{t_bytes * 1e3:.1f}"


def test_a_gpus_step_has_no_core_seconds() -> None:
    with pytest.raises(ValueError) as e:
        GPU.step_core(1)
    assert str(e.value) == "a decode step's core-seconds are known only from a CPU engine's probe"


def test_a_chips_notes_and_exact_figures() -> None:
    # measured bandwidth but no step cost stated: 0 ms, and the source's default words
    c = _chip(bandwidth_gbps=1000.0, effective_bandwidth_gbps=800.0, fp16_tflops=100.0)
    m = RL.Machine.from_chip(c)
    assert m.step_overhead_s == 0.0 and m.flops == 5e13  # 100 × 10¹² × 0.5, exactly
    assert m.notes[0] == "bandwidth 800 GB/s effective (80% of 1000 spec) and 0 ms a step, fitted to published measurements"
    # a source that says it is no measurement is quoted as it is, not as "fitted to"
    est = replace(c, step_overhead_ms=2.0, effective_source="no measurement of this chip: a family's median")
    assert RL.Machine.from_chip(est).notes[0] == ("bandwidth 800 GB/s effective (80% of 1000 spec) and 2 ms a step, "
                                                  "no measurement of this chip: a family's median")
    # a fitted batch path without a routing layer's batch cost: none added, none said
    b = RL.Machine.from_chip(replace(c, batch_step_ms=1.0, seq_step_ms=0.1))
    assert b.moe_batch_layer_s == 0.0 and b.notes[2] == (
        "batch path: +1 ms a step at B ≥ 2 and 0.1 ms each further sequence (fitted on a dense model's "
        "llama-batched-bench rows)")
    # a prompt rate on a backend with no kernel path described: no prefill FLOP/s taken from it
    assert RL.Machine.from_chip(replace(c, backend="nobody", prefill_tflops=50.0)).prefill_flops is None
    assert RL.Machine.from_chip(replace(c, backend="cuda", prefill_tflops=50.0)).prefill_flops == 5e13  # exactly


def test_the_kernel_paths_note(monkeypatch: pytest.MonkeyPatch) -> None:
    c = _chip(bandwidth_gbps=1000.0, effective_bandwidth_gbps=800.0, step_overhead_ms=2.0, backend="cuda",
              prefill_tflops=50.0)
    four = replace(PATH, tiles=(8, 16, 32, 64), kquant_ops_per_weight=0.0)
    monkeypatch.setattr(RL, "kernels", lambda backend: four)
    assert RL.Machine.from_chip(c).notes[-1] == (
        "batch path: llama.cpp's cuda kernels (presets/kernels.toml): vectors up to B = 8, then tiles of "
        "8/16/32/64 tokens at 50 TFLOP/s (the chip's published prompt rate)")
    five = replace(PATH, tiles=(8, 16, 24, 32, 64), kquant_ops_per_weight=2.85)
    monkeypatch.setattr(RL, "kernels", lambda backend: five)
    assert RL.Machine.from_chip(c).notes[-1] == (
        "batch path: llama.cpp's cuda kernels (presets/kernels.toml): vectors up to B = 8, then tiles of "
        "8/16/24/32… tokens at 50 TFLOP/s (the chip's published prompt rate); K-quant weights decoded at 2.85 FLOP "
        "a weight a step beside their bytes (vector kernels)")


def _shares(**sh: float) -> RL.Prediction:
    return RL.Prediction("batch", 1, 1, 1, 0.01, 0.02, 100.0, 100.0, 1e9, "none", sh)


def test_binds_at_ties_and_without_a_bandwidth_share() -> None:
    # compute as long as the bytes: the bytes are named (compute must be longer); no regime: the vector kernels
    assert _shares(compute=0.5, bandwidth=0.5).binds() == "vector kernels: weight bytes 50%"
    assert _shares(compute=0.3, bandwidth=0.6, overhead=0.1).binds() == (
        "vector kernels: weight bytes 60% · per-step cost 10%")
    # no bandwidth share: compute is the longer; with neither, no bytes to show
    assert _shares(compute=0.5, overhead=0.5).binds() == "vector kernels: per-step cost 50% · compute 50%"
    assert _shares(overhead=1.0).binds() == "vector kernels: per-step cost 100%"
    kv = RL.Prediction("batch", 1, 1, 1, 0.01, 0.02, 100.0, 100.0, 1e9, "none", {"overhead": 1.0}, kv_share=0.5)
    assert kv.binds() == "vector kernels: per-step cost 100%"
    # a part of exactly half a percent is shown (0.005 ≥ 0.005)
    assert _shares(bandwidth=0.995, overhead=0.005).binds() == "vector kernels: weight bytes 100% · per-step cost 0%"


def test_window_cells_defaults_and_a_window_of_one() -> None:
    cache = replace(GPU, window_kv_reads="cache")
    # window 128, ubatch 512: S = pad(640) = 768 cells. At 1000 tokens one sequence (the default) reads all 768;
    # in a batch the window 873 … 1000 sits in cells 105 … 232: up to 256
    swa = replace(TOY, window=128, window_layers=8)
    assert RL.window_cells(swa, cache, 1000) == 768 and RL.window_cells(swa, cache, 1000, 2) == 256
    # a window of one token: S = pad(513) = 768; its one cell 1000 mod 768 = 232: up to 256, not the whole cache
    one = replace(TOY, window=1, window_layers=8)
    assert RL.window_cells(one, cache, 1000, 2) == 256


def test_figures_to_the_last_digit() -> None:
    # kernel_time of a dense model at B = 4: 3 further columns of 1.02048 GFLOP and the attention, at 5 TFLOP/s
    t, regime = RL.kernel_time(TOY, GPU, 4, 1000)
    assert regime == "small-batch vector" and t == pytest.approx(3 * 1.02048e9 / 5e12 + 2.048e7 / 5e12, rel=1e-12, abs=0)
    # one stream: 1.00512 GB at 100 GB/s, its attention, 1 ms
    p = RL.predict(TOY, GPU, "instances", 1, 1, at=AT)
    assert p.tpot_s == pytest.approx(1.00512e9 / 1e11 + 2.048e7 / 5e12 + 0.001, rel=1e-12, abs=0)
    # swap: 7.448e7 B at 3 GB/s, exactly
    b = replace(GPU, memory_budget=1_050_000_000, overhead_bytes=100_000_000, seq_extra_bytes=1e6)
    spill = 1.1e9 + 4 * 5.12e6 + 4e6 - 1.05e9
    t = 0.0102048 + 3 * 1.02048e9 / 5e12 + ATTN + 0.001 + spill / 3e9
    assert RL.predict(TOY, b, "batch", 1, 4, at=AT).tpot_s == pytest.approx(t, rel=1e-12, abs=0)
    # a prefill bound by its bytes: 1 GB at 100 GB/s (the FLOPs at 10¹⁸ FLOP/s take nothing)
    fast = replace(GPU, kernels=None, prefill_flops=None, flops=1e18, step_overhead_s=0.0)
    p = RL.predict(TOY, fast, "instances", 1, 1, at=AT)
    assert p.ttft_s == pytest.approx(0.01 + p.tpot_s, rel=1e-12, abs=0)


def test_dequant_and_compute_paths_by_what_a_machine_has() -> None:
    # a K-quant path but no prompt rate: nothing to price the decoding at
    kq = replace(GPU, kernels=replace(PATH, kquant_ops_per_weight=2.0), prefill_flops=None)
    assert RL.dequant_time(replace(TOY, quant="Q4_K_M"), kq, 1) == 0.0
    # a CPU probe with no prefill figure: TTFT two steps
    p = RL.predict(TOY, replace(CPU, prefill_core_s=None), "instances", 1, 1, at=RL.Lengths(10, 5, 0))
    assert p.ttft_s == pytest.approx(2 * p.tpot_s)
    # a prompt rate without a kernel path: decode and prefill by the chip's FLOP/s (10¹¹), not by the prompt rate
    # decode: max(10.0512 ms of bytes, 1.02048 GFLOP ÷ 10¹¹ = 10.2048 ms) + 1 ms; prefill: 1e11 + 4 × 10 × 8 × 64 × 4950 = 1.00101376e11 FLOP ÷ 10¹¹
    odd = replace(GPU, kernels=None, prefill_flops=1e12, flops=1e11)
    p = RL.predict(TOY, odd, "instances", 1, 1, at=AT)
    assert p.tpot_s == pytest.approx(0.0112048) and p.shares["compute"] == pytest.approx(0.0102048 / 0.0112048)
    assert p.ttft_s == pytest.approx(1.00101376 + 0.0112048)


def test_predict_defaults_and_a_tie_of_compute_and_bytes() -> None:
    assert RL.predict(TOY, GPU, "batch") == RL.predict(TOY, GPU, "batch", 1, 1)
    # at no context: 1 GB at 100 GB/s = 10 ms, and 1 GFLOP at 10¹¹ FLOP/s = 10 ms, exactly; the step 20 ms with its
    # 10 ms fixed: bytes 50 % of it. Compute binds only where it is the longer: here neither wall
    tie = replace(GPU, kernels=None, prefill_flops=None, flops=1e11, step_overhead_s=0.01)
    p = RL.predict(TOY, tie, "instances", 1, 1, at=RL.Lengths(100, 11, 0))
    assert p.shares["compute"] == p.shares["bandwidth"] == 0.5 and p.binding == "none"


def _family_machine() -> RL.Machine:
    peers = [_chip("p1", bandwidth_gbps=100.0, effective_bandwidth_gbps=60.0, step_overhead_ms=1.0, backend="metal",
                   prefill_tflops=10.0),
             _chip("p2", bandwidth_gbps=200.0, effective_bandwidth_gbps=160.0, step_overhead_ms=3.0, backend="metal",
                   prefill_tflops=30.0)]
    return RL.Machine.from_chip(_chip("new", bandwidth_gbps=500.0, backend="metal"), peers=peers)


def test_predict_range_passes_its_level_through() -> None:
    m = _family_machine()
    assert RL.predict_range(TOY, m, "batch") == RL.predict_range(TOY, m, "batch", 1, 1)
    # instances: one sequence an engine whatever B, at both ends of the range; the threads asked kept
    assert RL.predict_range(TOY, m, "instances", 1, 4, at=AT) == RL.predict_range(TOY, m, "instances", 1, 1, at=AT)
    r = RL.predict_range(TOY, m, "instances", 1, 1, 3, at=AT)
    assert r is not None and (r[0].threads, r[1].threads) == (3, 3)
    # the live view's span prices the level at its own context (1000 here, not prompt + half the output)
    roof = RL.Roofline(TOY, m, 100.0)
    p = RL.predict(TOY, m, "instances", 1, 1, at=AT)
    r = RL.predict_range(TOY, m, "instances", 1, 1, at=AT)
    assert r is not None and roof.span(p, 100, 11) == (r[0].aggregate_tps, r[1].aggregate_tps)
    # and the live view's level keeps the threads asked (a CPU: 1 thread of 2 cores, not both)
    cpu = RL.Roofline(TOY, CPU, 100.0)
    lv = cpu.level("instances", 1, 1, 1, 10, 5)
    assert lv == RL.predict(TOY, CPU, "instances", 1, 1, 1, RL.Lengths(10, 5)) and lv is not None and lv.threads == 1


def test_calibrate_edges() -> None:
    with pytest.raises(ValueError) as e:
        RL.calibrate(TOY, CPU, [RL.Point("batch", 1, 2, 2, 0.1)] * 3)
    assert str(e.value) == "calibrate takes at most two measured points"
    at = RL.Lengths(32, 128)
    # an instances point is one prompt an engine whatever B it carries: (30 − 10 ms) × 2 cores ÷ 32 tokens, given back
    inst = RL.Point("instances", 1, 3, 2, tpot_s=0.01, ttft_engine_s=0.03, prompt_tokens=32, output_tokens=128)
    m = RL.calibrate(TOY, CPU, [inst])
    assert m.prefill_core_s == pytest.approx(0.00125) and RL.predict(TOY, m, "instances", 1, 3, 2, at).ttft_s == \
        pytest.approx(0.03)
    # a batch-mode B = 1 point on a machine with a batch line: calibrated at B = 1 (20 ms a step), given back
    batched = replace(CPU, batch_base_core_s=0.018, seq_core_s=0.003)
    b1 = RL.Point("batch", 1, 1, 2, tpot_s=0.03, prompt_tokens=32, output_tokens=128)
    assert RL.predict(TOY, RL.calibrate(TOY, batched, [b1]), "batch", 1, 1, 2, at).tpot_s == pytest.approx(0.03)
    # an odd output: the context is 32 + 11 // 2 = 37 tokens
    b8 = RL.Point("batch", 1, 8, 2, tpot_s=0.05, prompt_tokens=32, output_tokens=11)
    core = 0.05 * 1.5 / (TOY.flops_per_token(37) / TOY.flops_per_token(0))
    cal = RL.calibrate(TOY, batched, [b8])
    assert cal.seq_core_s + cal.seq_extra_core_s == pytest.approx((core - 0.018) / 8, rel=1e-9)
    # a measured step exactly as long as the bandwidth's time: the bandwidth stands, nothing said
    notes: list[str] = []
    assert RL._bandwidth_at_most(CPU, 0.05, RL.Point("batch", 1, 8, 2, 0.05), notes) is CPU and notes == []


def test_the_prediction_tables_default_lengths() -> None:
    rows = RL.prediction_table(TOY, GPU)
    assert rows[0] == RL.predict(TOY, GPU, "instances", 1, 1, at=RL.Lengths(128, 256))


# a prompt with every row's logits at 2 … 32 tokens on 2 threads: 5 ms a further token to 16, 6 ms from 16 to 32;
# × 75/50 (the probe's 2 threads in one-thread core-seconds): 7.5 core-ms a column to 16, 9 from 16 to 32
def _flat(prices: tuple[tuple[int, float], ...]) -> list[float]:
    return [x for wp in prices for x in wp]


LOGITS = {"2": 0.030, "4": 0.040, "8": 0.060, "16": 0.100, "32": 0.196}


def test_batch_columns_past_the_probes_largest_batch_at_a_prompt_tokens_cost_at_their_width() -> None:
    # the probe of test_a_cpu_machine_from_its_probe_by_hand (base 25 core-ms, 6.25 a sequence through B = 2 and 8)
    c = _ceilings(decode_tps={"1": 50.0, "2": 75.0}, batch_steps_per_s={"2": 40.0, "8": 20.0}, prefill_tps=400.0,
                  weight_bytes=1e9, logits_s=LOGITS)
    m = RL.Machine.from_ceilings(c, TOY)
    assert m.batch_top_b == 8
    assert _flat(m.column_prices) == pytest.approx(_flat(((4, 0.0075), (8, 0.0075), (16, 0.0075), (32, 0.009))))
    assert m.notes[-1] == ("batch columns past B = 8 at a prompt's further token's price with its logits at their width "
                           "and 0.00 a batch's sequence costs beyond it (B = 8 against a prompt of 8), core-ms a column: "
                           "9–16 7.50, 17–32 9.00")
    assert [m.column_core(j) for j in (1, 4, 5, 16, 17, 32, 33, 500)] == pytest.approx(
        [0.0075] * 4 + [0.009] * 4)  # past the widest, the widest's price
    assert m.step_core(8) == pytest.approx(0.075)  # the line's own: 25 + 8 × 6.25
    assert m.step_core(16) == pytest.approx(0.075 + 8 * 0.0075)  # 135 core-ms, where the line says 125
    assert m.step_core(20) == pytest.approx(0.075 + 8 * 0.0075 + 4 * 0.009)  # 171: the columns past 16 at 9
    assert m.step_core(40) == pytest.approx(0.075 + 8 * 0.0075 + 24 * 0.009)  # 351: past 32 at 32's price
    assert (m.column_weights(4), m.column_weights(8), m.column_weights(16)) == (
        RL.Columns(4), RL.Columns(8), RL.Columns(8, 9, 16))
    assert m.columns_core(12) == pytest.approx(8 * 0.00625 + 4 * 0.0075)
    assert RL.predict(TOY, m, "batch", 1, 16, threads=2, at=RL.Lengths(10, 5, 0)).tpot_s == pytest.approx(0.135 / 1.5)
    # another model of 2 GB a step: the column × 2 as every core cost
    assert RL.Machine.from_ceilings(c, replace(TOY, weight_bytes=2_000_000_000)).column_core(9) == pytest.approx(0.015)
    # without the prompt's timings, or without two batches to draw the line, the line goes on
    line = RL.Machine.from_ceilings(replace(c, engine={**c.engine, "logits_s": None}), TOY)
    assert (line.batch_top_b, line.column_prices, line.column_weights(16)) == (0, (), RL.Columns(16))
    assert line.step_core(16) == pytest.approx(0.125) and not any(n.startswith("batch columns") for n in line.notes)
    one = RL.Machine.from_ceilings(replace(c, engine={**c.engine, "batch_steps_per_s": {"8": 20.0}}), TOY)
    assert (one.batch_top_b, one.column_prices) == (0, ())
    # a calibration point past the probe's batches: the probe's base, line and prices stay, and what the load adds
    # is each sequence's, a column at a prompt token's price as much as one on the line: B = 16 at 100 ms on 2
    # threads = 150 core-ms, the probe's 135 → 15 ÷ 16 = 0.9375 core-ms a sequence
    b16 = RL.Point("batch", 1, 16, 2, tpot_s=0.1, prompt_tokens=0, output_tokens=0)
    cal = RL.calibrate(TOY, m, [b16])
    assert (cal.seq_core_s, cal.seq_extra_core_s) == pytest.approx((0.00625, 0.0009375))
    assert cal.column_prices == m.column_prices and cal.batch_base_core_s == m.batch_base_core_s
    assert cal.step_core(4) == pytest.approx(m.step_core(4) + 4 * 0.0009375)
    assert RL.predict(TOY, cal, "batch", 1, 16, 2, RL.Lengths(0, 0)).tpot_s == pytest.approx(0.1)
    # … and one faster than the base and those columns (70 core-ms): every part × 70/135, every width's price too
    fast = RL.calibrate(TOY, m, [replace(b16, tpot_s=0.07 / 1.5)])
    f = 0.07 / 0.135
    assert (fast.batch_base_core_s, fast.seq_core_s) == pytest.approx((0.025 * f, 0.00625 * f))
    assert _flat(fast.column_prices) == pytest.approx(
        _flat(((4, 0.0075 * f), (8, 0.0075 * f), (16, 0.0075 * f), (32, 0.009 * f))))
    # a point at the probe's B = 8 leaves the columns' prices
    assert RL.calibrate(TOY, m, [replace(b16, b=8)]).column_prices == m.column_prices


def test_a_batch_sequence_dearer_than_a_prompt_token_adds_to_every_prompt_priced_column() -> None:
    # the probe's B = 8 at 20 steps/s: 50 ms on 2 threads, × 75/50 = 75 core-ms; its prompt of 8 tokens with every
    # row's logits 45 ms × 1.5 = 67.5 core-ms, the same matmuls. A batch's sequence costs (75 − 67.5) ÷ 8 = 0.9375
    # core-ms more than a prompt's token (its own attention and KV cells, its argmax): each column at a prompt token's
    # price, + 0.9375. The prices: 2 → 4 (40 − 30) ÷ 2 × 1.5 = 7.5; 4 → 8 (45 − 40) ÷ 4 × 1.5 = 1.875; 8 → 16 7.5
    prompt = {"2": 0.030, "4": 0.040, "8": 0.045, "16": 0.085}
    prices, extra = RL.batch_columns(prompt, 8, 0.075, 1.5)
    assert extra == pytest.approx(0.0009375)
    assert _flat(prices) == pytest.approx(
        _flat(((4, 0.0075 + 0.0009375), (8, 0.001875 + 0.0009375), (16, 0.0075 + 0.0009375))))
    c = _ceilings(decode_tps={"1": 50.0, "2": 75.0}, batch_steps_per_s={"2": 40.0, "8": 20.0}, prefill_tps=400.0,
                  weight_bytes=1e9, logits_s=prompt)
    m = RL.Machine.from_ceilings(c, TOY)
    assert m.step_core(8) == pytest.approx(0.075)  # the probe's own B = 8, on its line
    assert m.step_core(16) == pytest.approx(0.075 + 8 * (0.0075 + 0.0009375))  # 142.5 core-ms
    assert "and 0.94 a batch's sequence costs beyond it (B = 8 against a prompt of 8)" in m.notes[-1]
    # another model of 2 GB a step: every core cost × 2, in the note too
    two = RL.Machine.from_ceilings(c, replace(TOY, weight_bytes=2_000_000_000))
    assert two.notes[-1].endswith("and 1.88 a batch's sequence costs beyond it (B = 8 against a prompt of 8), core-ms a "
                                  "column: 9–16 16.88")
    assert two.step_core(16) == pytest.approx(2 * m.step_core(16))
    # a prompt dearer than the batch (the LOGITS above: 8 tokens 60 ms × 1.5 = 90 core-ms against 75), or no prompt at
    # the probe's largest batch: nothing added
    assert RL.batch_columns(LOGITS, 8, 0.075, 1.5)[1] == 0.0
    assert RL.batch_columns({"4": 0.04, "16": 0.1}, 8, 0.075, 1.5) == (((16, 0.0075),), 0.0)
    # the note names the prices that apply, from the column past the probe's batches: 4 → 16's from the 9th
    gap = RL.Machine.from_ceilings(replace(c, engine={**c.engine, "logits_s": {"4": 0.04, "16": 0.1}}), TOY)
    assert gap.notes[-1].endswith("core-ms a column: 9–16 7.50") and gap.column_core(9) == pytest.approx(0.0075)


def test_column_prices_from_a_prompts_timings_by_hand() -> None:
    # 2 tokens 30 ms, 4 40 ms: 5 ms a column from 3 to 4; 8 at 60: 5 ms; 16 at 59 ms (noise: faster than 8) prices
    # nothing, and its columns take 32's: (100 − 59) ÷ 16 = 2.5625 ms; at 2 core-seconds a second, doubled
    prices = RL.column_prices({"4": 0.040, "2": 0.030, "16": 0.059, "8": 0.060, "32": 0.100}, 2.0)
    assert _flat(prices) == pytest.approx(_flat(((4, 0.010), (8, 0.010), (32, 0.005125))))
    m = replace(CPU, column_prices=prices)
    assert [m.column_core(j) for j in (3, 8, 9, 16, 32, 64)] == pytest.approx([0.010, 0.010] + [0.005125] * 4)
    assert RL.column_prices(None, 2.0) == () and RL.column_prices({"8": 0.06}, 2.0) == ()
    assert replace(CPU, column_prices=()).column_core(9) == 0.0


def test_a_tile_between_the_probes_batches_keeps_the_line_and_its_second_pass() -> None:
    # the same probe on an AVX512 build (tiles of 4), whose tinyBLAS weights are 60 % of a step's bytes: B = 2 and 8
    # one pass each, so base 25 and seq 6.25 core-ms as before; a column 7.5 core-ms to 16. Up to B = 8 the line
    # (the probe's own batches hold what the first tile's columns cost: a prompt's columns inside it cost little,
    # the tile computed whole, a batch's do not), B = 5, 6, 7 and 9 with their second pass (0.6 × 25 = 15); past 8,
    # 7.5 a column
    c = _ceilings(decode_tps={"1": 50.0, "2": 75.0}, batch_steps_per_s={"2": 40.0, "8": 20.0}, prefill_tps=400.0,
                  weight_bytes=1e9, logits_s=LOGITS, cpu_features=["AVX512", "LLAMAFILE"])
    m = RL.Machine.from_ceilings(c, replace(TOY, matmul_type_bytes=(("Q8_0", 600_000_000),)))
    assert (m.batch_top_b, m.cpu_tile, m.cpu_repass_share) == (8, 4, pytest.approx(0.6))
    assert (m.batch_base_core_s, m.seq_core_s) == pytest.approx((0.025, 0.00625))
    C = RL.Columns
    assert [m.column_weights(b) for b in (2, 3, 4, 6, 8, 9)] == [C(2), C(3), C(4), C(6), C(8), C(8, 9, 9)]
    assert [round(m.step_core(b) * 1e3, 6) for b in (2, 3, 4, 5, 6, 7, 8, 9, 12)] == [
        37.5, 43.75, 50.0, 56.25 + 15, 62.5 + 15, 68.75 + 15, 75.0, 82.5 + 15, 105.0]
    # a calibration point on the line (B = 6 at 60 ms on 2 threads = 90 core-ms) against the probe's 25 + 15 (the
    # second pass) + 6 × 6.25 = 77.5: (90 − 77.5) ÷ 6 = 2.083 core-ms more each sequence
    b6 = RL.Point("batch", 1, 6, 2, tpot_s=0.06, prompt_tokens=0, output_tokens=0)
    assert RL.calibrate(TOY, m, [b6]).seq_extra_core_s == pytest.approx(0.0125 / 6)
    # whatever the tile (AVX2's 2, one past the probe's batches, or no tinyBLAS): the line to B = 8, prices past it
    for tile in (2, 16, 0):
        t = replace(m, cpu_tile=tile)
        assert [t.column_weights(b) for b in (3, 4, 8, 10)] == [C(3), C(4), C(8), C(8, 9, 10)], tile
