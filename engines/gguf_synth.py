"""Write a small GGUF model of any shape with random weights (the `gguf` package writes it), for measuring
what a model of that shape costs: decode speed does not depend on the weights' values, only on their shape,
type and the experts the router picks. Made at test or benchmark time, never committed.

The model is llama.cpp's `llama` architecture: dense (every layer a gated MLP) or a mixture of experts
(Mixtral's layout: a router `ffn_gate_inp` and the experts' `ffn_{gate,up,down}_exps`, top-k of E), with a
SentencePiece vocabulary of byte tokens (any text tokenizes, by byte fallback). Weights are Q8_0 blocks
written directly (a scale and 32 int8 values each) with the scale chosen so every matrix keeps its input's
scale; norms and the router are F32. The router's random weights send tokens to experts nearly uniformly,
the case docs/design/model-reads.md models.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.gguf_file import ROUTING_KEY

Q8_BLOCK = 32
Q8_BYTES = 34  # an f16 scale and 32 int8 values


@dataclass(frozen=True)
class SynthShape:
    hidden: int = 1024
    layers: int = 8
    heads: int = 8
    kv_heads: int = 2
    ffn: int = 1024  # each expert's (or the dense MLP's) width
    experts: int = 16  # 0: dense
    experts_used: int = 2
    vocab: int = 512
    ctx: int = 4096

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def _q8_0(rows: int, cols: int, rng: np.random.Generator, extra: tuple[int, ...] = ()) -> np.ndarray:
    """Random Q8_0 blocks for a (…extra, rows, cols) matrix: uint8 of shape (…extra, rows, cols / 32 × 34)."""
    if cols % Q8_BLOCK:
        raise ValueError(f"Q8_0 needs a width divisible by {Q8_BLOCK}, got {cols}")
    nb = cols // Q8_BLOCK
    blocks = np.empty((*extra, rows, nb, Q8_BYTES), dtype=np.uint8)
    # uniform int8 in ±127 has a std of ≈ 73: a scale of 1 / (73 √cols) keeps a row's dot product at unit scale
    scale = np.float16(1.0 / (73.0 * np.sqrt(cols)))
    blocks[..., :2] = np.frombuffer(scale.tobytes(), dtype=np.uint8)
    blocks[..., 2:] = rng.integers(-127, 128, size=(*extra, rows, nb, Q8_BLOCK), dtype=np.int8).view(np.uint8)
    return blocks.reshape(*extra, rows, nb * Q8_BYTES)


def _vocab(n: int) -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then filler pieces to n."""
    from gguf import TokenType

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    if n < len(tokens):
        raise ValueError(f"the vocabulary needs at least {len(tokens)} tokens, got {n}")
    tokens += [f"▁w{i}" for i in range(n - len(tokens))]
    types += [TokenType.NORMAL] * (n - len(types))
    scores = [0.0] * 259 + [-float(i) for i in range(n - 259)]
    return tokens, scores, [int(t) for t in types]


def write_model(path: str | Path, shape: SynthShape = SynthShape(), seed: int = 0, arch: str = "llama") -> Path:
    """Write the GGUF; returns its path. Q8_0 matrices, F32 norms and router. `arch`: the architecture named in
    the file (llama.cpp loads only `llama`; another name tests readers on an architecture they do not know)."""
    from gguf import GGUFWriter

    s, rng, out = shape, np.random.default_rng(seed), Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(out), arch)
    _metadata(w, s)
    _tensors(w, s, rng)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def _metadata(w: Any, s: SynthShape) -> None:
    """The llama architecture's keys (experts where there are) and the byte-level SentencePiece vocabulary."""
    from gguf import LlamaFileType

    w.add_name(f"synthetic {'moe' if s.experts else 'dense'} {s.layers}L h{s.hidden}"
               + (f" {s.experts}x{s.ffn} top{s.experts_used}" if s.experts else f" ffn{s.ffn}"))
    w.add_context_length(s.ctx)
    w.add_embedding_length(s.hidden)
    w.add_block_count(s.layers)
    w.add_feed_forward_length(s.ffn)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_rope_dimension_count(s.head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(LlamaFileType.MOSTLY_Q8_0)
    if s.experts:
        w.add_expert_count(s.experts)
        w.add_expert_used_count(s.experts_used)
        w.add_float32(ROUTING_KEY, 0.0)  # random router weights: independent routing (work.py's ρ = 0)
    tokens, scores, types = _vocab(s.vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def _tensors(w: Any, s: SynthShape, rng: np.random.Generator) -> None:
    """Every tensor, in llama.cpp's names: Q8_0 matrices, F32 norms and router."""
    from gguf import GGMLQuantizationType as Q

    def q8(name: str, rows: int, cols: int, extra: tuple[int, ...] = ()) -> None:
        w.add_tensor(name, _q8_0(rows, cols, rng, extra), raw_dtype=Q.Q8_0)

    def f32(name: str, a: np.ndarray) -> None:
        w.add_tensor(name, a.astype(np.float32))

    q8("token_embd.weight", s.vocab, s.hidden)
    f32("output_norm.weight", np.ones(s.hidden))
    q8("output.weight", s.vocab, s.hidden)
    hd = s.head_dim
    for i in range(s.layers):
        b = f"blk.{i}."
        f32(b + "attn_norm.weight", np.ones(s.hidden))
        q8(b + "attn_q.weight", s.heads * hd, s.hidden)
        q8(b + "attn_k.weight", s.kv_heads * hd, s.hidden)
        q8(b + "attn_v.weight", s.kv_heads * hd, s.hidden)
        q8(b + "attn_output.weight", s.hidden, s.heads * hd)
        f32(b + "ffn_norm.weight", np.ones(s.hidden))
        if s.experts:
            f32(b + "ffn_gate_inp.weight", rng.standard_normal((s.experts, s.hidden)))
            q8(b + "ffn_gate_exps.weight", s.ffn, s.hidden, (s.experts,))
            q8(b + "ffn_up_exps.weight", s.ffn, s.hidden, (s.experts,))
            q8(b + "ffn_down_exps.weight", s.hidden, s.ffn, (s.experts,))
        else:
            q8(b + "ffn_gate.weight", s.ffn, s.hidden)
            q8(b + "ffn_up.weight", s.ffn, s.hidden)
            q8(b + "ffn_down.weight", s.hidden, s.ffn)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engines.gguf_synth",
                                description="Write a GGUF of a given shape with random weights (speed is real).")
    p.add_argument("out", help="the .gguf file to write")
    for f, d in SynthShape.__dataclass_fields__.items():
        p.add_argument(f"--{f.replace('_', '-')}", type=int, default=d.default, help=f"(default: {d.default})")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    shape = SynthShape(**{f: getattr(a, f) for f in SynthShape.__dataclass_fields__})
    try:
        path = write_model(a.out, shape, a.seed)
    except (ValueError, OSError) as exc:
        print(f"gguf_synth: {exc}", file=sys.stderr)
        return 2
    print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
