"""The model of work beyond a dense model (docs/design/model-reads.md): experts, sliding windows, linear layers, a cost
per step; each figure worked by hand once here."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from measure.core import work as W
from measure.core.metrics import read_bandwidth
from measure.core.roofline import Lengths, Machine, predict
from measure.machine.model_files import work_from_config
from presets import Chip

MiB = 2**20


def _moe(**kw: object) -> W.WorkModel:
    """A hand-sized mixture of experts: 100 MB always read, 8 experts of 50 MB (over all layers), 2 per token."""
    base = dict(name="moe", source="test", params=10**9, file_bytes=500_000_000, weight_bytes=100_000_000,
                embd_row_bytes=0.0, matmul_params=100_000_000, layers=4, heads=8, kv_heads=2, head_dim=64,
                experts=W.Experts(count=8, used=2, bytes_each=50_000_000, params_each=50_000_000))
    base.update(kw)
    return W.WorkModel(**base)  # type: ignore[arg-type]


def _gemma() -> W.WorkModel:
    """Gemma 3 270M's attention: 18 layers, 1 KV head of 256, a 512-token window in 15 of them (f16)."""
    return W.WorkModel(name="g", source="test", params=1, file_bytes=253_113_024, weight_bytes=253_000_000,
                       embd_row_bytes=0.0, matmul_params=1, layers=18, heads=4, kv_heads=1, head_dim=256,
                       window=512, window_layers=15)


def test_distinct_experts_by_hand() -> None:
    e = W.Experts(count=8, used=2, bytes_each=1.0, params_each=1.0)
    assert e.distinct(1) == pytest.approx(2.0)  # one token: its k experts
    assert e.distinct(2) == pytest.approx(8 * (1 - 0.75**2))  # 3.5
    assert e.distinct(4) == pytest.approx(5.46875)  # 8 · (1 − 0.75⁴)
    assert e.distinct(1000) == pytest.approx(8.0)  # every expert, never more
    assert e.distinct(0) == 0.0


def test_correlated_routing_by_hand() -> None:
    """ρ = 0.1: four tokens count as 4 ÷ (1 + 3 · 0.1) = 3.0769 independent ones; one token is still its k."""
    e = W.Experts(count=8, used=2, bytes_each=1.0, params_each=1.0, correlation=0.1)
    assert e.distinct(1) == pytest.approx(2.0)
    assert e.distinct(4) == pytest.approx(8 * (1 - 0.75 ** (4 / 1.3)))  # 4.4957, fewer than uniform's 5.46875
    assert e.distinct(1_000_000) == pytest.approx(8 * (1 - 0.75**10), rel=1e-4)  # saturates at 1/ρ = 10 tokens
    assert W.Experts(8, 2, 1.0, 1.0, correlation=1.0).distinct(32) == pytest.approx(2.0)  # every token alike


def test_a_trained_moe_takes_the_fitted_routing_and_says_so() -> None:
    """A preset without its own ρ takes work.ROUTING_CORRELATION, which is what benchmarks/physics.py --fit finds
    on the published MoE batch rows marked fit, and names it among what is assumed."""

    from presets import model

    m = W.from_preset(model("qwen3-coder-30b-a3b-q8_0"))
    assert m.experts is not None and m.experts.correlation == W.ROUTING_CORRELATION
    assert any("routing correlation" in a for a in m.assumed)
    phys = _phys()
    fit = phys.fit_routing(phys.load()["point"])
    assert fit["routing_correlation"] == pytest.approx(W.ROUTING_CORRELATION, abs=0.0051)
    assert len(fit["rows"]) == 5  # Qwen3-Coder-30B-A3B at B = 2 … 32: B = 2 fixes the batch cost
    from presets import kernels

    assert kernels("cuda").moe_batch_layer_ms == pytest.approx(fit["moe_batch_layer_ms"], abs=0.0026)
    assert kernels("metal").moe_batch_layer_ms == 0.0  # measured on CUDA only
    assert max(abs(r) for r in fit["residuals"]) < 0.10


def test_moe_reads_its_routed_experts_not_the_file() -> None:
    m = _moe()
    assert m.read_bytes(1) == pytest.approx(100e6 + 2 * 50e6)  # 200 MB a token, not the 500 MB file
    assert m.read_bytes(4) == pytest.approx(100e6 + 5.46875 * 50e6)  # 373.4 MB for four tokens
    assert m.bytes_per_step([0, 0]) == pytest.approx(100e6 + 3.5 * 50e6)
    # per token a batch of 4 reads 93 MB: more than W/B = 50 MB (the experts), less than W
    assert m.read_bytes(4) / 4 == pytest.approx(93.359375e6)


