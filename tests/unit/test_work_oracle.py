"""core/work.py's readers by hand: a config.json, a GGUF's totals and a preset of a toy dense model and a toy mixture
of experts, each part's parameters and bytes worked out in the comments (benchmarks/mutation.py runs these against
the module's mutants)."""
from __future__ import annotations

import json

from dataclasses import replace
from pathlib import Path

import pytest

from engines.gguf_file import GGUFInfo
from measure.core import work as W
from presets import ModelPreset

DENSE = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000, "torch_dtype": "bfloat16",
         "tie_word_embeddings": False}
# h 64, 2 layers, 4 heads of 16 (64 ÷ 4), 2 KV heads: attention 2 × (2·64·4·16 + 2·64·2·16) = 24,576; MLP
# 2 × 3·64·128 = 49,152; norms 2·2·64 + 64 = 320; embedding and head 64,000 each: 202,048 parameters
DENSE_PARTS = {"embedding": 64000, "head": 64000, "attention": 24576, "mlp": 49152, "router": 0, "experts": 0,
               "norms": 320}

MOE = {"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
       "vocab_size": 1000, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
       "intermediate_size": 128, "first_k_dense_replace": 1, "n_shared_experts": 1,
       "shared_expert_intermediate_size": 16, "tie_word_embeddings": True, "torch_dtype": "float16"}
# KV heads = heads (4); 1 dense layer, 3 with experts; shared 1 × 32 + 16 = 48 wide; an expert 3·64·32 × 3 layers
# = 18,432; attention 4 × (2·64·4·16 × 2) = 65,536; MLP 3·64·128 + 3 × 3·64·48 = 52,224; router 3·8·64 = 1,536;
# experts 8 × 18,432 = 147,456; norms 4·2·64 + 64 = 576; tied: no head. 331,328 parameters
MOE_PARTS = {"embedding": 64000, "head": 0, "attention": 65536, "mlp": 52224, "router": 1536, "experts": 147456,
             "norms": 576}


def _cfg(cfg: dict[str, object], files: int = 0) -> W.ConfigFile:
    return W.ConfigFile(Path("/m/toy/config.json"), dict(cfg), files)


def test_config_shape_of_a_dense_config() -> None:
    sh = W._config_shape(DENSE)
    assert sh.parts == DENSE_PARTS and sh.params == 202048 and sh.embd == 64000
    assert (sh.heads, sh.kv, sh.hd, sh.layers, sh.vocab, sh.tied) == (4, 2, 16, 2, 1000, False)
    assert (sh.experts, sh.used, sh.expert_params, sh.dense_layers, sh.window, sh.mla, sh.state) == (0, 0, 0, 0, 0,
                                                                                                    0, 0.0)
    assert W.config_params(DENSE) == (202048, 64000)
    # attention biases: q (4·16), k and v (2 · 2·16) and o (64) a layer
    assert W._config_shape(DENSE | {"attention_bias": True}).parts["attention"] == 24576 + 2 * 192
    assert W._config_shape(DENSE | {"head_dim": 8}).hd == 8
    assert W._config_shape(DENSE | {"num_key_value_heads": None}).kv == 4


def test_config_shape_of_a_mixture_of_experts() -> None:
    sh = W._config_shape(MOE)
    assert sh.parts == MOE_PARTS and sh.params == 331328
    assert (sh.experts, sh.used, sh.expert_params, sh.dense_layers, sh.tied, sh.kv) == (8, 2, 18432, 1, True, 4)
    # the other names for the experts' count
    for key in ("num_local_experts", "n_routed_experts"):
        other = {k: v for k, v in MOE.items() if k != "num_experts"} | {key: 8}
        assert W._config_shape(other).parts == MOE_PARTS
    # no moe_intermediate_size: the experts as wide as the dense MLP
    wide = {k: v for k, v in MOE.items() if k != "moe_intermediate_size"}
    assert W._config_shape(wide).expert_params == 3 * 64 * 128 * 3


def test_config_needs_its_shape() -> None:
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        with pytest.raises(ValueError) as e:
            W._config_shape({k: v for k, v in DENSE.items() if k != key})
        assert str(e.value) == f"the config has no {key} (and its model_type 'llama' has no default known here)"
    assert W._n({"a": None, "b": "3"}, "a", "b") == 3 and W._n({}, "a") == 0


