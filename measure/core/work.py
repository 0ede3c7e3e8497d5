"""The model of the work a decode step does: bytes read and FLOPs, from the GGUF's tensors, a config.json or
a preset. `plan`, the roofline predictor and the dashboard all take their bytes and FLOPs from here.

Bytes per decode step = the weights actually read + the KV cache read at the current context:
- every weight matrix is read once per step, whatever the batch (one step serves all its sequences);
- the input embedding is a lookup: an untied model reads one row per sequence, not the matrix; a tied
  model (Gemma: no output.weight) multiplies the whole embedding as its output projection every step;
- KV read per sequence = 2 · layers · kv_heads · head_dim · bytes per element · tokens in its context.
FLOPs per token = 2 × the weights multiplied (the matrices, the tied embedding included) + attention,
4 · layers · heads · head_dim · context (QKᵀ and AV). Norms and activations are left out (< 0.1 %).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engines.gguf_file import GGUFInfo
    from presets import ModelPreset


@dataclass(frozen=True)
class WorkModel:
    name: str
    source: str
    params: int
    file_bytes: int  # the model file (or folder) as shipped
    weight_bytes: int  # weight bytes a decode step reads, embedding rows aside
    embd_row_bytes: float  # an untied model reads one embedding row per sequence per step; tied: 0
    matmul_params: int  # weights multiplied per token (2 FLOP each)
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    kv_element_bytes: float = 2.0
    note: str = ""  # which weights were counted, in words

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_element_bytes

    def bytes_per_step(self, contexts: Sequence[int] = (0,)) -> float:
        """One decode step of len(contexts) sequences, each holding that many tokens of KV."""
        return self.weight_bytes + len(contexts) * self.embd_row_bytes + self.kv_bytes_per_token * sum(contexts)

    def flops_per_token(self, context: int = 0) -> float:
        return 2.0 * self.matmul_params + 4.0 * self.layers * self.heads * self.head_dim * context

    def flops_per_step(self, contexts: Sequence[int] = (0,)) -> float:
        return sum(self.flops_per_token(c) for c in contexts)

    def prefill_flops(self, prompt_tokens: int) -> float:
        """A prompt of n tokens: n tokens' weights work + attention over 0 … n − 1 tokens of context."""
        return prompt_tokens * 2.0 * self.matmul_params + 4.0 * self.layers * self.heads * self.head_dim * (
            prompt_tokens * (prompt_tokens - 1) / 2)


def _tied_note(tied: bool, embd_bytes: float) -> str:
    if tied:
        return "tied embedding: the output projection reads it whole every step (counted)"
    return f"untied: the input embedding ({embd_bytes / 1e9:.2f} GB) is a lookup, one row per sequence (excluded)"


def from_gguf(info: GGUFInfo, kv_element_bytes: float = 2.0) -> WorkModel:
    """From engines.gguf_file.GGUFInfo (its tensor totals are read once and cached)."""
    tensor_bytes, params, layers, kv_heads, head_dim = (info.tensor_bytes, info.params, info.layers, info.kv_heads,
                                                       info.head_dim)
    if tensor_bytes is None or params is None or layers is None or kv_heads is None or head_dim is None:
        raise ValueError(f"{info.path}: the GGUF lacks the tensor totals or attention shape for a work model")
    embd_bytes, embd_params = info.embd_bytes or 0, info.embd_params or 0
    tied = bool(info.tied)
    return WorkModel(
        name=info.name, source=f"GGUF {info.path}", params=params, file_bytes=info.file_bytes,
        weight_bytes=tensor_bytes - (0 if tied else embd_bytes),
        embd_row_bytes=0.0 if tied or not info.vocab else embd_bytes / info.vocab,
        matmul_params=params - (0 if tied else embd_params), layers=layers,
        heads=info.heads or kv_heads, kv_heads=kv_heads, head_dim=head_dim,
        kv_element_bytes=kv_element_bytes, note=_tied_note(tied, embd_bytes))


_DTYPE = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}


def config_params(cfg: dict[str, Any]) -> tuple[int, int]:
    """(all parameters, the input embedding's) of a Llama-shaped config: attention, gated MLP, norms."""
    h, inter, layers = int(cfg["hidden_size"]), int(cfg["intermediate_size"]), int(cfg["num_hidden_layers"])
    heads = int(cfg["num_attention_heads"])
    kv = int(cfg.get("num_key_value_heads", heads))
    hd = int(cfg.get("head_dim") or h // heads)
    vocab = int(cfg["vocab_size"])
    per_layer = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 3 * h * inter + 2 * h
    embd = vocab * h
    tied = bool(cfg.get("tie_word_embeddings", False))
    return embd + layers * per_layer + h + (0 if tied else vocab * h), embd


def from_config(path: str | Path) -> WorkModel:
    """A Hugging Face / mlx-lm config.json; bytes from the safetensors beside it, else params × dtype."""
    p = Path(path)
    cfg = json.loads(p.read_text())
    cfg = cfg.get("text_config", cfg)
    params, embd = config_params(cfg)
    tied = bool(cfg.get("tie_word_embeddings", False))
    files = sum(f.stat().st_size for f in p.parent.glob("*.safetensors"))
    per_param = files / params if files else _DTYPE.get(str(cfg.get("torch_dtype", "bfloat16")), 2.0)
    total = files or int(params * per_param)
    heads = int(cfg["num_attention_heads"])
    return WorkModel(
        name=cfg.get("_name_or_path") or p.parent.name, source=f"config {p}", params=params, file_bytes=total,
        weight_bytes=int(total - (0 if tied else embd * per_param)),
        embd_row_bytes=0.0 if tied else int(cfg["hidden_size"]) * per_param,
        matmul_params=params - (0 if tied else embd), layers=int(cfg["num_hidden_layers"]), heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads", heads)),
        head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads),
        kv_element_bytes=_DTYPE.get(str(cfg.get("torch_dtype", "bfloat16")), 2.0), note=_tied_note(tied, embd * per_param))


def from_preset(m: ModelPreset, kv_element_bytes: float = 2.0) -> WorkModel:
    """A presets/models.toml entry (params, bytes as shipped, hidden, vocab, whether tied)."""
    per_param = m.weight_bytes / m.params
    embd = m.vocab * m.hidden
    tied = m.tied_embeddings
    return WorkModel(
        name=m.name, source=f"preset {m.key}", params=m.params, file_bytes=m.weight_bytes,
        weight_bytes=int(m.weight_bytes - (0 if tied else embd * per_param)),
        embd_row_bytes=0.0 if tied else m.hidden * per_param, matmul_params=m.params - (0 if tied else embd),
        layers=m.layers, heads=m.heads or m.kv_heads, kv_heads=m.kv_heads, head_dim=m.head_dim,
        kv_element_bytes=kv_element_bytes, note=_tied_note(tied, embd * per_param))
