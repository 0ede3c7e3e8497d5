"""core/roofline.py and core/work.py by hand: a toy model (1 GB read a step, 0.5 G weights multiplied, 10 layers) on
a toy GPU (100 GB/s, 1 ms a step, vectors to B = 8 then tiles of 16/32/64 at 10 TFLOP/s) and a toy CPU, each
figure worked out in the comments (benchmarks/mutation.py runs these against the modules' mutants)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from measure.core import roofline as RL
from measure.core import work as W
from presets import Kernels

# KV: 2 (K and V) × 2 kv heads × 64 × 2 B = 512 B a layer and token
TOY = W.WorkModel(name="toy", source="hand", params=1_000_000_000, file_bytes=1_000_000_000,
                  weight_bytes=1_000_000_000, embd_row_bytes=0.0, matmul_params=500_000_000, layers=10, heads=8,
                  kv_heads=2, head_dim=64)
PATH = Kernels("cuda", vector_max_b=8, tiles=(16, 32, 64), moe_tiled_min_b=32, moe_vector_reads="union",
               vector_efficiency=0.5, tile_efficiency=0.25)
GPU = RL.Machine("toy-gpu", 100.0, "hand", step_overhead_s=0.001, kernels=PATH, prefill_flops=1e13)
AT = RL.Lengths(prompt_tokens=100, output_tokens=11, context=1000)


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


def test_one_stream_on_the_toy_gpu() -> None:
    # step: 1 GB + 5.12 MB of KV at 100 GB/s = 10.0512 ms, + 1 ms = 11.0512 ms
    p = RL.predict(TOY, GPU, "instances", 1, 1, at=AT)
    assert p.tpot_s == pytest.approx(0.0110512)
    # prefill: max(1.00101376e11 FLOP / 1e13, 1 GB / 100 GB/s) = 10.0101376 ms; TTFT = it + a step
    assert p.ttft_s == pytest.approx(0.0100101376 + 0.0110512)
    # a request: TTFT + 10 × TPOT; 11 tokens a request
    assert p.aggregate_tps == pytest.approx(11 / (0.0100101376 + 0.0110512 + 10 * 0.0110512))
    assert p.per_stream_tps == pytest.approx(1 / 0.0110512)
    assert p.bytes_per_s == pytest.approx(1.00512e9 / 0.0110512)
    assert p.shares == pytest.approx({"bandwidth": 0.0100512 / 0.0110512, "overhead": 0.001 / 0.0110512})
    assert p.binding == "bandwidth" and p.regime == "vector" and p.context == 1000
    assert p.kv_share == pytest.approx(5.12e6 / 1.00512e9)


def test_k_instances_share_the_bandwidth() -> None:
    # K = 2: each engine's 1.00512 GB at 50 GB/s = 20.1024 ms + 1 ms; the prefill at half the FLOP/s
    p = RL.predict(TOY, GPU, "instances", 2, 1, at=AT)
    assert p.tpot_s == pytest.approx(0.0211024)
    assert p.ttft_s == pytest.approx(max(1.00101376e11 / 5e12, 1e9 / 5e10) + 0.0211024)
    assert p.aggregate_tps == pytest.approx(2 * 11 / (p.ttft_s + 10 * 0.0211024))
    assert p.bytes_per_s == pytest.approx(2 * 1.00512e9 / 0.0211024)


def test_small_batch_vector_kernels() -> None:
    # B = 4 (≤ 8): bytes 1 GB + 4 × 5.12 MB = 10.2048 ms; each further column's arithmetic at 0.5 × 10 TFLOP/s:
    # 3 × 1.02048 GFLOP / 5e12 = 0.612288 ms; + 1 ms
    p = RL.predict(TOY, GPU, "batch", 1, 4, at=AT)
    t = 0.0102048 + 3 * 1.02048e9 / 5e12 + 0.001
    assert p.tpot_s == pytest.approx(t) and p.regime == "small-batch vector"
    assert p.ttft_s == pytest.approx(4 * 1.00101376e11 / 1e13 + t)
    assert p.aggregate_tps == pytest.approx(4 * 11 / (p.ttft_s + 10 * t))
    assert set(p.shares) == {"bandwidth", "kernels", "overhead"}
    assert p.shares["kernels"] == pytest.approx(3 * 1.02048e9 / 5e12 / t)
    assert RL.kernel_time(TOY, GPU, 4, 1000) == (pytest.approx(3 * 1.02048e9 / 5e12), "small-batch vector")
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
    assert RL.kernel_time(TOY, GPU, 1, 1000) == (0.0, "vector")
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
    # 2 cores; a step 20 core-ms at one thread, 2 threads 1.5× as fast; a prompt token 1 core-ms
    cpu = RL.Machine("toy-cpu", 50.0, "probe", cores=2, step_core_s=0.02, prefill_core_s=0.001,
                     thread_speedup={1: 1.0, 2: 1.5})
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