def test_layer_kinds() -> None:
    types = ["sliding_attention", "full_attention", "linear_attention", "sliding_attention"]
    assert W._layer_kinds({"layer_types": types, "sliding_window": 512}, 4) == (512, 2, 1)
    assert W._layer_kinds({"layer_types": ["full_attention"] * 2, "sliding_window": 512}, 2) == (0, 0, 0)
    # a pattern of 3: layers 0, 1 slide, 2 full, 3, 4 slide, 5 full
    assert W._layer_kinds({"sliding_window": 256, "sliding_window_pattern": 3}, 6) == (256, 4, 0)
    assert W._layer_kinds({"sliding_window": 256}, 6) == (0, 0, 0)
    assert W._layer_kinds({"sliding_window": 256, "sliding_window_pattern": 3, "use_sliding_window": False}, 6) == \
        (0, 0, 0)
    assert W._layer_kinds({"layer_types": types, "sliding_window": 512, "use_sliding_window": False}, 4) == (0, 2, 1)


def test_from_config_of_a_dense_model_without_weights() -> None:
    w = W.from_config(_cfg(DENSE))
    # bf16: 2 B a parameter; untied: the embedding a lookup (a row of 64 × 2 B a sequence)
    assert (w.params, w.file_bytes, w.weight_bytes) == (202048, 404096, 404096 - 128000)
    assert (w.embd_row_bytes, w.matmul_params) == (128.0, 202048 - 64000)
    assert (w.layers, w.heads, w.kv_heads, w.head_dim, w.kv_element_bytes) == (2, 4, 2, 16, 2.0)
    assert (w.name, w.source, w.experts, w.assumed) == ("toy", "config /m/toy/config.json", None, ())
    assert w.note == ("untied: the input embedding (0.00 GB) is a lookup, one row per sequence (excluded); no "
                      "weights beside the config: 0.00 GB = parameters × bfloat16 (2 B a weight)")
    assert W.from_config(_cfg(DENSE | {"_name_or_path": "org/toy"})).name == "org/toy"
    assert W.from_config(_cfg(DENSE | {"torch_dtype": "float32"})).kv_element_bytes == 4.0


def test_from_config_of_a_mixture_of_experts() -> None:
    w = W.from_config(_cfg(MOE))
    e = w.experts
    assert e is not None
    # f16: 2 B a parameter; an expert's bytes 2 × 147,456 ÷ 8; routed over the 3 layers with experts
    assert (e.count, e.used, e.bytes_each, e.params_each, e.correlation, e.layers) == (
        8, 2, 36864.0, 18432, W.ROUTING_CORRELATION, 3)
    assert w.weight_bytes == 2 * 331328 - 2 * 147456 and w.embd_row_bytes == 0.0
    assert w.matmul_params == 331328 - 147456 and w.moe_layers == 3
    assert w.assumed == (W.ROUTING_ASSUMED,)
    assert w.note.startswith("tied embedding: the output projection reads it whole every step (counted); ")
    # no experts per token: every expert counted as read, and said
    unsure = W.from_config(_cfg({k: v for k, v in MOE.items() if k != "num_experts_per_tok"}))
    assert unsure.experts is None and unsure.weight_bytes == 2 * 331328
    assert unsure.assumed == ("num_experts_per_tok not in the config: every expert counted as read",)


def test_from_config_windows_latent_attention_and_linear_state() -> None:
    swa = W.from_config(_cfg(DENSE | {"sliding_window": 128, "sliding_window_pattern": 2}))
    assert (swa.window, swa.window_layers) == (128, 1) and swa.assumed == ()
    flat = W.from_config(_cfg(DENSE | {"sliding_window": 128}))
    assert flat.window_layers == 0 and flat.assumed == (
        "sliding_window 128 without layer_types or a pattern: every layer counted as full attention",)
    assert W.from_config(_cfg(DENSE | {"sliding_window": 128, "use_sliding_window": False})).assumed == ()
    mla = W.from_config(_cfg(DENSE | {"kv_lora_rank": 512, "qk_rope_head_dim": 64}))
    assert mla.mla_dim == 576 and mla.kv_layer_token_bytes == 576 * 2.0
    assert W.from_config(_cfg(DENSE | {"qk_rope_head_dim": 64})).mla_dim == 0
    lin = DENSE | {"layer_types": ["linear_attention", "full_attention"], "linear_num_value_heads": 4,
                   "linear_key_head_dim": 8, "linear_value_head_dim": 8}
    w = W.from_config(_cfg(lin))
    # one linear layer: 4 heads × 8 × 8 fp32
    assert (w.linear_layers, w.state_bytes) == (1, 4 * 8 * 8 * 4.0)
    bare = W.from_config(_cfg(DENSE | {"layer_types": ["linear_attention", "full_attention"]}))
    assert bare.assumed == ("1 linear-attention layers without their head sizes: state counted as 0",)


