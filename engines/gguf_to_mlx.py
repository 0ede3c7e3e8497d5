"""Convert a Gemma 3 GGUF (the embedded default) into an mlx-lm model folder, so both engines run the
same weights.

mlx's own GGUF loader cannot read this file (it holds Q5_0 tensors), so every tensor is dequantized by
the `gguf` package (`gguf.quants.dequantize`) to float32, exactly the values llama.cpp multiplies by,
and written as safetensors under mlx-lm's `gemma3_text` names. Two GGUF conventions are undone:
llama.cpp stores each Gemma RMSNorm weight as 1 + w (mlx-lm's Gemma RMSNorm adds the 1 itself), and the
tokenizer lives in GGUF metadata (it is rebuilt with transformers' torch-free GGUF tokenizer mapping).

The folder is written once, next to the GGUF (or in the inference-top cache when that directory is not
writable), into a temporary folder renamed into place, with a marker naming the GGUF it came from.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engines.base import EngineError
from engines.gguf_file import gguf_field

if TYPE_CHECKING:
    from gguf import GGUFReader

CONVERTER_VERSION = 1
SUPPORTED_ARCHITECTURES = ("gemma3",)
MARKER = "inference-top-conversion.json"

# Not in the GGUF: Gemma 3's values from its Hugging Face config (same for every Gemma 3 text model).
GEMMA3_FIXED = {"rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256, "sliding_window_pattern": 6}

_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.weight$")


def mlx_name(gguf_name: str) -> str | None:
    """The mlx-lm gemma3_text parameter a GGUF tensor becomes (None: not a tensor this model has)."""
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    m = _BLOCK.match(gguf_name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.weight"
    return None


def is_norm(gguf_name: str) -> bool:
    return gguf_name.endswith("norm.weight")


def gemma3_config(reader: GGUFReader) -> dict[str, Any]:
    """config.json for mlx-lm's gemma3_text from the GGUF's gemma3.* metadata."""
    def g(key: str) -> Any:
        return gguf_field(reader, f"gemma3.{key}")

    missing = [k for k in ("embedding_length", "block_count", "feed_forward_length", "attention.head_count")
               if g(k) is None]
    if missing:
        raise EngineError(f"the GGUF lacks gemma3 metadata {', '.join(missing)}; it cannot be converted for mlx")
    tokens = gguf_field(reader, "tokenizer.ggml.tokens") or []
    eos = [int(gguf_field(reader, "tokenizer.ggml.eos_token_id") or 1)]
    if "<end_of_turn>" in tokens:  # llama.cpp treats it as end of generation too
        eos.append(tokens.index("<end_of_turn>"))
    heads = int(g("attention.head_count"))
    hidden = int(g("embedding_length"))
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "hidden_size": hidden,
        "num_hidden_layers": int(g("block_count")),
        "intermediate_size": int(g("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(g("attention.head_count_kv") or heads),
        "head_dim": int(g("attention.key_length") or hidden // heads),
        "rms_norm_eps": float(g("attention.layer_norm_rms_epsilon") or 1e-6),
        "rope_theta": float(g("rope.freq_base") or 1_000_000.0),
        "sliding_window": int(g("attention.sliding_window") or 512),
        "max_position_embeddings": int(g("context_length") or 32768),
        "vocab_size": len(tokens),
        "bos_token_id": int(gguf_field(reader, "tokenizer.ggml.bos_token_id") or 2),
        "eos_token_id": eos,
        "pad_token_id": int(gguf_field(reader, "tokenizer.ggml.padding_token_id") or 0),
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        **GEMMA3_FIXED,
    }


def _tokenizer(reader: GGUFReader) -> Any:  # a transformers tokenizer
    """The GGUF's tokenizer as a transformers tokenizer, through transformers' own GGUF mapping (the
    torch-free part: its reader imports torch, so the metadata comes from gguf's reader here)."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # "PyTorch was not found": not needed here
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import (
            GGUF_TOKENIZER_MAPPING,
            add_gguf_special_tokens,
            select_tokenizer_builder,
        )
    except ImportError as exc:
        raise EngineError(f"transformers' GGUF tokenizer mapping is unavailable ({exc}): "
                          "pip install 'inference-top[mlx]'") from None
    tdict = {}
    for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items():
        value = gguf_field(reader, f"tokenizer.{key}")
        if value is not None:
            tdict[name] = value
    arch = gguf_field(reader, "general.architecture")
    tok = select_tokenizer_builder(arch, tdict.get("tokenizer_type"))(tdict)
    tok = add_gguf_special_tokens(tok, tdict)
    names = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unk_token_id",
             "pad_token": "pad_token_id"}
    for attr, key in names.items():
        if key in tdict:
            setattr(tok, attr, tdict["tokens"][int(tdict[key])])
    tok.add_bos_token = bool(gguf_field(reader, "tokenizer.ggml.add_bos_token"))
    tok.add_eos_token = bool(gguf_field(reader, "tokenizer.ggml.add_eos_token"))
    return tok