def test_moe_roofline_on_a_chip_and_the_bandwidth_product_below_the_line() -> None:
    m = _moe()
    chip = Machine("test", 100.0, "spec")
    p1 = predict(m, chip, "instances", 1, 1, at=Lengths(prompt_tokens=0, output_tokens=2, context=0))
    assert p1.tpot_s == pytest.approx(200e6 / 100e9)  # 2 ms: 200 MB at 100 GB/s
    pk = predict(m, chip, "instances", 2, 1, at=Lengths(prompt_tokens=0, output_tokens=2, context=0))
    assert pk.tpot_s == pytest.approx(2 * 200e6 / 100e9)  # K instances share β: K · W / β
    p4 = predict(m, chip, "batch", 1, 4, at=Lengths(prompt_tokens=0, output_tokens=2, context=0))
    assert p4.tpot_s == pytest.approx(373.4375e6 / 100e9)
    # the bandwidth product with the bytes really read lands on the line; with the file's bytes 2.5× above it
    bw = read_bandwidth("instances", m, agg_tps=1 / p1.tpot_s)
    assert bw.gbps == pytest.approx(100.0)
    assert (1 / p1.tpot_s) * m.file_bytes / 1e9 == pytest.approx(250.0)
    bw4 = read_bandwidth("batch", m, agg_tps=4 / p4.tpot_s, steps_per_s=[1 / p4.tpot_s])
    assert bw4.gbps == pytest.approx(100.0)
    assert "2 of 8 experts" in bw.formula


def test_step_overhead_adds_to_every_step() -> None:
    chip = Chip("x", "X", 200.0, effective_bandwidth_gbps=150.0, step_overhead_ms=3.0,  # type: ignore[call-arg]
                effective_source="test table") if "effective_bandwidth_gbps" in Chip.__dataclass_fields__ else None
    m = Machine("x", 150.0, "effective", step_overhead_s=0.003) if chip is None else Machine.from_chip(chip)
    assert m.step_overhead_s == pytest.approx(0.003)
    p = predict(_moe(experts=None, weight_bytes=300_000_000), m, "instances",
                at=Lengths(prompt_tokens=0, output_tokens=2, context=0))
    assert p.tpot_s == pytest.approx(0.003 + 300e6 / 150e9)  # 5 ms: 3 ms fixed + 2 ms of bytes


def test_each_routing_layer_adds_its_cost_to_a_step() -> None:
    """moe_layer_s: 4 routing layers × 0.5 ms = 2 ms a step beside the 3 ms fixed and the bytes; a dense model of
    the same bytes pays none of it; at B = 4 it is still paid once a step, not once a sequence, and at B ≥ 2 only
    each routing layer's batch cost (moe_batch_layer_s: 4 × 0.25 ms) comes on top, beside the batch path's."""
    m = Machine("x", 100.0, "effective", step_overhead_s=0.003, moe_layer_s=0.0005, moe_batch_layer_s=0.00025,
                batch_step_s=0.001, seq_step_s=0.0001)
    at = Lengths(prompt_tokens=0, output_tokens=2, context=0)
    assert _moe().moe_layers == 4 and _moe(experts=replace(_moe().experts, layers=3)).moe_layers == 3
    p = predict(_moe(), m, "instances", at=at)
    assert p.tpot_s == pytest.approx(0.003 + 4 * 0.0005 + 200e6 / 100e9)  # 7 ms: 3 + 2 + 2
    dense = predict(_moe(experts=None, weight_bytes=200_000_000), m, "instances", at=at)
    assert dense.tpot_s == pytest.approx(0.003 + 200e6 / 100e9)  # 5 ms
    p4 = predict(_moe(), m, "batch", 1, 4, at=at)
    assert p4.tpot_s == pytest.approx(0.003 + 4 * 0.0005 + 0.001 + 3 * 0.0001 + 4 * 0.00025 + 373.4375e6 / 100e9)
    dense4 = predict(_moe(experts=None, weight_bytes=200_000_000), m, "batch", 1, 4, at=at)
    assert dense4.tpot_s == pytest.approx(0.003 + 0.001 + 3 * 0.0001 + 200e6 / 100e9)  # the batch path alone


def test_a_presets_embedding_is_priced_as_the_rest_of_the_file_not_as_its_experts() -> None:
    """gpt-oss-20b's MXFP4 GGUF: 12 101 003 837 bytes, 10 178 887 680 of them MXFP4 experts (24 layers × 32 ×
    3 × 2880² weights); the other 1 804 459 584 weights (attention, embeddings) take 1 922 116 157 bytes (Q8_0,
    1.0652 B each). The 201 088 × 2880 input embedding is a lookup: 616.9 MB of those bytes are not read a step,
    leaving 1.305 GB always read (the file's average, 0.579 B a weight, would leave 1.587 GB)."""
    from presets import model

    m = W.from_preset(model("gpt-oss-20b-mxfp4"))
    rest = 12_101_003_837 - 10_178_887_680
    per = rest / (20_914_757_184 - 32 * 3 * 2880 * 2880 * 24)
    assert per == pytest.approx(1.0652, abs=1e-4)
    assert m.weight_bytes == pytest.approx(rest - 201_088 * 2880 * per, rel=1e-6)  # 1.305 GB
    assert m.weight_bytes == pytest.approx(1.305e9, rel=1e-3)
    assert m.read_bytes(1) == pytest.approx(1.305e9 + 4 / 32 * 10_178_887_680 + 2880 * per, rel=1e-3)  # 2.577 GB
    assert m.moe_layers == 24