def test_safetensors_beside_the_config() -> None:
    # within a quarter of what the config prices (404,096 B): the config's precision, the files' size
    w = W.from_config(_cfg(DENSE, files=450_000))
    assert w.file_bytes == 450_000 and w.weight_bytes == 404096 - 128000
    assert w.note.endswith("; bfloat16 (2 B a weight); the safetensors 0.00 GB") and w.assumed == ()
    # beyond it: every weight at the files' average bytes (600,000 ÷ 202,048)
    far = W.from_config(_cfg(DENSE, files=600_000))
    per = 600_000 / 202048
    assert far.weight_bytes == int(600_000 - 64000 * per) and far.embd_row_bytes == pytest.approx(64 * per)
    assert far.assumed == (f"the config prices its 0.00 B parameters at 0.00 GB (bfloat16 (2 B a weight)); the "
                           f"safetensors beside it hold 0.00 GB: every weight priced at their average, {per:.3f} B",)
    # a precision not priced here: with files, their average; without, refused
    odd = DENSE | {"quantization_config": {"quant_method": "bitsandbytes"}}
    w = W.from_config(_cfg(odd, files=300_000))
    assert w.assumed[0].startswith("quantization_config quant_method 'bitsandbytes' is not one this reader prices "
                                   "(mxfp4, fp8, awq, gptq, mlx-lm's quantization); the safetensors beside it hold")
    with pytest.raises(ValueError, match="bitsandbytes"):
        W.from_config(_cfg(odd))


def test_work_from_dict_round_trips() -> None:
    from dataclasses import asdict

    w = W.from_config(_cfg(MOE))
    assert W.work_from_dict(asdict(w)) == w
    assert W.work_from_dict(asdict(w) | {"unknown": 1}) == w
    # as JSON gives it back (lists, not tuples): the types' bytes a CPU step's path is chosen by, too
    typed = replace(w, matmul_type_bytes=(("Q4_K", 10), ("Q8_0", 20)))
    assert W.work_from_dict(json.loads(json.dumps(asdict(typed)))) == typed
    with pytest.raises(ValueError, match="^not a work model as inference-top wrote it: "):
        W.work_from_dict({"name": "x"})


def _info(**kw: object) -> GGUFInfo:
    base: dict[str, object] = dict(path="/m/toy.gguf", file_bytes=1_100_000, architecture="llama", name="toy",
                                   layers=2, kv_heads=2, head_dim=16, context_length=4096, tensor_bytes=1_000_000,
                                   params=2_000_000, embd_bytes=200_000, embd_params=400_000, tied=False, heads=4,
                                   hidden=64, vocab=1000)
    return GGUFInfo(**(base | kw))  # type: ignore[arg-type]


def test_from_gguf_dense_untied_and_tied() -> None:
    w = W.from_gguf(_info())
    # untied: the embedding (200 kB) a lookup, 200 B a row; its parameters not multiplied
    assert (w.weight_bytes, w.embd_row_bytes, w.matmul_params, w.file_bytes) == (800_000, 200.0, 1_600_000,
                                                                                1_100_000)
    assert (w.layers, w.heads, w.kv_heads, w.head_dim, w.kv_element_bytes) == (2, 4, 2, 16, 2.0)
    assert (w.name, w.source, w.experts, w.assumed) == ("toy", "GGUF /m/toy.gguf", None, ())
    t = W.from_gguf(_info(tied=True), kv_element_bytes=1.0)
    assert (t.weight_bytes, t.embd_row_bytes, t.matmul_params, t.kv_element_bytes) == (1_000_000, 0.0, 2_000_000,
                                                                                      1.0)
    assert W.from_gguf(_info(vocab=None)).embd_row_bytes == 0.0
    assert W.from_gguf(_info(heads=None)).heads == 2
    assert W.from_gguf(_info(architecture="mystery")).assumed[0].startswith("architecture 'mystery' is not one")
    for missing in ("tensor_bytes", "params", "layers", "kv_heads", "head_dim"):
        with pytest.raises(ValueError, match="lacks the tensor totals or attention shape"):
            W.from_gguf(_info(**{missing: None}))


