"""Checks and facts about a GGUF file, read with the `gguf` package (no engine needed)."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engines.base import EngineError

if TYPE_CHECKING:
    from gguf import GGUFReader

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
    # the work a decode step does (measure/core/work.py): tensor totals, the embedding, whether it is tied
    tensor_bytes: int | None = None
    params: int | None = None
    embd_bytes: int | None = None  # token_embd
    embd_params: int | None = None
    tied: bool | None = None  # no output.weight: the embedding is the output projection too
    heads: int | None = None
    hidden: int | None = None
    vocab: int | None = None

    def kv_bytes_per_token(self, bytes_per_element: float = 2.0) -> float | None:
        if self.layers is None or self.kv_heads is None or self.head_dim is None:
            return None
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_element


def gguf_field(reader: GGUFReader, key: str) -> Any:
    """A metadata value of a GGUFReader (whatever type the file holds), or None."""
    f = reader.fields.get(key)
    if f is None:
        return None
    try:
        return f.contents()
    except Exception:  # older gguf releases lack contents()
        part = f.parts[f.data[0]]
        return bytes(part).decode() if part.dtype.kind == "u" and part.itemsize == 1 else part[0].item()


def _cache_file() -> Path:
    return Path(os.environ.get("INFERENCE_TOP_CACHE", Path.home() / ".cache" / "inference-top")) / "gguf-info.json"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def _write_json(path: Path, table: dict[str, Any]) -> None:
    """Replace a cache file whole (a reader never sees half of it); a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(table))
        tmp.replace(path)
    except OSError:
        pass


def inspect_gguf(path: str | os.PathLike[str], progress: Callable[[str], None] | None = None) -> GGUFInfo:
    """Raise EngineError with one clear line unless `path` is a complete, readable GGUF file.

    gguf's reader parses every metadata array (Gemma's 262k-token vocabulary: ≈10 s here), so a file's
    facts are cached by path, size and mtime and read once.
    """
    p = Path(path)
    key = None
    if p.is_file():
        st = p.stat()
        key = f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}"
        cached = _read_json(_cache_file()).get(key)
        if cached and cached.get("tensor_bytes") is not None:  # a cache from before the work model is re-read
            return GGUFInfo(**{k: v for k, v in cached.items() if k in GGUFInfo.__dataclass_fields__})
    if progress and key:
        progress(f"reading the GGUF metadata of {p.name} (once per file, ≈10 s for a large vocabulary) …")
    info = _inspect(p)
    if key:
        table = _read_json(_cache_file())
        table[key] = asdict(info)
        _write_json(_cache_file(), table)
    return info


def _inspect(path: Path) -> GGUFInfo:
    p = path
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
    arch = gguf_field(reader, "general.architecture") or "unknown"
    heads = gguf_field(reader, f"{arch}.attention.head_count")
    kv_heads = gguf_field(reader, f"{arch}.attention.head_count_kv")
    head_dim = gguf_field(reader, f"{arch}.attention.key_length")
    embd = gguf_field(reader, f"{arch}.embedding_length")
    if head_dim is None and heads and embd:
        head_dim = int(embd) // int(heads)
    def as_int(v: Any) -> int | None:
        return None if v is None else int(v)

    embd = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    return GGUFInfo(
        tensor_bytes=sum(int(t.n_bytes) for t in reader.tensors),
        params=sum(int(t.n_elements) for t in reader.tensors),
        embd_bytes=int(embd.n_bytes) if embd is not None else None,
        embd_params=int(embd.n_elements) if embd is not None else None,
        tied=not any(t.name == "output.weight" for t in reader.tensors),
        heads=as_int(heads), hidden=as_int(gguf_field(reader, f"{arch}.embedding_length")),
        vocab=int(embd.shape[-1]) if embd is not None else None,
        path=str(p),
        file_bytes=size,
        architecture=str(arch),
        name=str(gguf_field(reader, "general.name") or p.stem),
        layers=as_int(gguf_field(reader, f"{arch}.block_count")),
        kv_heads=as_int(kv_heads if kv_heads is not None else heads),
        head_dim=as_int(head_dim),
        context_length=as_int(gguf_field(reader, f"{arch}.context_length")),
    )


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_prefix(path: str | os.PathLike[str], n: int = 16) -> str:
    """sha256 of a model file, or of a model folder (its config.json and *.safetensors, in name order).

    Folders are hashed file by file with each file's digest cached by path, size and mtime (an mlx
    conversion of the embedded model is 1 GB of float32)."""
    p = Path(path)
    if not p.is_dir():
        return _file_sha256(p)[:n]
    cache_path = _cache_file().with_name("sha256.json")
    cache = _read_json(cache_path)
    h = hashlib.sha256()
    changed = False
    for f in sorted([*p.glob("*.safetensors"), p / "config.json"]):
        if not f.is_file():
            continue
        st = f.stat()
        key = f"{f.resolve()}|{st.st_size}|{st.st_mtime_ns}"
        if key not in cache:
            cache[key] = _file_sha256(f)
            changed = True
        h.update(f"{f.name}:{cache[key]}\n".encode())
    if changed:
        _write_json(cache_path, cache)
    return h.hexdigest()[:n]
