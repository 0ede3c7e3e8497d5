"""core/hf_config.py by hand: each quantization method's bytes a weight worked out here from its format, which parts it
converts, what a multimodal config hands its text model and what the architecture's defaults fill in, each case
with the words a user reads in `assumed` (benchmarks/mutation.py runs these against the module's mutants)."""
from __future__ import annotations

import pytest

from measure.core import hf_config as H

LINEAR = {"attention", "mlp", "router", "experts", "head"}


# ---- precision(): the dense dtype ------------------------------------------------------------------------
def test_no_dtype_reads_as_bf16_and_says_so() -> None:
    p = H.precision({})
    assert (p.dense, p.quant, p.converted) == (2.0, 2.0, frozenset())
    assert p.what == "bf16 (2 B a weight)"
    assert p.assumed == ("no torch_dtype or dtype in the config: the weights outside any quantization read as bf16 (2 B)",)


@pytest.mark.parametrize("key", ["torch_dtype", "dtype"])
@pytest.mark.parametrize("name,size", [("float32", 4.0), ("float16", 2.0), ("bfloat16", 2.0)])
def test_either_dtype_key_gives_its_bytes(key: str, name: str, size: float) -> None:
    p = H.precision({key: name})
    assert (p.dense, p.quant, p.converted, p.assumed) == (size, size, frozenset(), ())
    assert p.what == f"{name} ({size:g} B a weight)"
    assert p.of("mlp") == p.of("norms") == size


def test_torch_dtype_wins_over_dtype() -> None:
    assert H.precision({"torch_dtype": "float32", "dtype": "float16"}).dense == 4.0


def test_an_unknown_dtype_is_refused_naming_the_known() -> None:
    with pytest.raises(ValueError) as e:
        H.precision({"torch_dtype": "int8"})
    assert str(e.value) == "torch_dtype 'int8' is not one of float32, float16, bfloat16"


# ---- precision(): each quantization method ----------------------------------------------------------------
def test_mlx_quantization_bits_and_a_16_bit_scale_and_bias_a_group() -> None:
    # 4 bits + (2 B scale + 2 B bias) per 64 weights = 0.5 + 4/64 = 0.5625 B; every part but the norms
    p = H.precision({"torch_dtype": "bfloat16", "quantization": {"bits": 4, "group_size": 64}})
    assert p.quant == pytest.approx(0.5625) and p.dense == 2.0
    assert p.converted == frozenset(H.PARTS) - {"norms"}
    assert p.what == "mlx 4-bit, group 64: 0.5625 B a weight"
    assert p.of("embedding") == pytest.approx(0.5625) and p.of("norms") == 2.0
    # 8 bits, group 32: 1 + 4/32 = 1.125
    assert H.precision({"quantization": {"bits": 8, "group_size": 32}}).quant == pytest.approx(1.125)
    # mlx-lm's defaults where the block is empty: 4 bits, group 64
    assert H.precision({"quantization": {}}).quant == pytest.approx(0.5625)
    assert H.precision({"quantization": {"bits": 3}}).quant == pytest.approx(3 / 8 + 4 / 64)
    assert H.precision({"quantization": {"group_size": 32}}).quant == pytest.approx(0.5 + 4 / 32)


def test_mlx_copy_beside_a_quant_method_reads_the_method() -> None:
    # mlx-lm copies quantization into quantization_config; a real quant_method there is the file's own
    p = H.precision({"torch_dtype": "bfloat16", "quantization": {"bits": 4, "group_size": 64},
                     "quantization_config": {"quant_method": "fp8"}})
    assert p.quant == 1.0 and p.converted == frozenset(LINEAR)
    # a quantization_config with no quant_method beside mlx's block: mlx's
    p2 = H.precision({"quantization": {"bits": 4, "group_size": 64}, "quantization_config": {"bits": 4}})
    assert p2.what.startswith("mlx 4-bit")