def test_from_gguf_experts_windows_and_the_rest() -> None:
    w = W.from_gguf(_info(experts=8, experts_used=2, expert_bytes=400_000, expert_params=800_000, moe_layers=2))
    e = w.experts
    assert e is not None and (e.count, e.used, e.bytes_each, e.params_each, e.layers) == (8, 2, 50_000, 100_000, 2)
    assert e.correlation == W.ROUTING_CORRELATION and w.assumed == (W.ROUTING_ASSUMED,)
    assert (w.weight_bytes, w.matmul_params) == (400_000, 800_000)
    said = W.from_gguf(_info(experts=8, experts_used=2, expert_bytes=400_000, expert_params=800_000,
                             routing_correlation=0.0))
    assert said.experts is not None and said.experts.correlation == 0.0 and said.assumed == ()
    # experts without how many a token uses: all read every step
    flat = W.from_gguf(_info(experts=8, expert_bytes=400_000, expert_params=800_000))
    assert flat.experts is None and flat.weight_bytes == 800_000 and flat.matmul_params == 1_600_000
    win = W.from_gguf(_info(sliding_window=512, window_layers=1, linear_layers=1, state_bytes=99.0, mla_dim=7,
                            assumed=("x",)))
    assert (win.window, win.window_layers, win.linear_layers, win.state_bytes, win.mla_dim, win.assumed) == (
        512, 1, 1, 99.0, 7, ("x",))


def test_from_preset_dense_and_moe() -> None:
    # 1 G parameters in 2 GB (2 B each); vocab 1000 × hidden 100 = 100 k embedding parameters (200 kB), untied
    dense = ModelPreset(key="d", name="D", params=1_000_000_000, weight_bytes=2_000_000_000, layers=4, kv_heads=2,
                        head_dim=16, hidden=100, heads=8, vocab=1000, quant="Q8_0")
    w = W.from_preset(dense)
    assert (w.weight_bytes, w.embd_row_bytes, w.matmul_params, w.file_bytes) == (2_000_000_000 - 200_000, 200.0,
                                                                                999_900_000, 2_000_000_000)
    assert (w.heads, w.quant, w.source, w.assumed, w.experts) == (8, "Q8_0", "preset d", (), None)
    tied = W.from_preset(ModelPreset(key="t", name="T", params=1_000_000_000, weight_bytes=2_000_000_000, layers=4,
                                     kv_heads=2, head_dim=16, hidden=100, vocab=1000, tied_embeddings=True,
                                     file_bytes=2_100_000_000), kv_element_bytes=1.0)
    assert (tied.weight_bytes, tied.embd_row_bytes, tied.matmul_params, tied.file_bytes, tied.heads,
            tied.kv_element_bytes) == (2_000_000_000, 0.0, 1_000_000_000, 2_100_000_000, 2, 1.0)
    # 8 experts of 3 × 100 × 50 × 3 layers (4 less 1 dense) = 45,000 parameters each, at 2 B: 90 kB each
    moe = ModelPreset(key="m", name="M", params=1_000_000, weight_bytes=2_000_000, layers=4, kv_heads=2, head_dim=16,
                      hidden=100, vocab=1000, tied_embeddings=True, experts=8, experts_used=2, expert_ffn=50,
                      dense_layers=1)
    w = W.from_preset(moe)
    e = w.experts
    assert e is not None and (e.count, e.used, e.params_each, e.layers) == (8, 2, 45_000, 3)
    assert e.bytes_each == pytest.approx(90_000) and e.correlation == W.ROUTING_CORRELATION
    assert w.weight_bytes == 2_000_000 - 8 * 90_000 and w.matmul_params == 1_000_000 - 8 * 45_000
    assert w.assumed == (W.ROUTING_ASSUMED,)
    # the experts' own bytes given (MXFP4 beside Q8_0): 400 kB over 8; the embedding at the rest's bytes a weight:
    # (2,000,000 − 400,000) ÷ (1,000,000 − 360,000) = 2.5 B, untied: 100 k × 2.5 out of the always-read bytes
    ex = W.from_preset(ModelPreset(key="x", name="X", params=1_000_000, weight_bytes=2_000_000, layers=4, kv_heads=2,
                                   head_dim=16, hidden=100, vocab=1000, experts=8, experts_used=2, expert_ffn=50,
                                   dense_layers=1, expert_bytes=400_000, routing_correlation=0.3))
    assert ex.experts is not None and ex.experts.bytes_each == 50_000 and ex.experts.correlation == 0.3
    assert ex.weight_bytes == int(2_000_000 - 100_000 * 2.5 - 400_000) and ex.embd_row_bytes == 250.0
    assert ex.assumed == ()
    # windows kept by all but the full layers, linear layers, latent attention
    swa = W.from_preset(ModelPreset(key="s", name="S", params=1000, weight_bytes=2000, layers=6, kv_heads=1,
                                    head_dim=4, sliding_window=512, full_attention_layers=1,
                                    linear_attention_layers=2, kv_lora_rank=32, qk_rope_head_dim=8))
    assert (swa.window, swa.window_layers, swa.linear_layers, swa.mla_dim) == (512, 3, 2, 40)
    no_full = W.from_preset(ModelPreset(key="s", name="S", params=1000, weight_bytes=2000, layers=6, kv_heads=1,
                                        head_dim=4, sliding_window=512, qk_rope_head_dim=8))
    assert (no_full.window, no_full.window_layers, no_full.mla_dim) == (0, 0, 0)