def test_a_chip_without_measurements_is_an_estimate() -> None:
    m = Machine.from_chip(Chip("y", "Y", 100.0))
    assert m.bandwidth_gbps == pytest.approx(80.0) and m.step_overhead_s == 0.0
    assert "estimate" in m.notes[0]


def test_sliding_window_kv_per_engine_by_hand() -> None:
    g = _gemma()
    per_layer_token = 2 * 1 * 256 * 2  # K and V, one head of 256, f16: 1 KiB
    assert g.kv_layer_token_bytes == per_layer_token
    # llama-server (reduced window cache): 3 global layers × 32768 + 15 windowed × (512 + 512 micro-batch)
    assert g.kv_alloc_bytes(32768, "llama.cpp-window") == (3 * 32768 + 15 * 1024) * 1024 == 111 * MiB
    assert g.kv_alloc_bytes(32768, "llama.cpp-full") == 18 * 32768 * 1024 == 576 * MiB
    assert g.kv_alloc_bytes(32768, "mlx") == (3 * 32768 + 15 * 512) * 1024  # 103.5 MiB: a ring of the window
    assert g.kv_alloc_bytes(4096, "llama.cpp-window") == (3 * 4096 + 15 * 1024) * 1024  # 27 MiB
    # a step reads the whole context only in the 3 global layers
    assert g.kv_read_bytes(4096) == (3 * 4096 + 15 * 512) * 1024
    assert g.kv_read_bytes(100) == 18 * 100 * 1024  # inside the window every layer reads it all
    with pytest.raises(ValueError, match="unknown KV layout"):
        g.kv_alloc_bytes(10, "paged")


def test_cuda_attention_reads_the_window_caches_ring_metal_the_window_by_hand() -> None:
    """CUDA's flash-attention kernels read a windowed layer's cache up to the last stride of 256 cells holding a
    position in the window (all of it for one sequence); Metal's skip the masked blocks (kernels.toml
    window_kv_reads; docs/design/kernels.md, "Attention")."""
    from measure.core.roofline import step_reads, window_cells

    g = _gemma()  # 3 global layers, 15 windowed of 512 tokens, 1 KiB a layer and token
    assert g.window_cache_cells(2048) == 2560 and g.window_cache_cells() == 1024  # S = pad(512 + ubatch) to 256
    cuda = replace(Machine.from_chip(Chip("c", "C", 200.0, backend="cuda")), ubatch=2048)
    metal = replace(Machine.from_chip(Chip("m", "M", 200.0, backend="metal")), ubatch=2048)
    assert (cuda.window_kv_reads, metal.window_kv_reads) == ("cache", "window")
    assert window_cells(g, metal, 8192, 2) == 0  # the window
    assert window_cells(g, cuda, 1000, 2) == 1000  # the cache not yet full: every cell so far
    assert window_cells(g, cuda, 8192, 1) == 2560  # one sequence: no KV_max, the whole cache
    # two: position p sits in cell p mod 2560; at 8192 the window 7681 … 8192 is cells 1 … 512: up to pad(513) = 768
    assert window_cells(g, cuda, 8192, 2) == 768
    assert window_cells(g, cuda, 7000, 2) == 2048  # 6489 … 7000 in cells 1369 … 1880: pad(1881)
    assert window_cells(g, cuda, 7700, 2) == 2560  # 7189 … 7700 in cells 2069 … 2559 and 0 … 20: wrapped, all
    one = (3 * 8192 + 15 * 2560) * 1024
    assert step_reads(g, cuda, [8192]) - g.read_bytes(1) == one  # 64.5 MB of KV
    assert step_reads(g, cuda, [8192, 8192]) - g.read_bytes(2) == 2 * (3 * 8192 + 15 * 768) * 1024
    assert step_reads(g, metal, [8192]) - g.read_bytes(1) == (3 * 8192 + 15 * 512) * 1024
    # the step of a 100 GB/s-effective CUDA chip at 8192 tokens pays those bytes (its attention's arithmetic, the
    # kernel path's, left out here: tests/unit/test_roofline_oracle.py prices it)
    at = Lengths(prompt_tokens=8192, output_tokens=2, context=8192)
    t = predict(g, replace(cuda, bandwidth_gbps=100.0, step_overhead_s=0.0, kernels=None), "batch", 1, 1,
                at=at).tpot_s
    assert t == pytest.approx((g.read_bytes(1) + one) / 100e9)


def test_linear_and_latent_attention() -> None:
    hybrid = replace(_gemma(), window=0, window_layers=0, linear_layers=12, state_bytes=3 * MiB)
    assert hybrid.kv_alloc_bytes(1024, "full") == 6 * 1024 * 1024 + 3 * MiB  # 6 attention layers + the state
    mla = replace(_gemma(), window=0, window_layers=0, mla_dim=576)
    assert mla.kv_layer_token_bytes == 576 * 2  # kv_lora_rank 512 + rope 64, f16


