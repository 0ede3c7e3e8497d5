"""A Hugging Face config.json's language model as transformers reads it (docs/design/model-reads.md): the text model of a
multimodal config, the keys its architecture's transformers config class fills in where the file is silent, and
the bytes a weight of each kind takes (torch_dtype / dtype, quantization_config, mlx-lm's quantization). Pure:
machine/model_files.py reads the file, core/work.py's from_config prices what this returns. Whatever the file
does not say and is filled in here is named, in words, in the `assumed` lines that go with it."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# What transformers' config class of an architecture (its model_type) sets where a config.json is silent: the
# defaults of the class itself (src/transformers/models/<arch>/configuration_<arch>.py), only the keys that change
# the bytes a token reads or the KV it holds. `sliding_window_pattern` stands for the layer_types the class derives
# where the file gives none: layer i slides unless (i + 1) is a multiple of the pattern (Gemma 3: 5 sliding, then 1
# full; Gemma 2 and gpt-oss alternate, sliding first).
ARCH_DEFAULTS: dict[str, dict[str, object]] = {
    # configuration_gemma3.py, Gemma3TextConfig (google/gemma-3-*: the text model, also under "text_config")
    "gemma3_text": {"vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True,
                    "query_pre_attn_scalar": 256, "sliding_window": 4096, "sliding_window_pattern": 6},
    # configuration_gemma2.py, Gemma2Config
    "gemma2": {"vocab_size": 256_000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
               "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True,
               "query_pre_attn_scalar": 256, "sliding_window": 4096, "sliding_window_pattern": 2},
    # configuration_gpt_oss.py, GptOssConfig
    "gpt_oss": {"vocab_size": 201_088, "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
                "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 128,
                "num_experts_per_tok": 4, "tie_word_embeddings": False, "attention_bias": True,
                "sliding_window": 128, "sliding_window_pattern": 2},
    # configuration_mixtral.py, MixtralConfig
    "mixtral": {"vocab_size": 32_000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8,
                "num_experts_per_tok": 2, "tie_word_embeddings": False, "sliding_window": None},
    # configuration_llama.py, LlamaConfig (head_dim: hidden ÷ heads, KV heads: the heads, as core/work.py reads them)
    "llama": {"vocab_size": 32_000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "tie_word_embeddings": False, "attention_bias": False},
}
# Each architecture's transformers config class, to name where a default came from
ARCH_CLASS = {"gemma3_text": "Gemma3TextConfig", "gemma2": "Gemma2Config", "gpt_oss": "GptOssConfig",
              "mixtral": "MixtralConfig", "llama": "LlamaConfig"}
# A multimodal config's own model_type → its text model's, where "text_config" does not name it
TEXT_MODEL_TYPE = {"gemma3": "gemma3_text"}
# Keys a multimodal config states once, at its top, for its text model too
CARRIED = ("torch_dtype", "dtype", "quantization_config", "quantization", "tie_word_embeddings", "_name_or_path")

DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}
PARTS = ("embedding", "head", "attention", "mlp", "router", "experts", "norms")
LINEAR = frozenset({"attention", "mlp", "router", "experts", "head"})  # matrices a quantizer converts


def text_part(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The language model's keys: "text_config" where the config has one (a multimodal model), with the keys the
    outer config states for it (CARRIED) and its model_type; else the config itself. The second item: what that
    leaves out, in words."""
    inner = data.get("text_config")
    if not isinstance(inner, Mapping):
        return dict(data), []
    text = dict(inner)
    for key in CARRIED:
        if key not in text and key in data:
            text[key] = data[key]
    outer = str(data.get("model_type") or "")
    text.setdefault("model_type", TEXT_MODEL_TYPE.get(outer, outer))
    others = sorted(k for k in data if k.endswith("_config") and k not in ("text_config", "quantization_config"))
    return text, [f"the text model (text_config) only: {', '.join(others)} not counted"] if others else []