def test_quant_family() -> None:
    assert [W.quant_family(q) for q in ("Q4_K_M", " q6_k ", "Q4_0", "Q8_0", "F16", "BF16", "MXFP4", "IQ4_NL", "",
                                        "weird")] == ["k", "k", "legacy", "legacy", "float", "float", "mxfp4", "iq",
                                                      "", ""]


def test_small_rules_of_the_work_model() -> None:
    from dataclasses import replace

    toy = W.from_config(_cfg(DENSE))
    # a window without windowed layers is no window: the cache and the allocation as full attention
    half = replace(toy, window=128, window_layers=0)
    assert half.window_cache_cells() == 0 and half.kv_alloc_bytes(1000) == 2 * 1000 * 2 * 2 * 16 * 2
    # the linear layers' state is added to what a step reads
    lin = replace(toy, linear_layers=1, state_bytes=1000.0)
    assert lin.kv_read_bytes(10) == 1 * 10 * 2 * 2 * 16 * 2 + 1000.0
    # dtype (newer configs) for the KV's element bytes where torch_dtype is not given
    cfg = {k: v for k, v in DENSE.items() if k != "torch_dtype"} | {"dtype": "float32"}
    assert W.from_config(_cfg(cfg)).kv_element_bytes == 4.0
    assert W.from_config(_cfg({k: v for k, v in DENSE.items() if k != "torch_dtype"})).kv_element_bytes == 2.0


def test_gguf_and_preset_defaults_where_the_source_is_silent() -> None:
    w = W.from_gguf(_info(embd_params=None))
    assert w.matmul_params == 2_000_000 and (w.window, w.window_layers, w.linear_layers, w.mla_dim) == (0, 0, 0, 0)
    # experts without their layers counted: every layer routes
    e = W.from_gguf(_info(experts=8, experts_used=2, expert_bytes=400_000, expert_params=800_000))
    assert e.experts is not None and e.experts.layers == 0 and e.moe_layers == 2
    # a preset with experts but not how many a token uses: dense
    no_used = ModelPreset(key="m", name="M", params=1_000_000, weight_bytes=2_000_000, layers=4, kv_heads=2,
                          head_dim=16, hidden=100, vocab=1000, tied_embeddings=True, experts=8, expert_ffn=50)
    w = W.from_preset(no_used)
    assert w.experts is None and w.weight_bytes == 2_000_000 and w.matmul_params == 1_000_000
    # the note names the embedding's bytes: 100,000 × 5,000 parameters at 2 B
    big = ModelPreset(key="b", name="B", params=10_000_000_000, weight_bytes=20_000_000_000, layers=4, kv_heads=2,
                      head_dim=16, hidden=5000, vocab=100_000)
    w = W.from_preset(big)
    assert w.note == "untied: the input embedding (1.00 GB) is a lookup, one row per sequence (excluded)"
    assert (w.name, w.params) == ("B", 10_000_000_000)
    assert W.from_gguf(_info(embd_bytes=3_000_000_000, tensor_bytes=4_000_000_000)).note == (
        "untied: the input embedding (3.00 GB) is a lookup, one row per sequence (excluded)")
    assert W.from_gguf(_info(tied=True)).note == ("tied embedding: the output projection reads it whole every step "
                                                  "(counted)")