def unsupported(name: str, arch: str) -> EngineError:
    return EngineError(
        f"{name} is a {arch} GGUF; --engine mlx converts only {', '.join(SUPPORTED_ARCHITECTURES)} GGUFs "
        "(pass an mlx-lm model folder, e.g. made by mlx_lm.convert, or use --engine llama)")


def default_folder(gguf_path: Path) -> Path:
    """Beside the GGUF when its directory is writable, else in the inference-top cache."""
    beside = gguf_path.parent / f"{gguf_path.stem}.mlx"
    if os.access(gguf_path.parent, os.W_OK):
        return beside
    cache = Path(os.environ.get("INFERENCE_TOP_CACHE", Path.home() / ".cache" / "inference-top"))
    return cache / "mlx" / beside.name


def _source_key(gguf_path: Path) -> dict[str, Any]:
    st = gguf_path.stat()
    return {"gguf": str(gguf_path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "converter": CONVERTER_VERSION}


def converted(gguf_path: Path, folder: Path | None = None) -> Path | None:
    """The folder if a finished conversion of exactly this GGUF is there."""
    folder = folder or default_folder(gguf_path)
    try:
        seen = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return folder if seen.get("source") == _source_key(gguf_path) else None


def convert_gguf(gguf_path: str | os.PathLike[str], folder: str | os.PathLike[str] | None = None,
                 progress: Callable[[str], None] | None = None) -> Path:
    """The mlx-lm folder for this GGUF, converting it once (EngineError: one line saying why not)."""
    src = Path(gguf_path)
    dst = Path(folder) if folder else default_folder(src)
    done = converted(src, dst)
    if done:
        return done
    say = progress or (lambda msg: print(msg, flush=True))
    try:
        import numpy as np
        from gguf import GGUFReader
        from gguf.quants import dequantize
    except ImportError as exc:
        raise EngineError(f"the gguf package is missing ({exc}): pip install gguf") from None
    reader = GGUFReader(str(src), "r")
    arch = gguf_field(reader, "general.architecture") or "unknown"
    if arch not in SUPPORTED_ARCHITECTURES:
        raise unsupported(src.name, arch)
    try:
        from safetensors.numpy import save_file
    except ImportError:
        raise EngineError("safetensors is not installed: pip install 'inference-top[mlx]'") from None
    config = gemma3_config(reader)
    size = sum(int(t.n_elements) for t in reader.tensors if mlx_name(t.name)) * 4
    say(f"converting {src.name} for mlx into {dst}: dequantizing to {size / 1e9:.2f} GB of float32 "
        "(once, ≈ 30 s) …")
    weights = {}
    for t in reader.tensors:
        name = mlx_name(t.name)
        if name is None:
            if t.name == "output.weight":
                raise EngineError(f"{src.name} has an untied output.weight; this converter expects tied embeddings")
            continue
        w = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        w = w.reshape([int(d) for d in reversed(t.shape)])  # GGUF lists dims fastest-first: (out, in)
        if is_norm(t.name):
            w = w - 1.0  # llama.cpp stored 1 + w
        weights[name] = np.ascontiguousarray(w)
    want = 2 + config["num_hidden_layers"] * len(_LAYER_NAMES)
    if len(weights) != want:
        raise EngineError(f"{src.name}: found {len(weights)} of the {want} gemma3 tensors; it cannot be converted")
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "mlx"})
        del weights
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        _tokenizer(reader).save_pretrained(str(tmp))
        (tmp / MARKER).write_text(json.dumps({"source": _source_key(src)}, indent=2))
        shutil.rmtree(dst, ignore_errors=True)
        tmp.rename(dst)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise EngineError(f"could not write the mlx conversion into {dst.parent}: {exc}") from None
    say(f"mlx model ready: {dst}")
    return dst