def test_mxfp4_prices_the_experts_at_4_25_bits() -> None:
    # 32 four-bit values and one 8-bit scale: (32 × 4 + 8) / 32 = 4.25 bits = 17/32 B
    p = H.precision({"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "mxfp4"}})
    assert p.quant == pytest.approx(17 / 32) and p.converted == frozenset({"experts"})
    assert p.what == "MXFP4 experts (4.25 bits a weight), the rest bfloat16 (2 B a weight)"
    assert p.of("experts") == pytest.approx(17 / 32) and p.of("attention") == 2.0
    kept = H.precision({"quantization_config": {"quant_method": "mxfp4",
                                                "modules_to_not_convert": ["model.layers.*.mlp.experts"]}})
    assert kept.converted == frozenset()
    assert kept.assumed and kept.assumed[0].startswith("no torch_dtype")


def test_fp8_converts_every_matrix_but_what_it_keeps() -> None:
    p = H.precision({"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8"}})
    assert (p.dense, p.quant, p.converted, p.assumed) == (2.0, 1.0, frozenset(LINEAR), ())
    assert p.what == "fp8 matrices (1 B a weight), the rest bfloat16 (2 B a weight)"
    q = H.precision({"torch_dtype": "bfloat16",
                     "quantization_config": {"quant_method": "fp8", "modules_to_not_convert": ["lm_head"]}})
    assert q.converted == frozenset(LINEAR - {"head"})
    assert q.of("head") == 2.0 and q.of("mlp") == 1.0
    assert H.precision({"quantization_config": {"quant_method": "fp8"}}).assumed[0].startswith("no torch_dtype")


@pytest.mark.parametrize("method", ["awq", "gptq"])
def test_awq_and_gptq_bits_a_16_bit_scale_and_a_packed_zero_a_group(method: str) -> None:
    # 4 bits, group 128: 0.5 + (2 + 0.5) / 128 = 0.51953125 B; the embeddings and the output projection stay dense
    p = H.precision({"torch_dtype": "float16", "quantization_config": {"quant_method": method, "bits": 4,
                                                                        "group_size": 128}})
    assert p.quant == pytest.approx(0.51953125) and p.converted == frozenset(LINEAR - {"head"})
    assert p.what == f"{method} 4-bit, group 128 (0.5195 B a weight), embeddings float16 (2 B a weight)"
    assert p.assumed == ()
    # AutoAWQ's own keys: w_bit and q_group_size; 8 bits, group 64: 1 + 3/64
    p8 = H.precision({"torch_dtype": "float16", "quantization_config": {"quant_method": method, "w_bit": 8,
                                                                         "q_group_size": 64}})
    assert p8.quant == pytest.approx(1 + 3 / 64)
    # bits before w_bit, group_size before q_group_size
    both = H.precision({"quantization_config": {"quant_method": method, "bits": 8, "w_bit": 2, "group_size": 32,
                                                "q_group_size": 256}})
    assert both.quant == pytest.approx(1 + 3 / 32)
    # neither said: 4 bits, group 128
    assert H.precision({"quantization_config": {"quant_method": method}}).quant == pytest.approx(0.51953125)
    assert H.precision({"quantization_config": {"quant_method": method}}).assumed[0].startswith("no torch_dtype")
    kept = H.precision({"quantization_config": {"quant_method": method, "modules_to_not_convert": ["self_attn"]}})
    assert kept.converted == frozenset({"mlp", "router", "experts"})


def test_a_method_not_priced_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as e:
        H.precision({"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "bitsandbytes"}})
    assert str(e.value) == ("quantization_config quant_method 'bitsandbytes' is not one this reader prices (mxfp4, "
                            "fp8, awq, gptq, mlx-lm's quantization): put the weights (*.safetensors) beside the config")
    with pytest.raises(ValueError, match="quant_method '' is not one"):
        H.precision({"quantization_config": {"bits": 4}})


@pytest.mark.parametrize("names,kept", [
    (["model.embed_tokens"], {"embedding"}),
    (["lm_head"], {"head"}),
    (["model.layers.0.self_attn"], {"attention"}),
    (["model.layers.0.mlp.router"], {"router"}),
    (["model.layers.0.mlp.experts"], {"experts"}),
    (["model.layers.0.mlp.gate"], {"router"}),
    (["model.layers.0.block_sparse_moe.gate"], {"router"}),
    (["model.layers.0.mlp"], {"mlp", "experts", "router"}),
    (["lm_head", "model.embed_tokens"], {"head", "embedding"}),
    (["lm_head", "model.layers.0.mlp"], {"head", "mlp", "experts", "router"}),
    (["model.layers.0.mlp.gate_proj"], set()),
    ([], set()),
])
def test_modules_to_not_convert_keeps_its_parts_dense(names: list[str], kept: set[str]) -> None:
    p = H.precision({"torch_dtype": "bfloat16",
                     "quantization_config": {"quant_method": "fp8", "modules_to_not_convert": names}})
    assert p.converted == frozenset(LINEAR) - kept
    assert H._kept({"modules_to_not_convert": names}) == frozenset(kept)


# ---- text_part(): a multimodal config's language model -----------------------------------------------------
def test_text_part_of_a_plain_config_is_itself() -> None:
    cfg = {"model_type": "llama", "hidden_size": 8}
    text, said = H.text_part(cfg)
    assert text == cfg and said == [] and text is not cfg


def test_text_part_carries_the_outer_keys_and_names_the_towers_left_out() -> None:
    cfg = {"model_type": "gemma3", "torch_dtype": "bfloat16", "tie_word_embeddings": True, "hidden_size": 1,
           "quantization_config": {"quant_method": "fp8"}, "_name_or_path": "x",
           "text_config": {"hidden_size": 2560, "torch_dtype": "float32"},
           "vision_config": {"hidden_size": 1152}, "audio_config": {}}
    text, said = H.text_part(cfg)
    assert text == {"hidden_size": 2560, "torch_dtype": "float32", "tie_word_embeddings": True,
                    "quantization_config": {"quant_method": "fp8"}, "_name_or_path": "x",
                    "model_type": "gemma3_text"}
    assert said == ["the text model (text_config) only: audio_config, vision_config not counted"]


def test_text_part_model_type_the_outer_one_where_no_text_type_is_known() -> None:
    text, said = H.text_part({"model_type": "llava", "text_config": {"hidden_size": 4}})
    assert text["model_type"] == "llava" and said == []
    text, _ = H.text_part({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "vocab_size": 7}})
    assert text["model_type"] == "gemma3_text"
    text, _ = H.text_part({"text_config": {"vocab_size": 7}})
    assert text["model_type"] == ""


# ---- with_defaults(): what transformers fills in ----------------------------------------------------------
def test_gemma3_defaults_fill_the_silent_keys_and_derive_the_layer_types() -> None:
    out, said = H.with_defaults({"model_type": "gemma3_text", "hidden_size": 3840, "num_hidden_layers": 12})
    assert out["vocab_size"] == 262_208 and out["head_dim"] == 256 and out["hidden_size"] == 3840
    assert out["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 5 + \
        ["full_attention"]
    assert len(said) == 1
    line = said[0]
    assert line.startswith("where the config is silent, transformers' Gemma3TextConfig defaults: vocab_size 262208, "
                           "intermediate_size 9216, num_attention_heads 8, ")
    assert "hidden_size" not in line and "num_hidden_layers" not in line and "sliding_window_pattern 6," not in line
    assert line.endswith(", layer_types: 10 of 12 layers sliding (window 4096), every 6th full "
                         "(sliding_window_pattern 6)")


def test_a_stated_pattern_is_not_said_as_filled() -> None:
    out, said = H.with_defaults({"model_type": "gemma3_text", "num_hidden_layers": 4, "sliding_window_pattern": 2,
                                 "sliding_window": 512})
    assert out["layer_types"] == ["sliding_attention", "full_attention"] * 2
    assert said[0].endswith("layer_types: 2 of 4 layers sliding (window 512), every 2th full")
    # the older private key too
    out, said = H.with_defaults({"model_type": "x", "num_hidden_layers": 3, "sliding_window": 8,
                                 "_sliding_window_pattern": 3, "tie_word_embeddings": False})
    assert out["layer_types"] == ["sliding_attention", "sliding_attention", "full_attention"]
    # an architecture without a transformers class known here is named by its model_type
    assert said == ["where the config is silent, transformers' x defaults: layer_types: 2 of 3 layers sliding "
                    "(window 8), every 3th full (sliding_window_pattern 3)"]


def test_stated_layer_types_are_kept() -> None:
    types = ["full_attention", "sliding_attention"]
    out, said = H.with_defaults({"model_type": "gemma3_text", "num_hidden_layers": 2, "layer_types": types})
    assert out["layer_types"] == types
    assert "layer_types:" not in said[0]


def test_defaults_name_their_class_and_unknown_architectures_say_untied() -> None:
    _, said = H.with_defaults({"model_type": "mixtral"})
    assert said[0].startswith("where the config is silent, transformers' MixtralConfig defaults: vocab_size 32000, ")
    out, said = H.with_defaults({"model_type": "qwen2", "hidden_size": 8})
    assert out == {"model_type": "qwen2", "hidden_size": 8}
    assert said == ["tie_word_embeddings not in the config, and qwen2's default not known here: read as untied "
                    "(the output projection a matrix of its own)"]
    _, said = H.with_defaults({})
    assert said == ["tie_word_embeddings not in the config, and its architecture's default not known here: read "
                    "as untied (the output projection a matrix of its own)"]
    _, said = H.with_defaults({"model_type": "qwen2", "tie_word_embeddings": False})
    assert said == []