def with_defaults(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`cfg` with what its architecture's transformers config class fills in (ARCH_DEFAULTS) and the layer_types
    it derives from a sliding-window pattern; the second item names every key filled in, in one line."""
    out = dict(cfg)
    arch = str(cfg.get("model_type") or "")
    filled = [f"{k} {v}" for k, v in ARCH_DEFAULTS.get(arch, {}).items() if k not in cfg and k != "sliding_window_pattern"]
    for k, v in ARCH_DEFAULTS.get(arch, {}).items():
        out.setdefault(k, v)
    pattern = out.get("sliding_window_pattern") or out.get("_sliding_window_pattern")
    if not out.get("layer_types") and out.get("sliding_window") and pattern and out.get("num_hidden_layers"):
        p, n = int(pattern), int(out["num_hidden_layers"])
        out["layer_types"] = ["sliding_attention" if (i + 1) % p else "full_attention" for i in range(n)]
        slides = sum(t == "sliding_attention" for t in out["layer_types"])
        filled.append(f"layer_types: {slides} of {n} layers sliding (window {out['sliding_window']}), every "
                      f"{p}th full" + ("" if "sliding_window_pattern" in cfg else f" (sliding_window_pattern {p})"))
    said = []
    if filled:
        said.append(f"where the config is silent, transformers' {ARCH_CLASS.get(arch, arch)} defaults: "
                    f"{', '.join(filled)}")
    if "tie_word_embeddings" not in out:
        said.append(f"tie_word_embeddings not in the config, and {arch or 'its architecture'}'s default not known "
                    "here: read as untied (the output projection a matrix of its own)")
    return out, said


@dataclass(frozen=True)
class Precision:
    """Bytes a weight: `quant` for the parts a quantizer converted (`converted`, of PARTS), `dense` for the rest;
    `what` in words, `assumed`: what the config did not say."""

    dense: float
    quant: float
    converted: frozenset[str]
    what: str
    assumed: tuple[str, ...] = ()

    def of(self, part: str) -> float:
        return self.quant if part in self.converted else self.dense


def _kept(cfg: Mapping[str, Any]) -> frozenset[str]:
    """The parts a quantization_config's modules_to_not_convert keeps at the dense dtype."""
    names = [str(m) for m in cfg.get("modules_to_not_convert") or []]
    kept = set()
    for name, part in (("embed_tokens", "embedding"), ("lm_head", "head"), ("attn", "attention"),
                       ("router", "router"), ("experts", "experts")):
        if any(name in m for m in names):
            kept.add(part)
    if any(m.endswith(".gate") or m.endswith("mlp.gate") for m in names):
        kept.add("router")
    if any(m.endswith(".mlp") for m in names):
        kept |= {"mlp", "experts", "router"}
    return frozenset(kept)


def precision(cfg: Mapping[str, Any]) -> Precision:
    """The bytes of each part's weights from the config: its torch_dtype (or dtype) for what is not quantized, and
    quantization_config (mxfp4: gpt-oss's experts at 4.25 bits, 4-bit values and an 8-bit scale a 32; fp8: a byte;
    awq / gptq: `bits` + a 16-bit scale and a packed zero a group) or mlx-lm's quantization (`bits` + a 16-bit
    scale and bias a group, embeddings and the output projection too). ValueError for a method not priced here."""
    name = cfg.get("torch_dtype") or cfg.get("dtype")
    assumed: list[str] = []
    if name is None:
        dense = 2.0
        assumed.append("no torch_dtype or dtype in the config: the weights outside any quantization read as bf16 (2 B)")
    elif str(name) in DTYPE_BYTES:
        dense = DTYPE_BYTES[str(name)]
    else:
        raise ValueError(f"torch_dtype {name!r} is not one of {', '.join(DTYPE_BYTES)}")
    words = f"{name or 'bf16'} ({dense:g} B a weight)"
    q, mlx = cfg.get("quantization_config"), cfg.get("quantization")
    if isinstance(mlx, Mapping) and not (isinstance(q, Mapping) and q.get("quant_method")):  # mlx-lm copies it
        bits, group = float(mlx.get("bits", 4)), int(mlx.get("group_size", 64))
        per = bits / 8 + 4 / group
        return Precision(dense, per, frozenset(PARTS) - {"norms"},
                         f"mlx {bits:g}-bit, group {group}: {per:.4f} B a weight", tuple(assumed))
    if not isinstance(q, Mapping):
        return Precision(dense, dense, frozenset(), words, tuple(assumed))
    method = str(q.get("quant_method") or "")
    kept = _kept(q)
    if method == "mxfp4":
        conv = frozenset({"experts"}) - kept
        return Precision(dense, 17 / 32, conv, f"MXFP4 experts (4.25 bits a weight), the rest {words}",
                         tuple(assumed))
    if method == "fp8":
        return Precision(dense, 1.0, LINEAR - kept, f"fp8 matrices (1 B a weight), the rest {words}", tuple(assumed))
    if method in ("awq", "gptq"):
        bits = float(q.get("bits") or q.get("w_bit") or 4)
        group = int(q.get("group_size") or q.get("q_group_size") or 128)
        per = bits / 8 + (2 + bits / 8) / group
        return Precision(dense, per, LINEAR - kept - {"head"},
                         f"{method} {bits:g}-bit, group {group} ({per:.4f} B a weight), embeddings {words}",
                         tuple(assumed))
    raise ValueError(f"quantization_config quant_method {method!r} is not one this reader prices (mxfp4, fp8, awq, "
                     "gptq, mlx-lm's quantization): put the weights (*.safetensors) beside the config")


__all__ = ["ARCH_DEFAULTS", "DTYPE_BYTES", "PARTS", "Precision", "precision", "text_part", "with_defaults"]