def test_experts_of_no_tokens_and_of_a_fraction_of_one() -> None:
    # no tokens read no expert, before any arithmetic: not even an Experts of no count divides by its count
    assert W.Experts(0, 0, 0.0, 0.0).distinct(0) == 0.0
    # a fraction of a token (a mean batch under one) has no design effect: B′ = B = 0.5, not 0.5 ÷ (1 − 0.5·0.5);
    # E = 2, k = 1: 2 · (1 − (1 − 1/2)^0.5) = 2 − √2 ≈ 0.5858 (the design effect would give 2·(1 − 0.5^⅔) ≈ 0.7401)
    assert W.Experts(2, 1, 0.0, 0.0, correlation=0.5).distinct(0.5) == pytest.approx(2 - 2 ** 0.5, abs=1e-12)


def test_the_defaults_of_one_sequence_at_no_context() -> None:
    toy = W.from_config(_cfg(DENSE))
    # one sequence: 404,096 − 128,000 always-read + one 128 B embedding row = 276,224
    assert toy.read_bytes() == 276_224.0
    # no context: 2 FLOP × the 138,048 weights multiplied, no attention
    assert toy.flops_per_token() == 276_096.0
    moe = W.from_config(_cfg(MOE))
    # one token reads its k = 2 experts (8 · (1 − (1 − 2/8)^1) = 2): 183,872 dense + 2 × 18,432 = 220,736
    assert moe.matmul_weights() == 220_736.0


def test_kv_allocation_of_windowed_layers_without_a_window_and_a_layout_not_known() -> None:
    # a file that names windowed layers but no window (window 0): they hold the whole context in every layout;
    # 2 layers, both windowed: (0 · 1000 + 2 · 1000) × 128 B (2 · 2 KV heads · 16 · 2 B) = 256,000
    blind = replace(W.from_config(_cfg(DENSE)), window=0, window_layers=2)
    for layout in W.KV_LAYOUTS:
        assert blind.kv_alloc_bytes(1000, layout) == 256_000.0
    assert blind.window_cache_cells() == 0 and blind.kv_read_bytes(1000) == 256_000.0
    with pytest.raises(ValueError) as e:
        blind.kv_alloc_bytes(1000, "paged")
    assert str(e.value) == "unknown KV layout 'paged'; one of llama.cpp-window, llama.cpp-full, mlx, full"
    # windowed layers named without a sliding_window: no window
    assert W._layer_kinds({"layer_types": ["sliding_attention", "full_attention"]}, 2) == (0, 1, 0)


def test_from_gguf_where_its_totals_are_partial() -> None:
    # no embedding bytes: nothing taken out of the 1,000,000 B, rows of 0 B; its 400,000 parameters still are
    w = W.from_gguf(_info(embd_bytes=None))
    assert (w.weight_bytes, w.embd_row_bytes, w.matmul_params) == (1_000_000, 0.0, 1_600_000)
    assert W.from_gguf(_info(architecture="mystery")).assumed == (
        "architecture 'mystery' is not one this model of work knows: read as its file says (experts from "
        "ffn_*_exps tensors, a window only where a pattern is given), the rest as dense full attention",)
    # experts without their bytes: no routing known, all read (1,000,000 − 200,000), all multiplied (2 M − 400 k)
    nob = W.from_gguf(_info(experts=8, experts_used=2, expert_params=800_000))
    assert nob.experts is None and (nob.weight_bytes, nob.matmul_params) == (800_000, 1_600_000)
    # experts' bytes without their parameters: 0 parameters an expert; 1,000,000 − 200,000 − 400,000 read always
    nop = W.from_gguf(_info(experts=8, experts_used=2, expert_bytes=400_000))
    assert nop.experts is not None and (nop.experts.bytes_each, nop.experts.params_each) == (50_000, 0.0)
    assert (nop.weight_bytes, nop.matmul_params) == (400_000, 1_600_000)
    typed = W.from_gguf(_info(matmul_type_bytes=(("Q4_K", 600_000), ("Q8_0", 200_000))))
    assert typed.matmul_type_bytes == (("Q4_K", 600_000), ("Q8_0", 200_000))


def _shape(params: int) -> W.ConfigShape:
    """The dense toy's shape with all its `params` in one part (bf16: 2 B each)."""
    return replace(W._config_shape(DENSE), params=params, parts={"embedding": params})


