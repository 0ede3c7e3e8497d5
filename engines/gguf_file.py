"""Checks and facts about a GGUF file, read with the `gguf` package (no engine needed)."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from engines.base import EngineError

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class GGUFInfo:
    path: str
    file_bytes: int
    architecture: str
    name: str
    layers: int | None
    kv_heads: int | None
    head_dim: int | None
    context_length: int | None

    def kv_bytes_per_token(self, bytes_per_element: float = 2.0) -> float | None:
        if None in (self.layers, self.kv_heads, self.head_dim):
            return None
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_element


def _field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    try:
        return f.contents()
    except Exception:  # older gguf releases lack contents()
        part = f.parts[f.data[0]]
        return bytes(part).decode() if part.dtype.kind == "u" and part.itemsize == 1 else part[0].item()


def inspect_gguf(path: str | os.PathLike) -> GGUFInfo:
    """Raise EngineError with one clear line unless `path` is a complete, readable GGUF file."""
    p = Path(path)
    if not p.exists():
        raise EngineError(f"model file not found: {p} (pass --model with the path of a .gguf file)")
    if p.is_dir():
        raise EngineError(f"{p} is a folder, not a GGUF file (the llama engine takes one .gguf file)")
    size = p.stat().st_size
    with p.open("rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise EngineError(f"{p} is not a GGUF file (it does not start with the GGUF magic bytes)")
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(p), "r")
    except Exception as exc:  # the reader raises many kinds on a damaged header
        raise EngineError(f"{p} is a damaged or truncated GGUF file ({type(exc).__name__}: {exc})") from None
    end = max((t.data_offset + int(t.n_bytes) for t in reader.tensors), default=0)
    if end > size:
        raise EngineError(
            f"{p} is truncated: its tensors need {end:,} bytes but the file has {size:,} (download it again)"
        )
    arch = _field(reader, "general.architecture") or "unknown"
    heads = _field(reader, f"{arch}.attention.head_count")
    kv_heads = _field(reader, f"{arch}.attention.head_count_kv")
    head_dim = _field(reader, f"{arch}.attention.key_length")
    embd = _field(reader, f"{arch}.embedding_length")
    if head_dim is None and heads and embd:
        head_dim = int(embd) // int(heads)
    return GGUFInfo(
        path=str(p),
        file_bytes=size,
        architecture=str(arch),
        name=str(_field(reader, "general.name") or p.stem),
        layers=_field(reader, f"{arch}.block_count"),
        kv_heads=kv_heads if kv_heads is not None else heads,
        head_dim=head_dim,
        context_length=_field(reader, f"{arch}.context_length"),
    )


def sha256_prefix(path: str | os.PathLike, n: int = 16) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:n]
