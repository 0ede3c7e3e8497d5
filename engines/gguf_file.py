"""Checks and facts about a GGUF file, read from its header (engines/gguf_header.py; no engine needed)."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engines.base import EngineError
from engines.gguf_header import Header, HeaderError, read_gguf_header

if TYPE_CHECKING:
    from gguf import GGUFReader

GGUF_MAGIC = b"GGUF"
WORK_VERSION = 4  # 4: matmul_type_bytes; 3: routing_correlation; what a cached GGUFInfo holds; a cache written by an older reader is read again

# Sliding-window layers by architecture, as llama.cpp applies them (src/llama-model.cpp, set_swa_pattern(n): of every
# n layers the first n − 1 attend the window, the n-th the whole context); a file may carry the per-layer array
# `{arch}.attention.sliding_window_pattern` instead, which wins.
SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2, "llama4": 4, "exaone4": 4}


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
    # the shape of the work beyond a dense model (docs/design/model-reads.md): routed experts, windows, linear layers
    experts: int | None = None  # routed experts per MoE layer
    experts_used: int | None = None
    expert_bytes: int | None = None  # all routed experts' tensors (ffn_*_exps), every MoE layer
    expert_params: int | None = None
    moe_layers: int | None = None  # layers holding routed experts (blk.N.ffn_*_exps)
    sliding_window: int | None = None
    window_layers: int | None = None  # layers attending only the window (the arch's pattern, or the file's array)
    linear_layers: int | None = None  # recurrent / linear-attention layers (no KV; a fixed state)
    state_bytes: float | None = None  # their state, one sequence, all such layers
    routing_correlation: float | None = None  # inference-top.routing_correlation: a file that says its router's ρ
    mla_dim: int | None = None  # latent attention (MLA): K/V cached as kv_lora_rank + rope dims a token and layer
    assumed: tuple[str, ...] = ()  # what was assumed where the file did not say
    # the matrices a decode step multiplies, outside the routed experts (the embedding only where it is tied: the
    # output projection), their bytes by ggml type: the CPU's matmul path is chosen by type (kernels.toml [cpu])
    matmul_type_bytes: tuple[tuple[str, int], ...] = ()

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
        if cached and cached.get("work_version") == WORK_VERSION:  # a cache from before the work model is re-read
            fields = {k: v for k, v in cached.items() if k in GGUFInfo.__dataclass_fields__}
            return GGUFInfo(**{**fields, "assumed": tuple(fields.get("assumed", ())),
                               "matmul_type_bytes": tuple((str(k), int(v)) for k, v in fields.get("matmul_type_bytes", ()))})
    if progress and key:
        progress(f"reading the GGUF metadata of {p.name} (once per file) …")
    info = _inspect(p)
    if key:
        table = _read_json(_cache_file())
        table[key] = {**asdict(info), "work_version": WORK_VERSION}
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
        reader = read_gguf_header(p)  # the header only: gguf's GGUFReader would parse the whole vocabulary
    except (HeaderError, OSError, UnicodeDecodeError, OverflowError, MemoryError) as exc:
        raise EngineError(f"{p} is a damaged or truncated GGUF file ({type(exc).__name__}: {exc})") from None
    end = max((t.data_offset + int(t.n_bytes) for t in reader.tensors), default=0)
    if end > size:
        raise EngineError(
            f"{p} is truncated: its tensors need {end:,} bytes but the file has {size:,} (download it again)"
        )
    arch = reader.get("general.architecture") or "unknown"
    heads = reader.get(f"{arch}.attention.head_count")
    kv_heads = reader.get(f"{arch}.attention.head_count_kv")
    head_dim = reader.get(f"{arch}.attention.key_length")
    embd = reader.get(f"{arch}.embedding_length")
    if head_dim is None and heads and embd:
        head_dim = int(embd) // int(heads)
    def as_int(v: Any) -> int | None:
        return None if v is None else int(v)

    kv_list = kv_heads if isinstance(kv_heads, list) else None  # a hybrid: 0 KV heads in its linear layers
    if kv_list is not None:
        kv_heads = max((int(x) for x in kv_list), default=0) or None
    layers = as_int(reader.get(f"{arch}.block_count"))
    embd = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    tied = not any(t.name == "output.weight" for t in reader.tensors)
    return GGUFInfo(
        matmul_type_bytes=matmul_type_bytes(reader.tensors, tied),
        **beyond_dense(reader, str(arch), layers, kv_list),
        tensor_bytes=sum(int(t.n_bytes) for t in reader.tensors),
        params=sum(int(t.n_elements) for t in reader.tensors),
        embd_bytes=int(embd.n_bytes) if embd is not None else None,
        embd_params=int(embd.n_elements) if embd is not None else None,
        tied=tied,
        heads=as_int(heads), hidden=as_int(reader.get(f"{arch}.embedding_length")),
        vocab=int(embd.shape[-1]) if embd is not None else None,
        path=str(p),
        file_bytes=size,
        architecture=str(arch),
        name=str(reader.get("general.name") or p.stem),
        layers=layers,
        kv_heads=as_int(kv_heads if kv_heads is not None else heads),
        head_dim=as_int(head_dim),
        context_length=as_int(reader.get(f"{arch}.context_length")),
    )


def matmul_type_bytes(tensors: Any, tied: bool) -> tuple[tuple[str, int], ...]:
    """Bytes by ggml type name of the 2-D weights a decode step multiplies: not the routed experts (their own
    kernels), not an untied token embedding (a row lookup), the tied one (it is the output projection)."""
    from gguf import GGMLQuantizationType

    out: dict[str, int] = {}
    for t in tensors:
        if len(t.shape) != 2 or "_exps." in t.name or (t.name == "token_embd.weight" and not tied):
            continue
        try:
            name = GGMLQuantizationType(t.type).name
        except ValueError:
            name = f"type {t.type}"
        out[name] = out.get(name, 0) + int(t.n_bytes)
    return tuple(sorted(out.items()))


# A file made with random weights (engines/gguf_synth.py) says its router routes tokens independently (ρ = 0);
# a trained model's file says nothing, and the work model takes the fitted default (measure/core/work.py).
ROUTING_KEY = "inference-top.routing_correlation"


def beyond_dense(reader: Header, arch: str, layers: int | None, kv_list: list[Any] | None) -> dict[str, Any]:
    """The GGUFInfo fields past a dense, full-attention model: routed experts (their tensors' bytes), the sliding
    window and how many layers use it, linear/recurrent layers and their state, latent attention; and, in
    `assumed`, what the file left to an assumption (docs/design/model-reads.md)."""
    def get(key: str) -> Any:
        return reader.get(f"{arch}.{key}")

    out: dict[str, Any] = {}
    assumed: list[str] = []
    exps = [t for t in reader.tensors if "_exps." in t.name]
    n_exp, used = get("expert_count"), get("expert_used_count")
    if exps or n_exp:
        out.update(experts=int(n_exp or 0) or None, experts_used=int(used or 0) or None,
                   expert_bytes=sum(int(t.n_bytes) for t in exps), expert_params=sum(int(t.n_elements) for t in exps),
                   moe_layers=len({t.name.split(".")[1] for t in exps if t.name.startswith("blk.")}) or None)
        if not used:
            assumed.append("experts used per token not in the file: every expert counted as read (dense)")
        rho = reader.get(ROUTING_KEY)
        if rho is not None:
            out["routing_correlation"] = float(rho)
    window = get("attention.sliding_window")
    if window and layers:
        pattern = get("attention.sliding_window_pattern")
        if isinstance(pattern, list) and pattern:
            n_win = sum(1 for x in pattern if x)
        elif arch in SWA_PATTERN:
            n = SWA_PATTERN[arch]
            n_win = sum(1 for i in range(layers) if i % n < n - 1)
        else:
            n_win = 0
            assumed.append(f"architecture {arch!r} has a sliding window of {int(window)} but no known layer pattern: "
                           "every layer counted as full attention")
        out.update(sliding_window=int(window), window_layers=n_win)
    if kv_list is not None:
        linear = sum(1 for x in kv_list if not int(x))
        out["linear_layers"] = linear
        if linear:
            out["state_bytes"] = _ssm_state_bytes(get, linear)
            if out["state_bytes"] is None:
                assumed.append(f"{linear} layers without KV heads but no ssm.* sizes: their state counted as 0")
    if rank := get("attention.kv_lora_rank"):
        out["mla_dim"] = int(rank) + int(get("rope.dimension_count") or 0)
    out["assumed"] = tuple(assumed)
    return out


def _ssm_state_bytes(get: Callable[[str], Any], layers: int) -> float | None:
    """A recurrent layer's state in llama.cpp (F32): the conv window (d_conv − 1) × (d_inner + 2 · groups ·
    d_state) and the SSM state d_inner × d_state, times the layers that have one."""
    conv, inner, state = get("ssm.conv_kernel"), get("ssm.inner_size"), get("ssm.state_size")
    if not (conv and inner and state):
        return None
    groups = int(get("ssm.group_count") or 0)
    per = (int(conv) - 1) * (int(inner) + 2 * groups * int(state)) + int(inner) * int(state)
    return float(layers * per * 4)


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