def test_part_bytes_notes_and_the_tolerance_at_its_edge() -> None:
    # 187,500,000 parameters × 2 B = 375,000,000 B: 0.375 GB exactly, "0.38" (0.374999… would be "0.37")
    sized, how, assumed = W._part_bytes(_cfg(DENSE), _shape(187_500_000))
    assert sized == {"embedding": 375_000_000.0} and assumed == []
    assert how == "no weights beside the config: 0.38 GB = parameters × bfloat16 (2 B a weight)"
    assert W._part_bytes(_cfg(DENSE, 375_000_000), _shape(187_500_000))[1] == (
        "bfloat16 (2 B a weight); the safetensors 0.38 GB")
    # files 500,000,000: |500 M − 375 M| = 125 M = 0.25 × 500 M, on the edge: still the config's precision
    sized, how, _ = W._part_bytes(_cfg(DENSE, 500_000_000), _shape(187_500_000))
    assert sized == {"embedding": 375_000_000.0} and how == "bfloat16 (2 B a weight); the safetensors 0.50 GB"
    # 375,000,000 parameters priced at 750 MB, files 375 MB (beyond a quarter): 1 B each, the files' average
    sized, how, assumed = W._part_bytes(_cfg(DENSE, 375_000_000), _shape(375_000_000))
    assert sized == {"embedding": 375_000_000.0} and how == "the safetensors' 0.38 GB"
    assert assumed == ["the config prices its 0.38 B parameters at 0.75 GB (bfloat16 (2 B a weight)); the "
                       "safetensors beside it hold 0.38 GB: every weight priced at their average, 1.000 B"]
    # 187,500,000 parameters at 375 MB, files 1 GB: 1e9 ÷ 187.5e6 = 5.333 B each
    assert W._part_bytes(_cfg(DENSE, 1_000_000_000), _shape(187_500_000))[2] == [
        "the config prices its 0.19 B parameters at 0.38 GB (bfloat16 (2 B a weight)); the safetensors beside it "
        "hold 1.00 GB: every weight priced at their average, 5.333 B"]


def test_from_config_unrouted_experts_and_a_dtype_not_priced() -> None:
    # no experts per token: every expert read and multiplied, none taken out of the 331,328 (tied: nor the embedding)
    unsure = W.from_config(_cfg({k: v for k, v in MOE.items() if k != "num_experts_per_tok"}))
    assert unsure.experts is None and unsure.matmul_params == 331328
    # a torch_dtype not priced here, safetensors beside it: the KV at 2 B (bf16), not the dtype's
    assert W.from_config(_cfg(DENSE | {"torch_dtype": "float8_e4m3fn"}, files=450_000)).kv_element_bytes == 2.0


def _preset(**kw: object) -> ModelPreset:
    base: dict[str, object] = dict(key="p", name="P", params=1_000_000, weight_bytes=2_000_000, layers=4, kv_heads=2,
                                   head_dim=16, hidden=100, vocab=1000)
    return ModelPreset(**(base | kw))  # type: ignore[arg-type]


def test_from_preset_where_it_is_partial() -> None:
    # experts used and their width without a count, or a count and used without a width: dense, nothing taken out
    for part in (dict(experts_used=2, expert_ffn=50), dict(experts=8, experts_used=2)):
        w = W.from_preset(_preset(tied_embeddings=True, **part))
        assert w.experts is None and (w.weight_bytes, w.matmul_params) == (2_000_000, 1_000_000)
    # the experts' bytes but no experts used: not routed, so the embedding at the file's 2 B a weight (not
    # (2,000,000 − 400,000) ÷ 1,000,000 = 1.6): a row of 100 × 2 B, 2,000,000 − 100,000 × 2 read always
    w = W.from_preset(_preset(experts=8, expert_ffn=50, expert_bytes=400_000))
    assert w.experts is None and (w.embd_row_bytes, w.weight_bytes) == (200.0, 1_800_000)
    # full layers said, no window: none windowed; a latent rank without rope dims: 32
    w = W.from_preset(_preset(full_attention_layers=1, kv_lora_rank=32))
    assert (w.window, w.window_layers, w.mla_dim) == (0, 0, 32)
    assert W.from_preset(_preset(tied_embeddings=True)).note == (
        "tied embedding: the output projection reads it whole every step (counted)")