QWEN3_30B_A3B = {  # Qwen/Qwen3-30B-A3B config.json
    "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48, "num_experts": 128,
    "num_experts_per_tok": 8, "vocab_size": 151936, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_config_moe_shape(tmp_path) -> None:
    import json

    (tmp_path / "config.json").write_text(json.dumps(QWEN3_30B_A3B))
    m = work_from_config(tmp_path / "config.json")
    assert m.params == pytest.approx(30.5e9, rel=0.01)  # Qwen's 30.5B
    assert m.experts is not None and (m.experts.count, m.experts.used) == (128, 8)
    assert m.experts.params_each == 3 * 2048 * 768 * 48
    assert m.active_params == pytest.approx(3.04e9, rel=0.02)  # Qwen's 3.3B counts the input embedding too
    # one token reads ≈ 3.3B × 2 bytes of bf16 weights, not the 61 GB file
    assert m.read_bytes(1) == pytest.approx((m.active_params + 2048) * 2, rel=0.01)
    assert m.assumed == (W.ROUTING_ASSUMED,)  # a config.json does not say how its router's tokens correlate
    assert m.moe_layers == 48
    deepseek = {**QWEN3_30B_A3B, "first_k_dense_replace": 3}  # DeepSeek's leading dense layers do not route
    (tmp_path / "config.json").write_text(json.dumps(deepseek))
    assert work_from_config(tmp_path / "config.json").moe_layers == 45


def test_unknown_config_window_is_named(tmp_path) -> None:
    import json

    cfg = dict(QWEN3_30B_A3B, num_experts=0, sliding_window=4096, use_sliding_window=True)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = work_from_config(tmp_path / "config.json")
    assert m.window_layers == 0 and any("sliding_window 4096" in a for a in m.assumed)


def test_gemma3_config_layer_types(tmp_path) -> None:
    import json

    types = ["sliding_attention"] * 5 + ["full_attention"]
    cfg = {"hidden_size": 640, "intermediate_size": 2048, "num_attention_heads": 4, "num_key_value_heads": 1,
           "head_dim": 256, "num_hidden_layers": 18, "vocab_size": 262144, "tie_word_embeddings": True,
           "sliding_window": 512, "layer_types": types * 3}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = work_from_config(tmp_path / "config.json")
    assert (m.window, m.window_layers, m.full_layers) == (512, 15, 3)


class _Lib:
    """llama_cpp's two calls the placement asks, as a build with or without a GPU backend answers them."""

    def __init__(self, gpu: bool):
        self.gpu = gpu

    def llama_supports_gpu_offload(self) -> bool:
        return self.gpu


@pytest.mark.parametrize(("gpu", "asked", "want"), [(True, None, -1), (False, None, 0), (True, 0, 0), (True, 7, 7)])
def test_the_llama_engine_asks_for_every_layer_on_the_gpu_where_llama_cpp_offloads(gpu, asked, want) -> None:
    """Metal, CUDA or Vulkan builds report GPU offload: the engine asks for every layer there (-1), where the
    bindings' own default (0) would run every layer on the CPU; --n-gpu-layers N wins; the window cache is asked."""
    from engines.base import EngineSpec
    from engines.llama_cpp import LlamaCppEngine, offloaded_fraction, placement

    e = LlamaCppEngine(EngineSpec(engine="llama", model_path="m.gguf", n_gpu_layers=asked))
    e._lib = _Lib(gpu)
    asked_of_llama: dict = {}
    e._llama(lambda **kw: asked_of_llama.update(kw))  # the Llama(...) call, as llama-cpp-python receives it
    assert asked_of_llama["n_gpu_layers"] == want and asked_of_llama["swa_full"] is False
    text = placement(_Lib(gpu), asked, 18)
    assert text.endswith("on the GPU") or "the rest on the CPU" in text or "CPU" in text.split(":")[0].split("(")[0]
    assert ("GPU" in text.split(":")[0].split("(")[0]) == (gpu and asked != 0)
    assert offloaded_fraction(_Lib(gpu), asked, 18) == {-1: 1.0, 0: 0.0, 7: 7 / 18}[want]


def test_this_builds_placement_is_in_the_run_header() -> None:
    import llama_cpp

    from measure.machine.model_choice import llama_placement

    gpu = bool(llama_cpp.llama_supports_gpu_offload())
    assert ("GPU" in llama_placement(None).split(":")[0]) == gpu  # this CPU build: "layers on the CPU: …"


def test_plan_matches_what_llama_cpp_allocates_for_the_embedded_gemma(model) -> None:
    """One real allocation: llama.cpp (the in-process engine's swa_full off, and the bindings' default on) makes the
    KV cache plan says, read from its own log (benchmarks/kv_alloc.py does every engine at 4096 and 32768)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("kv_alloc", Path(__file__).parents[2] / "benchmarks" / "kv_alloc.py")
    kv_alloc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kv_alloc)
    from measure.machine.model_files import shape_from_gguf
    from measure.core.sizing import plan

    row = plan(shape_from_gguf(model.path), [4096], 24 * 2**30)["rows"][0]["kv_by_engine"]
    assert kv_alloc.llama_cpp_python(str(model.path), 4096, "window") == row["llama (in-process)"] / MiB == 27.0
    assert kv_alloc.llama_cpp_python(str(model.path), 4096, "full") == row["llama_cpp.server"] / MiB == 72.0


def test_a_made_moe_gguf_is_read_as_experts(tmp_path) -> None:
    """engines/gguf_synth writes a Mixtral-layout MoE; the reader finds its experts and splits their bytes off."""
    from engines.gguf_file import inspect_gguf
    from engines.gguf_synth import SynthShape, write_model

    path = write_model(tmp_path / "moe.gguf", SynthShape(hidden=256, layers=2, heads=4, kv_heads=1, ffn=256, experts=8,
                                                         experts_used=2, vocab=300))
    m = W.from_gguf(inspect_gguf(path))
    assert m.experts is not None and (m.experts.count, m.experts.used) == (8, 2)
    per_expert = 2 * 3 * 256 * 256 * 34 / 32  # 2 layers × gate, up, down of 256 × 256 in Q8_0
    assert m.experts.bytes_each == pytest.approx(per_expert)
    assert m.read_bytes(1) == pytest.approx(m.weight_bytes + 2 * per_expert + 256 * 34 / 32)  # + one embedding row
    assert m.file_bytes > m.weight_bytes + 8 * per_expert  # the whole file holds every expert
    assert m.experts.correlation == 0.0  # random router weights: the file says its tokens route independently
    assert m.assumed == ()
    assert m.moe_layers == 2  # the layers holding blk.N.ffn_*_exps


def test_the_working_set_bounds_only_what_the_gpu_wires() -> None:
    """On unified memory Metal's working set bounds what the GPU wires: all of it for every layer offloaded, half
    the footprint at half the layers (the budget doubles, within the RAM left), nothing on the CPU."""
    from measure.core.guard import ASSUMED_OS_HELD_BYTES, GiB, unified_budget

    total, ws = 64 * GiB, 48 * GiB
    left = total - ASSUMED_OS_HELD_BYTES
    assert unified_budget(total, ws, "test")[0] == ws
    assert unified_budget(total, 20 * GiB, "test", gpu_share=0.5)[0] == 40 * GiB
    assert unified_budget(total, ws, "test", gpu_share=0.5)[0] == left  # 96 GiB allowed, the RAM holds 60
    budget, why = unified_budget(total, ws, "test", gpu_share=0.0)
    assert budget == left and "no layer on the GPU" in why


def test_an_architecture_the_model_does_not_know_is_named(tmp_path) -> None:
    from engines.gguf_file import inspect_gguf
    from engines.gguf_synth import SynthShape, write_model

    path = write_model(tmp_path / "x.gguf", SynthShape(hidden=128, layers=1, heads=2, kv_heads=1, ffn=128, experts=0,
                                                       vocab=300), arch="mystery")
    m = W.from_gguf(inspect_gguf(path))
    assert m.experts is None and any("'mystery' is not one this model of work knows" in a for a in m.assumed)


def test_a_cpu_engines_thermal_state_is_never_the_gpus(monkeypatch) -> None:
    """On a Linux box with an NVIDIA GPU, an engine whose layers run on the CPU reads /sys, not NVML."""
    from measure.machine import host

    monkeypatch.setattr(host, "nvml_thermal", lambda: host.Thermal("throttled", "hot", "NVML"))
    monkeypatch.setattr(host, "linux_thermal", lambda root: host.Thermal("nominal", "", "/sys"))
    on_gpu = host.ThermalReader(system=lambda: "Linux")
    on_cpu = host.ThermalReader(system=lambda: "Linux", gpu=False)
    assert on_gpu.read().source == "NVML" and on_cpu.read().source == "/sys"


def _phys():
    from conftest import physics

    return physics()


def test_a_leave_one_source_out_fold_never_reads_the_fitted_figures_of_chips_toml(monkeypatch) -> None:
    """Issue 55: a source's points are predicted from figures fitted on the other sources only. A fold's machine is
    built from its own fits: chips.toml's fitted figures (fitted on every source, the left-out one too) changed
    to nonsense leave a fold's prediction as it was; a chip the fold did not fit takes its backend's figures,
    worked here by hand."""
    import dataclasses

    import presets

    phys = _phys()
    points = phys.load()["point"]
    rates = phys.load_rates(phys.RATES)
    train = [p for p in points if p["source"] != "a4167"]
    fold = phys.fold_figures(train, [r for r in rates if r["source"] != "a4167"])
    row = next(p for p in points if p["source"] == "a4167" and p["chip"] == "apple-m2-ultra")
    before = phys.predict_point(row, fold["routing"]["routing_correlation"], machine=phys.machine_for(row["chip"], fold))
    real = presets.chip

    def spoiled(key):
        c = real(key)
        return dataclasses.replace(c, effective_bandwidth_gbps=1.0, step_overhead_ms=500.0, moe_layer_ms=9.0,
                                   prefill_tflops=0.001)

    monkeypatch.setattr(presets, "chip", spoiled)
    after = phys.predict_point(row, fold["routing"]["routing_correlation"], machine=phys.machine_for(row["chip"], fold))
    assert after == pytest.approx(before, rel=1e-12)
    monkeypatch.undo()
    # M2 Ultra has no dense row outside a4167: priced by the median efficiency and overhead of the chips fitted
    assert "apple-m2-ultra" not in fold["chips"]
    m = phys.machine_for("apple-m2-ultra", fold)
    effs = sorted(f["effective_bandwidth_gbps"] / real(k).bandwidth_gbps for k, f in fold["chips"].items()
                  if phys.backend(k) == "Metal") or sorted(f["effective_bandwidth_gbps"] / real(k).bandwidth_gbps
                                                          for k, f in fold["chips"].items())
    mid = (effs[(len(effs) - 1) // 2] + effs[len(effs) // 2]) / 2
    assert m.bandwidth_gbps == pytest.approx(real("apple-m2-ultra").bandwidth_gbps * mid)


def test_a_chip_whose_rows_read_the_same_bytes_borrows_its_backends_overhead() -> None:
    """One distinct bytes-per-step cannot fix both a chip's bandwidth and its overhead: the fit takes the median
    overhead of its backend's chips fitted on several rows (worked by hand: 2 ms and 4 ms → 3 ms), else of every
    such chip."""
    phys = _phys()
    out = {"apple-m1": {"step_overhead_ms": 2.0, "overhead_from": ""},
           "apple-m2": {"step_overhead_ms": 4.0, "overhead_from": ""},
           "nvidia-dgx-spark": {"step_overhead_ms": 10.0, "overhead_from": ""},
           "apple-m3": {"step_overhead_ms": 99.0, "overhead_from": "backend:Metal"}}  # borrowed: not counted
    assert phys.family_overhead_ms("apple-m4", out) == pytest.approx(3.0)
    assert phys.family_overhead_source("apple-m4", out) == "backend:Metal"
    assert phys.family_overhead_ms("amd-strix-halo", {"apple-m1": out["apple-m1"]}) == pytest.approx(2.0)
    assert phys.family_overhead_source("amd-strix-halo", {"apple-m1": out["apple-m1"]}) == "backend:any"


def test_physics_reports_every_source_left_out() -> None:
    phys = _phys()
    points = phys.load()["point"]
    loso = phys.leave_one_source_out(points, phys.load_rates(phys.RATES))
    assert set(loso["sources"]) == {p["source"] for p in points}
    assert loso["pooled"]["points"] == len(points)  # no point dropped
    assert sum(v["points"] for v in loso["sources"].values()) == len(points)


def test_a_chip_nobody_measured_gets_its_backends_range_never_one_number() -> None:
    """Issue 55 item 3. Two Metal chips fitted at 80 % and 90 % of spec with 4 and 6 ms a step, prompt rates of
    0.02 and 0.03 TFLOP/s per GB/s: a third Metal chip of 400 GB/s nobody measured is priced at the medians
    (85 %: 340 GB/s, 5 ms, 0.025 × 400 = 10 TFLOP/s) and every prediction carries the range from the slowest figures
    (80 %, 6 ms) to the fastest (90 %, 4 ms), which holds the median one; a CUDA chip's figures never enter."""
    import dataclasses

    from measure.core.roofline import Family, Lengths, Machine, predict, predict_range
    from presets import Chip

    a = Chip("apple-a", "A", 100.0, backend="metal", effective_bandwidth_gbps=80.0, step_overhead_ms=4.0,
             prefill_tflops=2.0)
    b = Chip("apple-b", "B", 200.0, backend="metal", effective_bandwidth_gbps=180.0, step_overhead_ms=6.0,
             prefill_tflops=6.0)
    cuda = Chip("nvidia-x", "X", 1000.0, backend="cuda", effective_bandwidth_gbps=500.0, step_overhead_ms=1.0)
    new = Chip("apple-new", "New", 400.0, backend="metal")
    fam = Family.of(new, [a, b, cuda])
    assert fam is not None and fam.chips == ("apple-a", "apple-b")
    assert fam.efficiency == pytest.approx((0.8, 0.85, 0.9)) and fam.overhead_ms == pytest.approx((4.0, 5.0, 6.0))
    m = Machine.from_chip(new, peers=[a, b, cuda])
    assert m.family == fam and m.bandwidth_gbps == pytest.approx(340.0) and m.step_overhead_s == pytest.approx(0.005)
    assert m.prefill_flops == pytest.approx(10e12) and m.kernels is not None
    assert "estimate" in m.bandwidth_source and any("an estimate from the 2 metal chips" in n for n in m.notes)
    w = _moe()
    for b_ in (1, 4, 16):
        mid = predict(w, m, "batch", 1, b_, at=Lengths(16, 32))
        slow, fast = predict_range(w, m, "batch", 1, b_, at=Lengths(16, 32))
        assert slow.per_stream_tps < mid.per_stream_tps < fast.per_stream_tps
    one = predict_range(w, m, "batch", 1, 1, at=Lengths(16, 32, 0))[0]  # by hand at B = 1, no KV: 6 ms + bytes at 320
    assert one.tpot_s == pytest.approx(0.006 + w.bytes_per_step([0]) / 320e9)
    # a measured chip has no range; with no fitted chip of its backend, the old assumed efficiency (said)
    assert predict_range(w, Machine.from_chip(a), "batch") is None
    lone = Machine.from_chip(dataclasses.replace(new, backend="vulkan"), peers=[a, b, cuda])
    assert lone.family is None and lone.bandwidth_gbps == pytest.approx(320.0)


def test_a_level_says_what_its_step_spends_its_time_on_and_an_unmeasured_chip_its_range() -> None:
    """Issue 55 item 6. A dense model of 1 GB (no KV at context 0, 1 GFLOP a token) on a Metal chip of 100 GB/s
    effective, 2 ms a step, 10 TFLOP/s of prompt rate, vector efficiency 0.5, tile efficiency 0.25: at B = 1 the step
    is 10 ms of bytes + 2 ms (83 % / 17 %); at B = 4 the small-batch vector kernels add 3 further columns' arithmetic,
    3 × 1e9 ÷ 5e12 = 0.6 ms; at B = 12 the tiled kernels price a 32-column tile at 2.5 TFLOP/s, 12.8 ms. The step table and
    the numbers panel show an unmeasured chip's prediction as its range."""
    import dataclasses

    from measure.core.lines import StepRow
    from measure.core.roofline import Lengths, Machine, Roofline, predict
    from presets import Chip, kernels
    from tui.panels import render_step_table

    w = W.WorkModel(name="d", source="test", params=5 * 10**8, file_bytes=10**9, weight_bytes=10**9, embd_row_bytes=0.0,
                    matmul_params=5 * 10**8, layers=4, heads=8, kv_heads=2, head_dim=64)
    path = dataclasses.replace(kernels("metal"), vector_efficiency=0.5, tile_efficiency=0.25)
    m = Machine("metal-test", 100.0, "test", step_overhead_s=0.002, kernels=path, prefill_flops=10e12)
    at = Lengths(16, 32, 0)
    one = predict(w, m, "batch", 1, 1, at=at)
    assert one.tpot_s == pytest.approx(0.012)
    assert one.binds() == "vector kernels: weight bytes 83% · per-step cost 17%"
    four = predict(w, m, "batch", 1, 4, at=at)
    assert four.tpot_s == pytest.approx(0.010 + 0.002 + 0.0006)
    assert four.binds() == "small-batch vector kernels: weight bytes 79% · per-step cost 16% · kernel arithmetic 5%"
    twelve = predict(w, m, "batch", 1, 12, at=at)
    assert twelve.tpot_s == pytest.approx(0.010 + 0.002 + 0.0128)
    assert twelve.binds() == "tiled kernels (B = 12 priced as 32): kernel arithmetic 52% · weight bytes 40% · per-step cost 8%"
    kv = predict(w, m, "batch", 1, 1, at=Lengths(16, 32, 4096))  # 4 layers × 4096 × 512 B = 8.4 MB of KV
    assert kv.kv_share == pytest.approx(8_388_608 / (10**9 + 8_388_608)) and "KV 1%" in kv.binds()
    # a measured chip: one number; a chip nobody measured (tests above: a Metal family): slowest–fastest
    assert Roofline(w, m, 100.0).span(one, 16, 32) is None
    a = Chip("apple-a", "A", 100.0, backend="metal", effective_bandwidth_gbps=80.0, step_overhead_ms=4.0,
             prefill_tflops=2.0)
    b = Chip("apple-b", "B", 200.0, backend="metal", effective_bandwidth_gbps=180.0, step_overhead_ms=6.0,
             prefill_tflops=6.0)
    new = Machine.from_chip(Chip("apple-new", "New", 400.0, backend="metal"), peers=[a, b])
    r = Roofline(w, new, 340.0)
    p = r.level("batch", 1, 4, None, 16, 32)
    assert p is not None
    lo, hi = r.span(p, 16, 32)  # type: ignore[misc]
    assert lo < p.aggregate_tps < hi
    row = StepRow("B=4", "batch", 1, 4, True, "settled", 4.0, p.aggregate_tps, None, None, None, None, 10, None, None,
                  None, None, None, p.aggregate_tps, "bandwidth", predicted_low=lo, predicted_high=hi)
    assert f"{lo:.0f}–{hi:.0f}" in render_step_table([row], None).plain


def test_routed_tiles_run_at_the_prompt_rate_dense_tiles_at_the_tile_efficiency_by_hand() -> None:
    """docs/design/kernels.md, "Routed tiles". _moe() (8 experts of 5e7 weights, 2 a token, 1e8 dense weights, ρ 0)
    on Metal at B = 32: 8 × (1 − 0.75³²) = 7.9992 distinct experts, 64 ÷ 7.9992 = 8.0008 tokens each, a 32-column
    tile each: 7.9992 × 32 × 2 × 5e7 ÷ 10 TFLOP/s = 2.5597 ms at the prompt rate; the dense 1e8 weights' 32 columns
    (attention at context 0: none) at 0.25 × 10 TFLOP/s: 32 × 2e8 ÷ 2.5e12 = 2.56 ms."""
    import dataclasses

    from measure.core.roofline import kernel_time
    from presets import kernels

    w = _moe()
    path = dataclasses.replace(kernels("metal"), vector_efficiency=0.5, tile_efficiency=0.25)
    m = Machine("metal-test", 100.0, "test", kernels=path, prefill_flops=10e12)
    d = 8 * (1 - 0.75**32)
    assert w.experts is not None and w.experts.distinct(32) == pytest.approx(d)
    t, regime = kernel_time(w, m, 32, 0)
    assert t == pytest.approx(32 * 2e8 / 2.5e12 + d * 32 * 2 * 5e7 / 10e12)
    assert t == pytest.approx(0.00256 + 0.0025597, rel=1e-4) and "experts tiled" in regime


def test_a_k_quant_step_pays_its_decoding_beside_its_bytes_by_hand() -> None:
    """Issue 55 item 2 (docs/design/kernels.md, "Quant types"). A dense model of 1 GB and 5e8 weights on a Metal chip
    of 100 GB/s effective, 2 ms a step, 10 TFLOP/s of prompt rate, a K-quant's decoding at 4 FLOP-equivalents a
    weight: 5e8 × 4 ÷ 10e12 = 0.2 ms beside 10 ms of bytes and 2 ms, 12.2 ms; the same bytes as Q4_0 or F16, 12 ms.
    At B = 4 the weights are decoded once a step (0.2 ms beside 3 further columns' 0.6 ms); tiled (B = 12) the prompt
    rate already holds it; a CPU's probe measured its own kernels: never. The real one: Llama 3.1 8B Q4_K_M on M1 Max
    (7 504 924 672 weights beside the embedding × 2.85 ÷ 7.4 TFLOP/s = 2.89 ms)."""
    import dataclasses

    from measure.core.roofline import dequant_time
    from presets import chip, kernels, model

    assert [W.quant_family(q) for q in ("Q4_K_M", "q6_k", "Q4_0", "Q8_0", "BF16", "MXFP4", "IQ4_NL", "")] == [
        "k", "k", "legacy", "legacy", "float", "mxfp4", "iq", ""]
    w = W.WorkModel(name="d", source="test", params=5 * 10**8, file_bytes=10**9, weight_bytes=10**9, embd_row_bytes=0.0,
                    matmul_params=5 * 10**8, layers=4, heads=8, kv_heads=2, head_dim=64, quant="Q4_K_M")
    path = dataclasses.replace(kernels("metal"), vector_efficiency=0.5, tile_efficiency=0.25, kquant_ops_per_weight=4.0)
    m = Machine("metal-test", 100.0, "test", step_overhead_s=0.002, kernels=path, prefill_flops=10e12)
    at = Lengths(16, 32, 0)
    one = predict(w, m, "batch", 1, 1, at=at)
    assert one.tpot_s == pytest.approx(0.0122)
    assert one.binds() == "vector kernels: weight bytes 82% · per-step cost 16% · K-quant decoding 2%"
    for q in ("Q4_0", "F16", ""):
        assert predict(replace(w, quant=q), m, "batch", 1, 1, at=at).tpot_s == pytest.approx(0.012)
    assert predict(w, m, "batch", 1, 4, at=at).tpot_s == pytest.approx(0.010 + 0.002 + 0.0006 + 0.0002)
    assert predict(w, m, "batch", 1, 12, at=at).tpot_s == pytest.approx(0.010 + 0.002 + 0.0128)
    assert predict(w, m, "instances", 2, 1, at=at).tpot_s == pytest.approx(0.020 + 0.002 + 0.0004)  # K share the ALUs
    assert dequant_time(w, replace(m, kernels=None), 1) == 0.0
    real = W.from_preset(model("llama-3.1-8b-q4_k_m"))
    assert real.matmul_weights(1) == 8_030_261_248 - 128_256 * 4096 == 7_504_924_672
    assert dequant_time(real, Machine.from_chip(chip("apple-m1-max")), 1) == pytest.approx(7_504_924_672 * 2.85 / 7.4e12)
