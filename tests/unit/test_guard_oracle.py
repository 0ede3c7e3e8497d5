"""core/guard.py by hand: the KV dtypes and sizes, a toy model's KV (10 layers, 2 KV heads of 64: 5,120 B of f16 KV
a token) with and without its layer kinds, the shapes read from a config.json, a GGUF header and a preset, the
footprint of K engines, the budget on unified memory, admission and the OOM killer's refusals, and the wall seen in
injected samples, each figure worked out in the comments and each boundary tried on both sides
(benchmarks/mutation.py runs these against the module's mutants)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from measure.core import guard as G
from measure.core import work as W
from measure.core.readings import MacMemory, SystemSample, WorkingSet
from measure.core.units import GiB, MiB
from test_work_oracle import _info  # the toy GGUF header, the work model's oracle's

NS = 1_000_000_000
SHAPE = G.KVShape("toy", layers=10, kv_heads=2, head_dim=64, weight_bytes=1_000_000_000, source="hand")
# the same toy's layer kinds: 8 of its 10 layers attend a window of 128 tokens; its own KV element 1 B (the dtype
# asked for replaces it)
WORK = W.WorkModel(name="toy", source="hand", params=1_000_000_000, file_bytes=1_000_000_000,
                   weight_bytes=1_000_000_000, embd_row_bytes=0.0, matmul_params=500_000_000, layers=10, heads=8,
                   kv_heads=2, head_dim=64, kv_element_bytes=1.0, window=128, window_layers=8)


# ---- dtypes and sizes -------------------------------------------------------------------------------------
def test_dtype_bytes_of_every_kind_in_either_case() -> None:
    names = ("f32", "f16", "bf16", "fp16", "fp8", "fp8_e4m3", "fp8_e5m2", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0")
    # llama.cpp's blocks: 32 values and a 2-byte scale (and a 2-byte minimum for _1): q8_0 34 B, q5_1 24 B,
    # q5_0 22 B, q4_1 20 B, q4_0 18 B a block of 32
    assert [G.dtype_bytes(n) for n in names] == [4.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0625, 0.75, 0.6875, 0.625,
                                                 0.5625]
    assert (G.dtype_bytes("BF16"), G.dtype_bytes("Q8_0"), G.dtype_bytes("Fp8_E4M3")) == (2.0, 1.0625, 1.0)
    with pytest.raises(G.GuardError) as e:
        G.dtype_bytes("Q3_K")
    assert str(e.value) == ("unknown KV dtype 'Q3_K'; choose one of: f32, f16, bf16, fp16, fp8, fp8_e4m3, fp8_e5m2, "
                            "q8_0, q5_1, q5_0, q4_1, q4_0")
    assert isinstance(e.value, ValueError)


def test_parse_memory_size_and_its_one_line_errors() -> None:
    assert G.parse_memory_size("48G") == 48 * 2**30 == 51_539_607_552
    assert G.parse_memory_size("512M") == 536_870_912 and G.parse_memory_size("16e9") == 16_000_000_000
    with pytest.raises(G.GuardError) as e:
        G.parse_memory_size("lots")
    assert str(e.value) == "bad size 'lots': write e.g. 48G (= 48 GiB = 48 × 2³⁰ B), 512M, or a number of bytes (16e9)"
    assert e.value.__cause__ is None and e.value.__suppress_context__
    with pytest.raises(G.GuardError) as z:
        G.parse_memory_size("0G")
    assert str(z.value) == "size '0G' must be greater than 0"


# ---- the KV of a model ------------------------------------------------------------------------------------
def test_per_token_and_per_request_without_layer_kinds() -> None:
    # 2 (K, V) × 10 layers × 2 heads × 64 × 2 B = 5,120 B; f32 10,240; q8_0 2,560 elements × 34/32 = 2,720
    assert SHAPE.per_token() == 5120 and SHAPE.per_token("f32") == 10240 and SHAPE.per_token("q8_0") == 2720
    # every layer holds the whole context: 1,000 × 5,120
    assert SHAPE.per_request(1000) == 5_120_000 and SHAPE.per_request(1000, "f32") == 10_240_000
    assert SHAPE.per_request(1000, "q4_0", "mlx") == 1000 * 1440  # 2,560 × 18/32 = 1,440 B a token, any layout
    assert not SHAPE.layouts_differ


def test_per_request_by_layout_with_windows() -> None:
    s = replace(SHAPE, work=WORK)
    # a layer's token: 2 × 2 × 64 × 2 B (f16, not the work's own 1 B) = 512 B. llama.cpp's window cache: 2 full
    # layers × 1,000 + 8 windowed × min(1,000, pad256(128 + 512) = 768) = 8,144 cells
    assert s.per_request(1000) == 8144 * 512 == 4_169_728
    assert s.per_request(1000, "f32") == 8144 * 1024
    assert s.per_request(1000, "f16", "llama.cpp-full") == 10 * 1000 * 512
    assert s.per_request(1000, "f16", "mlx") == (2 * 1000 + 8 * 128) * 512 == 1_548_288
    assert s.per_request(100, "fp8", "llama.cpp-window") == 10 * 100 * 256  # within the window: every layer
    assert s.per_token() == 5120  # per token: the shape's own figure, every layer
    with pytest.raises(G.GuardError, match="^unknown KV dtype 'int3'"):
        s.per_request(1000, "int3")


def test_layouts_differ_only_with_windows_or_linear_layers() -> None:
    plain = replace(WORK, window=0, window_layers=0)
    assert replace(SHAPE, work=plain).layouts_differ is False
    assert replace(SHAPE, work=WORK).layouts_differ is True
    assert replace(SHAPE, work=replace(plain, linear_layers=2)).layouts_differ is True
    assert replace(SHAPE, work=replace(plain, window=128)).layouts_differ is False  # a window no layer keeps
    assert SHAPE.layouts_differ is False


def test_mlx_prefill_bytes_by_hand() -> None:
    # min(prompt, 2,048) tokens × (4 × hidden + 3 × intermediate) × 2 B
    assert G.mlx_prefill_bytes(100, 200, 1000) == 1000 * 1000 * 2 == 2_000_000
    assert G.mlx_prefill_bytes(100, 1, 10) == 10 * 403 * 2 == 8060
    assert G.mlx_prefill_bytes(1, 100, 10) == 10 * 304 * 2 == 6080
    assert G.mlx_prefill_bytes(100, 200, 2047) == 4_094_000
    assert G.mlx_prefill_bytes(100, 200, 2048) == 4_096_000  # one chunk of 2,048
    assert G.mlx_prefill_bytes(100, 200, 2049) == 4_096_000 and G.mlx_prefill_bytes(100, 200, 9000) == 4_096_000
    assert G.mlx_prefill_bytes(0, 200, 1000) == 0.0 and G.mlx_prefill_bytes(100, 0, 1000) == 0.0
    assert G.mlx_prefill_bytes(0, 0, 1000) == 0.0
    assert replace(SHAPE, hidden=100, intermediate=200).prefill_bytes_per_seq(1000) == 2_000_000
    assert replace(SHAPE, hidden=100).prefill_bytes_per_seq(1000) == 0.0 and SHAPE.prefill_bytes_per_seq(1) == 0.0


# ---- shapes read ------------------------------------------------------------------------------------------
DENSE = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000, "torch_dtype": "bfloat16",
         "tie_word_embeddings": False}
# 202,048 parameters (tests/unit/test_work_oracle.py), bf16: 404,096 B
CONFIG = Path("/m/toy/config.json")


def _cfg(cfg: dict[str, object], files: int = 0) -> W.ConfigFile:
    return W.ConfigFile(CONFIG, dict(cfg), files)


def test_shape_of_config_by_hand() -> None:
    s = G.shape_of_config(_cfg(DENSE))
    # 4 heads of 64 ÷ 4 = 16, 2 KV heads; no safetensors: the parameters × 2 B
    assert (s.name, s.layers, s.kv_heads, s.head_dim, s.weight_bytes) == ("toy", 2, 2, 16, 404_096)
    assert (s.source, s.hidden, s.intermediate) == ("config /m/toy/config.json", 64, 128)
    assert s.work is not None and (s.work.file_bytes, s.work.layers, s.work.kv_heads) == (404_096, 2, 2)
    assert s.per_token() == 2 * 2 * 2 * 16 * 2  # 256 B
    # the safetensors beside it, a name of its own, K and V on every head, a head_dim given
    t = G.shape_of_config(_cfg(DENSE | {"_name_or_path": "org/toy-1b", "head_dim": 8}, files=500_000))
    assert (t.name, t.weight_bytes, t.head_dim, t.work.file_bytes if t.work else None) == ("org/toy-1b", 500_000,
                                                                                         8, 500_000)
    u = G.shape_of_config(_cfg({k: v for k, v in DENSE.items()
                                if k not in ("num_key_value_heads", "intermediate_size")}))
    assert (u.kv_heads, u.intermediate, u.hidden) == (4, 0, 64)


def test_shape_of_config_without_a_work_model() -> None:
    # no vocab_size: no work model, the weights from the safetensors beside it
    novocab = {k: v for k, v in DENSE.items() if k != "vocab_size"}
    s = G.shape_of_config(_cfg(novocab, files=1_000_000))
    assert (s.weight_bytes, s.work, s.hidden, s.intermediate) == (1_000_000, None, 64, 128)
    # no hidden_size either, but a head_dim: the shape stands, the hidden width not known
    h = G.shape_of_config(_cfg({k: v for k, v in novocab.items() if k != "hidden_size"} | {"head_dim": 16},
                               files=1_000_000))
    assert (h.head_dim, h.hidden, h.intermediate, h.work) == (16, 0, 128, None)
    with pytest.raises(G.GuardError) as e:
        G.shape_of_config(_cfg(novocab))
    assert str(e.value) == ("/m/toy/config.json: no weights beside it (*.safetensors) and its weights cannot be "
                            "sized: the config has no vocab_size (and its model_type 'llama' has no default known "
                            "here)")
    # a work model of no parameters (hidden 0): its weights cannot be sized either
    with pytest.raises(G.GuardError) as z:
        G.shape_of_config(_cfg(DENSE | {"hidden_size": 0, "head_dim": 16}))
    assert str(z.value) == ("/m/toy/config.json: no weights beside it (*.safetensors) and its weights cannot be "
                            "sized: no parameters")


@pytest.mark.parametrize(("change", "why"), [
    ({"num_hidden_layers": None}, "^/m/toy/config.json lacks the attention shape \\(int\\(\\) argument"),
    ({"num_attention_heads": "four"}, "^/m/toy/config.json lacks the attention shape \\(invalid literal"),
    ({"hidden_size": None}, "^/m/toy/config.json lacks the attention shape \\(int\\(\\) argument"),
])
def test_shape_of_config_refuses_a_config_without_the_attention_shape(change: dict[str, object], why: str) -> None:
    with pytest.raises(G.GuardError, match=why):
        G.shape_of_config(_cfg(DENSE | change))


def test_shape_of_config_names_the_missing_key() -> None:
    with pytest.raises(G.GuardError) as e:
        G.shape_of_config(_cfg({k: v for k, v in DENSE.items() if k != "num_hidden_layers"}))
    assert str(e.value) == ("/m/toy/config.json lacks the attention shape ('num_hidden_layers'): need "
                            "num_hidden_layers, num_attention_heads, hidden_size or head_dim")


def test_shape_of_config_refuses_zero_heads_in_one_line() -> None:
    with pytest.raises(G.GuardError, match="^/m/toy/config.json lacks the attention shape \\(integer division"):
        G.shape_of_config(_cfg(DENSE | {"num_attention_heads": 0}))


def test_a_mixture_of_experts_mlp_is_the_experts_a_token_uses() -> None:
    from measure.machine.model_files import read_config

    root = Path(__file__).resolve().parents[1] / "data" / "configs"
    # Mixtral 8x7B: intermediate_size 14,336 is an expert's, 2 a token: 28,672; gpt-oss-20b: 4 × 2,880 = 11,520
    assert G.shape_of_config(read_config(root / "Mixtral-8x7B-v0.1" / "config.json")).intermediate == 28_672
    assert G.shape_of_config(read_config(root / "gpt-oss-20b" / "config.json")).intermediate == 11_520
    assert G.shape_of_config(read_config(root / "Llama-3.1-8B" / "config.json")).intermediate == 14_336
    moe = {"intermediate_size": 100, "num_experts": 8, "num_experts_per_tok": 2}
    assert W.active_ffn(moe) == 200
    assert W.active_ffn(moe | {"moe_intermediate_size": 30}) == 60  # Qwen-MoE, DeepSeek: an expert's own width
    assert W.active_ffn(moe | {"moe_intermediate_size": 30, "n_shared_experts": 1}) == 90
    assert W.active_ffn(moe | {"moe_intermediate_size": 30, "shared_expert_intermediate_size": 40}) == 100
    assert W.active_ffn(moe | {"moe_intermediate_size": 30, "first_k_dense_replace": 1}) == 100  # a dense layer wider
    assert W.active_ffn(moe | {"moe_intermediate_size": 70, "first_k_dense_replace": 1}) == 140
    assert W.active_ffn({"intermediate_size": 100, "num_local_experts": 4, "num_experts_per_tok": 1}) == 100
    assert W.active_ffn({"intermediate_size": 100, "n_routed_experts": 4, "num_experts_per_tok": 3}) == 300
    assert W.active_ffn({"intermediate_size": 100}) == 100 and W.active_ffn({}) == 0
    assert W.active_ffn({"num_experts": 8}) == 0  # experts of no width given: not known


def test_shape_of_gguf_by_hand() -> None:
    s = G.shape_of_gguf(_info(), "models/toy.gguf")
    assert (s.name, s.layers, s.kv_heads, s.head_dim, s.weight_bytes) == ("toy", 2, 2, 16, 1_100_000)
    assert (s.source, s.hidden, s.intermediate) == ("GGUF models/toy.gguf", 0, 0)
    # the work model: 1,000,000 tensor bytes less the untied embedding's 200,000
    assert s.work is not None and s.work.weight_bytes == 800_000
    assert G.shape_of_gguf(_info(), Path("/m/toy.gguf")).source == "GGUF /m/toy.gguf"
    assert G.shape_of_gguf(_info(tensor_bytes=None), "t.gguf").work is None  # no tensor totals: no work model
    for missing in ("layers", "kv_heads", "head_dim"):
        with pytest.raises(G.GuardError) as e:
            G.shape_of_gguf(_info(**{missing: None}, architecture="mamba"), "t.gguf")
        assert str(e.value) == "t.gguf: the GGUF metadata lacks the KV shape of architecture mamba"


def test_shape_from_preset_reads_the_mlp_width() -> None:
    s = G.shape_from_preset("llama-2-7b-f16")
    # the preset's intermediate (Llama 2 7B's intermediate_size); the parameters give it too: attention
    # 4096·32·128·2 (q, o) + 4096·32·128·2 (k, v) + 2·4096 = 67,117,056 a layer; a layer of
    # (6,738,415,616 − 32,000·4096·2 − 4096) ÷ 32 = 202,383,360; MLP (202,383,360 − 67,117,056) ÷ (3·4096) = 11,008
    assert (s.name, s.layers, s.kv_heads, s.head_dim, s.hidden, s.intermediate) == ("Llama 2 7B (F16 GGUF)", 32, 32,
                                                                                   128, 4096, 11_008)
    assert (s.weight_bytes, s.source) == (13_477_363_712, "preset llama-2-7b-f16")
    assert s.work is not None and s.work.layers == 32 and s.work.source == "preset llama-2-7b-f16"
    # Gemma 3 270M says 2,048 (its parameters would round to 2,049: the norms its layers hold besides)
    g = G.shape_from_preset("gemma-3-270m-q4_k_m")
    assert (g.intermediate, g.hidden, g.layers, g.kv_heads, g.head_dim) == (2048, 640, 18, 1, 256)
    assert g.layouts_differ  # 15 of its 18 layers windowed
    # a mixture of experts: a token runs its experts' MLPs, not all of them (8 of 128 × 768; 4 of 32 × 2,880);
    # from the parameters it read 98,347 (every expert's), 1.16 GiB of mlx prefill a sequence at 4,096 tokens
    assert G.shape_from_preset("qwen3-coder-30b-a3b-q8_0").intermediate == 8 * 768
    assert G.shape_from_preset("gpt-oss-20b-mxfp4").intermediate == 4 * 2880


def _preset(monkeypatch: pytest.MonkeyPatch, **kw: object) -> G.KVShape:
    import presets

    base = presets.ModelPreset(key="hand", name="Hand", params=3094, weight_bytes=6188, layers=2, kv_heads=1,
                               head_dim=5, hidden=10, heads=2, vocab=100)
    monkeypatch.setattr(presets, "model", lambda name: replace(base, **kw))  # type: ignore[arg-type]
    return G.shape_from_preset("hand")


def test_shape_from_preset_rounds_the_width_and_needs_the_widths(monkeypatch: pytest.MonkeyPatch) -> None:
    # a preset that says its widths: a dense FFN's; an MoE's used and shared experts', or its dense layers' if wider
    assert _preset(monkeypatch, intermediate=12).intermediate == 12
    assert _preset(monkeypatch, experts=8, experts_used=2, expert_ffn=5, intermediate=99).intermediate == 10
    assert _preset(monkeypatch, experts=8, experts_used=2, expert_ffn=5, shared_experts=1,
                   shared_expert_ffn=7).intermediate == 17
    assert _preset(monkeypatch, experts=8, experts_used=2, expert_ffn=5, dense_layers=1, intermediate=16).intermediate == 16
    assert _preset(monkeypatch, experts=8, experts_used=2, expert_ffn=5, dense_layers=1, intermediate=9).intermediate == 10
    assert _preset(monkeypatch, experts=8).intermediate == 0  # an MoE preset without its experts' width: not known
    # two KV heads: attention 10·2·5·2 + 10·2·5·2 + 20 = 420; (542 − 420) ÷ 30 = 4.07 → 4
    assert _preset(monkeypatch, kv_heads=2).intermediate == 4
    # attention 10·2·5·2 + 10·1·5·2 + 2·10 = 320; a layer (3,094 − 100·10·2 − 10) ÷ 2 = 542; (542 − 320) ÷ 30 = 7.4
    assert _preset(monkeypatch).intermediate == 7
    # 3,100 parameters: (3,100 − 2,010) ÷ 2 = 545, 225 ÷ 30 = 7.5 → 8 (half to even)
    assert _preset(monkeypatch, params=3100).intermediate == 8
    # tied: (3,094 − 1,000 − 10) ÷ 2 = 1,042, 722 ÷ 30 = 24.07 → 24
    assert _preset(monkeypatch, tied_embeddings=True).intermediate == 24
    # fewer parameters than embeddings and attention: no MLP, never a negative width
    assert _preset(monkeypatch, params=2000).intermediate == 0
    # a preset without its hidden width, heads or vocabulary: the width not known
    for missing in ("hidden", "heads", "vocab"):
        assert _preset(monkeypatch, **{missing: 0}).intermediate == 0
    s = _preset(monkeypatch, name="Named", weight_bytes=7000)
    assert (s.name, s.weight_bytes, s.source, s.hidden, s.layers, s.kv_heads, s.head_dim) == ("Named", 7000,
                                                                                             "preset hand", 10, 2, 1,
                                                                                             5)


# ---- the footprint ----------------------------------------------------------------------------------------
def test_footprint_by_hand() -> None:
    fp = G.footprint(k=3, b=2, ctx=1000, weight_bytes=1_000_000_000, kv_per_token=5120, overhead_bytes=100_000_000,
                     extra_kv_tokens=500)
    # 3 × 1 GB, 3 × 100 MB, 3 × (2 × 1,000 + 500) tokens × 5,120 B = 38,400,000
    assert (fp.k, fp.b, fp.weights, fp.overhead, fp.kv) == (3, 2, 3_000_000_000, 300_000_000, 38_400_000)
    assert fp.total == 3_338_400_000
    assert G.footprint(3, 2, 1000, 1_000_000_000, 5120, label_b=7).b == 7
    d = G.footprint(2, 1, 10, 0, 1.0)  # the default overhead: 100 MiB a worker; no extra tokens
    assert (d.overhead, d.kv, d.weights, d.total) == (2 * 104_857_600, 20, 0, 209_715_220)
    assert G.footprint(1, 1, 3, 0, 2.5, 0).kv == 7  # 7.5 B: whole bytes, down


def test_engine_footprint_by_mode() -> None:
    m = G.EngineMemory(b_cap=4, seq_ctx=1000, ctx=2000, weight_bytes=1_000_000_000, kv_per_token=5120,
                       overhead_bytes=100_000_000, seq_extra_bytes=2_000_000)
    # batch, B = 3 < b_cap 4: 4 sequences × 1,000 + the 2,000-token single stream, two workers: 2 × 6,000 × 5,120;
    # runtime 2 × 100 MB + 2 × 4 sequences × 2 MB
    assert G.engine_footprint("batch", 2, 3, m) == G.Footprint(2, 3, 2_000_000_000, 216_000_000, 61_440_000)
    # B = 6 above b_cap: 2 × (6,000 + 2,000) × 5,120; runtime 200 MB + 2 × 6 × 2 MB
    assert G.engine_footprint("batch", 2, 6, m) == G.Footprint(2, 6, 2_000_000_000, 224_000_000, 81_920_000)
    # instances: the single stream alone, no batch context nor its per-sequence bytes
    assert G.engine_footprint("instances", 2, 3, m) == G.Footprint(2, 3, 2_000_000_000, 200_000_000, 20_480_000)
    assert G.engine_footprint("http", 2, 3, m) == G.Footprint(2, 3, 0, 0, 0)
    d = G.EngineMemory(b_cap=4, seq_ctx=1000, ctx=2000, weight_bytes=1_000_000_000, kv_per_token=5120)
    # the defaults: 100 MiB of runtime, nothing a sequence beside its KV
    assert G.engine_footprint("batch", 1, 1, d) == G.Footprint(1, 1, 1_000_000_000, 104_857_600, 30_720_000)
    half = replace(m, seq_extra_bytes=0.75)  # 2 × 4 × 0.75 = 6 B
    assert G.engine_footprint("batch", 2, 1, half).overhead == 200_000_006


# ---- the budget on unified memory -------------------------------------------------------------------------
ASSUMED = "4.0 GiB assumed for macOS and other processes"


def test_unified_budget_working_set_or_what_is_left() -> None:
    # 64 GiB less the assumed 4: 60 left, above the 48 GiB working set
    assert G.unified_budget(64 * GiB, 48 * GiB, "rule") == (48 * GiB, f"GPU working set 48.0 GiB (rule); {ASSUMED}")
    # 20 GiB read held: 44 left, below the working set
    assert G.unified_budget(64 * GiB, 48 * GiB, "rule", 20 * GiB) == (
        44 * GiB, "64.0 GiB less 20.0 GiB read (vm_stat) for macOS and other processes (below the GPU working set "
        "48.0 GiB, rule)")
    # exactly the working set left: the working set; a byte less: what is left
    assert G.unified_budget(64 * GiB, 48 * GiB, "rule", 16 * GiB) == (
        48 * GiB, "GPU working set 48.0 GiB (rule); 16.0 GiB read (vm_stat) for macOS and other processes")
    assert G.unified_budget(64 * GiB, 48 * GiB, "rule", 16 * GiB + 1) == (
        48 * GiB - 1, "64.0 GiB less 16.0 GiB read (vm_stat) for macOS and other processes (below the GPU working "
        "set 48.0 GiB, rule)")
    # nothing held read as nothing (not assumed); more held than there is: 0
    assert G.unified_budget(64 * GiB, 48 * GiB, "rule", 0)[1] == ("GPU working set 48.0 GiB (rule); 0.0 GiB read "
                                                                  "(vm_stat) for macOS and other processes")
    assert G.unified_budget(64 * GiB, 48 * GiB, "rule", 70 * GiB) == (
        0, "64.0 GiB less 70.0 GiB read (vm_stat) for macOS and other processes (below the GPU working set 48.0 "
        "GiB, rule)")


def test_unified_budget_by_the_gpus_share() -> None:
    # none on the GPU: the RAM less what is held, the working set aside
    ram = (60 * GiB, f"64.0 GiB less {ASSUMED} (no layer on the GPU: its working set does not apply)")
    assert G.unified_budget(64 * GiB, 48 * GiB, "rule", gpu_share=0.0) == ram
    assert G.unified_budget(64 * GiB, 48 * GiB, "rule", gpu_share=-1.0) == ram
    assert G.unified_budget(64 * GiB, 48 * GiB, "rule", 70 * GiB, gpu_share=0.0)[0] == 0
    # a quarter on the GPU: the footprint may reach 12 ÷ 0.25 = 48 GiB
    assert G.unified_budget(64 * GiB, 12 * GiB, "rule", gpu_share=0.25) == (
        48 * GiB, f"GPU working set 48.0 GiB (rule; 25% of the footprint on the GPU); {ASSUMED}")
    # half: 48 ÷ 0.5 = 96 GiB, above the 60 left
    assert G.unified_budget(64 * GiB, 48 * GiB, "rule", gpu_share=0.5) == (
        60 * GiB, f"64.0 GiB less {ASSUMED} (below the GPU working set 96.0 GiB, rule; 50% of the footprint on the "
        "GPU)")
    # just under all of it: 42,949,672,960 ÷ 0.999 = 42,992,665,625.6 (whole bytes, down)
    assert G.unified_budget(64 * GiB, 40 * GiB, "rule", gpu_share=0.999)[0] == 42_992_665_625


def _mac(used: int | None) -> MacMemory:
    return MacMemory(total=64 * GiB, working_set=WorkingSet(40 * GiB, "mlx"), used=used, app=None, wired=None,
                     compressed=None, free_percent=None, swap_used=None, pressure_level=None)


def test_mac_budget_from_a_reading_or_the_default_rule() -> None:
    # read: 30 GiB used by others, 34 left below mlx's 40 GiB (the reading's total, not the one given)
    assert G.mac_budget(1, _mac(30 * GiB)) == (
        34 * GiB, "64.0 GiB less 30.0 GiB read (vm_stat) for macOS and other processes (below the GPU working set "
        "40.0 GiB, mlx)")
    # no Memory Used read: 4 GiB assumed, 60 left above 40
    assert G.mac_budget(1, _mac(None)) == (40 * GiB, f"GPU working set 40.0 GiB (mlx); {ASSUMED}")
    assert G.mac_budget(1, _mac(30 * GiB), gpu_share=0.5)[1].endswith("(below the GPU working set 80.0 GiB, mlx; "
                                                                      "50% of the footprint on the GPU)")
    # a Mac of 64 GiB not read: macOS's rule, 3/4 of it
    assert G.mac_budget(64 * GiB) == (48 * GiB, f"GPU working set 48.0 GiB (macOS's default rule: 75% of 64 GiB); "
                                                f"{ASSUMED}")
    assert G.mac_budget(64 * GiB, gpu_share=0.0) == (
        60 * GiB, f"64.0 GiB less {ASSUMED} (no layer on the GPU: its working set does not apply)")


# ---- admission --------------------------------------------------------------------------------------------
def test_admit_at_the_budget_and_a_byte_over() -> None:
    fp = G.Footprint(2, 3, weights=2 * GiB, overhead=GiB, kv=3 * GiB)
    assert fp.total == 6 * GiB
    assert G.admit(fp, 6 * GiB) is None and G.admit(fp, 7 * GiB) is None
    assert G.admit(fp, 6 * GiB - 1) == ("K=2 B=3 needs ≈ 6.0 GiB of 6.0 GiB budget (weights 2.0 GiB + runtime 1.0 GiB + "
                                        "KV 3.0 GiB); refused (--force or --memory-budget to override)")
    assert G.admit(fp, 5 * GiB).startswith("K=2 B=3 needs ≈ 6.0 GiB of 5.0 GiB budget (")


KILL = G.OomKill("batch", k=2, b=4, estimated=30 * GiB, budget=32 * GiB)


def test_oom_kill_covers_its_step_and_every_larger_one() -> None:
    assert KILL.covers("batch", 2, 4) and KILL.covers("batch", 3, 8) and KILL.covers("batch", 2, 5)
    assert not KILL.covers("batch", 1, 4) and not KILL.covers("batch", 2, 3) and not KILL.covers("batch", 1, 8)
    assert not KILL.covers("instances", 2, 4)


def test_oom_refusal_names_the_kill_and_the_step() -> None:
    assert KILL.refusal(3, 8) == (
        "the kernel's OOM killer ended a worker at K=2 B=4 batch earlier in this session (estimated 30.0 GiB fit the "
        "32.0 GiB budget): the estimate was too low there; K=3 B=8 is refused (--force to try anyway)")
    assert "(estimated 32.0 GiB fit the 32.0 GiB budget)" in replace(KILL, estimated=32 * GiB).refusal(2, 4)
    assert "(estimated 32.0 GiB exceeded the 32.0 GiB budget)" in replace(KILL, estimated=32 * GiB + 1).refusal(2, 4)
    other = G.OomKill("instances", 1, 1, 10 * GiB, 32 * GiB)
    later = G.OomKill("batch", 1, 1, 20 * GiB, 32 * GiB)
    # the first kill that covers the step
    assert G.oom_refusal([other, KILL, later], "batch", 3, 8) == KILL.refusal(3, 8)
    assert G.oom_refusal([other, later, KILL], "batch", 3, 8) == later.refusal(3, 8)
    assert G.oom_refusal([other, KILL], "batch", 1, 8) is None and G.oom_refusal([], "batch", 9, 9) is None


def test_overhead_after_oom_by_hand() -> None:
    fp = G.Footprint(2, 4, weights=2_000_000_000, overhead=200_000_000, kv=1_000_000_000)  # 3.2 GB
    # the overhead o with 2 GB + 2·o + 1 GB > 4 GB: o = ⌈(4 GB + 1 − 3 GB) ÷ 2⌉ = 500,000,001
    assert G.overhead_after_oom(fp, 4_000_000_000, 100_000_000) == 500_000_001
    assert G.overhead_after_oom(fp, 3_999_999_999, 100_000_000) == 500_000_000  # 1 GB ÷ 2 exactly
    assert G.overhead_after_oom(fp, 4_000_000_000, 600_000_000) == 600_000_000  # already above: kept
    # the footprint at the floor: raised by half a byte, up
    assert G.overhead_after_oom(fp, 3_200_000_000, 100_000_000) == 100_000_001
    # already above the floor: kept
    assert G.overhead_after_oom(fp, 3_199_999_999, 100_000_000) == 100_000_000
    one = G.Footprint(1, 1, 1_000_000_000, 100_000_000, 500_000_000)
    assert G.overhead_after_oom(one, 2_000_000_000, 100_000_000) == 500_000_001
    assert G.overhead_after_oom(replace(one, k=0), 2_000_000_000, 100_000_000) == 100_000_000  # no worker


def test_largest_fitting_by_hand() -> None:
    assert G.largest_fitting(1000, 100) == 10  # 10 × 100 = 1,000 ≤ 1,000
    assert G.largest_fitting(999, 100) == 9
    assert G.largest_fitting(1000, 100, 300) == 7 and G.largest_fitting(1000, 100, 301) == 6
    assert G.largest_fitting(10, 0.5) == 20
    assert G.largest_fitting(1000, 0) == 0 and G.largest_fitting(1000, -5) == 0
    assert G.largest_fitting(100, 100, 100) == 0 and G.largest_fitting(100, 100, 250) == 0  # not even one
    # a unit a hair above 23 ÷ 9: 9 of them make 23.000000000000004 > 23, so 8 fit (the quotient, rounded to 9.0,
    # would be one too many)
    assert 9 * 2.555555555555556 > 23 and G.largest_fitting(23, 2.555555555555556) == 8


# ---- the wall ---------------------------------------------------------------------------------------------
def _s(t: int = 0, swap_used: int = 0, swap_in: float = 0.0, source: str = "psi some avg10 %",
       pressure: float | None = None, total: int = 20 * GiB, available: int = 10 * GiB) -> SystemSample:
    return SystemSample(t, total, total - available, available, 4 * GiB, swap_used, swap_in, 0.0, source, pressure,
                        50.0)


def test_detect_wall_swap_growth_at_its_threshold() -> None:
    assert G.detect_wall(None, _s(), None, None, 0) is None
    # 10 MiB in the 2 s from 1 s to 3 s: 5 MiB/s
    assert G.detect_wall(_s(NS, 100 * MiB), _s(3 * NS, 110 * MiB), None, None, 0) == "swap growing 5.0 MiB/s"
    # 1 MiB in 1 s is the threshold, not above it; a byte more is
    assert G.detect_wall(_s(0, 100 * MiB), _s(NS, 101 * MiB), None, None, 0) is None
    assert G.detect_wall(_s(0, 100 * MiB), _s(NS, 101 * MiB + 1), None, None, 0) == "swap growing 1.0 MiB/s"
    # two samples at one time (or out of order): no rate
    assert G.detect_wall(_s(NS, 0), _s(NS, 50 * MiB), None, None, 0) is None
    assert G.detect_wall(_s(2 * NS, 0), _s(NS, 50 * MiB), None, None, 0) is None
    assert G.detect_wall(None, _s(NS, 50 * MiB), None, None, 0) is None
    th = G.WallThresholds(swap_growth_bps=10 * MiB)
    assert G.detect_wall(_s(0, 0), _s(NS, 10 * MiB), None, None, 0, th) is None


def test_detect_wall_swap_in_and_pressure() -> None:
    assert G.detect_wall(None, _s(swap_in=1.5 * MiB), None, None, 0) == "swapping in 1.5 MiB/s"
    assert G.detect_wall(None, _s(swap_in=1.0), None, None, 0) == "swapping in 0.0 MiB/s"  # any swap-in at all
    assert G.detect_wall(None, _s(swap_in=1.0), None, None, 0, G.WallThresholds(swap_in_bps=1.0)) is None
    # PSI: 10 % names the wall, 9.9 does not
    assert G.detect_wall(None, _s(pressure=10.0), None, None, 0) == "memory pressure 10 % (PSI some avg10)"
    assert G.detect_wall(None, _s(pressure=9.9), None, None, 0) is None
    assert G.detect_wall(None, _s(pressure=2.0), None, None, 0) is None  # a macOS level, read as PSI: low
    # macOS: level 2 (warn) names it, 1 (normal) does not; a PSI figure under another source is not read as one
    mac = "macOS kern.memorystatus_vm_pressure_level"
    assert G.detect_wall(None, _s(source=mac, pressure=2.0), None, None, 0) == "memory pressure level 2 (macOS)"
    assert G.detect_wall(None, _s(source=mac, pressure=4.0), None, None, 0) == "memory pressure level 4 (macOS)"
    assert G.detect_wall(None, _s(source=mac, pressure=1.0), None, None, 0) is None
    assert G.detect_wall(None, _s(source=mac, pressure=50.0), None, None, 0) == "memory pressure level 50 (macOS)"
    assert G.detect_wall(None, _s(source="none", pressure=50.0), None, None, 0) is None
    th = G.WallThresholds(pressure_psi=50.0, pressure_macos=5.0)
    assert G.detect_wall(None, _s(pressure=49.0), None, None, 0, th) is None
    assert G.detect_wall(None, _s(source=mac, pressure=4.0), None, None, 0, th) is None


def test_detect_wall_available_memory_at_five_percent() -> None:
    # 5 % of 20 GiB = 1 GiB: at it, not the wall; a byte under it, the wall
    assert G.detect_wall(None, _s(available=GiB), None, None, 0) is None
    assert G.detect_wall(None, _s(available=GiB - 1), None, None, 0) == "available memory 1.0 GiB < 5% of 20.0 GiB"
    assert G.detect_wall(None, _s(available=GiB // 2), None, None, 0) == "available memory 0.5 GiB < 5% of 20.0 GiB"
    assert G.detect_wall(None, _s(total=0, available=0), None, None, 0) is None  # no total read
    th = G.WallThresholds(available_fraction=0.5)
    assert G.detect_wall(None, _s(available=9 * GiB), None, None, 0, th) == ("available memory 9.0 GiB < 50% of 20.0 "
                                                                            "GiB")


def test_detect_wall_a_collapse_on_a_machine_short_of_memory() -> None:
    short = _s(pressure=1.0)  # 1 % PSI: short of memory, under the 10 % that names the wall alone
    assert G.detect_wall(None, short, 100.0, 30.0, 10.0) == "aggregate tok/s collapsed 100 → 30 after the last step"
    assert G.detect_wall(None, short, 100.0, 0.0, 10.0) == "aggregate tok/s collapsed 100 → 0 after the last step"
    assert G.detect_wall(None, short, 100.0, 49.9, 10.0) == "aggregate tok/s collapsed 100 → 50 after the last step"
    assert G.detect_wall(None, short, 100.0, 50.0, 10.0) is None  # half: not below half
    assert G.detect_wall(None, short, 100.0, 30.0, 9.9) is None  # before it settled
    assert G.detect_wall(None, short, None, 30.0, 10.0) is None and G.detect_wall(None, short, 0.0, 0.0, 10.0) is None
    assert G.detect_wall(None, short, 100.0, None, 10.0) is None
    assert G.detect_wall(None, _s(), 100.0, 30.0, 10.0) is None  # memory to spare: not the wall
    # the thresholds given: a shorter settling, a milder collapse, and "short" at half of the memory free
    th = G.WallThresholds(settle_s=1.0, collapse_ratio=0.8, short_fraction=0.6)
    assert G.detect_wall(None, _s(), 100.0, 70.0, 1.0, th) == "aggregate tok/s collapsed 100 → 70 after the last step"
    assert G.detect_wall(None, _s(), 100.0, 80.0, 1.0, th) is None


def test_short_of_memory_at_each_sign() -> None:
    assert G.short_of_memory(_s()) is False  # no swap, no pressure, 10 of 20 GiB free
    assert G.short_of_memory(_s(swap_used=1)) is True
    assert G.short_of_memory(_s(pressure=0.0)) is False and G.short_of_memory(_s(pressure=0.5)) is True
    # 20 % of 20 GiB = 4 GiB: at it, not short; a byte under it, short
    assert G.short_of_memory(_s(available=4 * GiB)) is False
    assert G.short_of_memory(_s(available=4 * GiB - 1)) is True
    assert G.short_of_memory(_s(total=0, available=0)) is False
    assert G.short_of_memory(_s(available=11 * GiB), G.WallThresholds(short_fraction=0.6)) is True
    assert G.short_of_memory(_s(available=12 * GiB), G.WallThresholds(short_fraction=0.6)) is False
