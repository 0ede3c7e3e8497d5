"""A GGUF file's header — its metadata and its tensors' names, shapes, types and offsets — read without its
vocabulary. Written by hand (the format is gguf's docs/gguf.md: a little-endian header, key/value pairs, tensor
infos; the type sizes are the `gguf` package's GGML_QUANT_SIZES): gguf's GGUFReader makes a numpy view of every
element of every array, and Gemma 3's 262,144-token vocabulary took it 15 s and 736 MB of memory for the 253 MB
embedded model (a dashboard in a 400 MiB memory cgroup was OOM-killed reading it). Here an array of more than
ARRAY_KEPT items is skipped (its count kept), so the header of any model reads in a fraction of a second."""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"GGUF"
ARRAY_KEPT = 4096  # arrays up to this long are read (a per-layer pattern, KV heads per layer); longer ones skipped
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class Skipped:
    """A long array left unread: its item type and its count."""

    item_type: int
    count: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # as the file stores it (ne0 first: token_embd is [n_embd, n_vocab])
    type: int  # ggml's type number
    data_offset: int  # from the file's start
    n_elements: int
    n_bytes: int


@dataclass(frozen=True)
class Header:
    version: int
    fields: dict[str, Any]  # key → a scalar, a string, a list (short arrays) or Skipped
    tensors: list[TensorInfo]

    def get(self, key: str) -> Any:
        """A metadata value, or None (a skipped array is None: nothing here reads one)."""
        v = self.fields.get(key)
        return None if isinstance(v, Skipped) else v


class HeaderError(ValueError):
    """Not a GGUF file, or one whose header is damaged or cut short (one line)."""


def _read(f: BinaryIO, fmt: str) -> Any:
    n = struct.calcsize(fmt)
    b = f.read(n)
    if len(b) != n:
        raise HeaderError("the header ends before it should (a truncated file)")
    return struct.unpack(fmt, b)[0]


def _string(f: BinaryIO) -> str:
    n = _read(f, "<Q")
    if n > 1 << 24:  # no key or value of a real file is 16 MiB long: a garbled length
        raise HeaderError(f"a string of {n:,} bytes in the header (a garbled file)")
    b = f.read(n)
    if len(b) != n:
        raise HeaderError("the header ends inside a string (a truncated file)")
    return b.decode("utf-8", errors="replace")


def _skip(f: BinaryIO, n: int, end: int) -> None:
    """Past `n` bytes, which must lie inside the file of `end` bytes (a garbled count would seek anywhere)."""
    if n < 0 or f.tell() + n > end:
        raise HeaderError("the header ends before it should (a truncated or garbled file)")
    f.seek(n, 1)


def _value(f: BinaryIO, t: int, end: int) -> Any:
    if t in _SCALAR:
        return _read(f, _SCALAR[t])
    if t == STRING:
        return _string(f)
    if t == ARRAY:
        item, count = _read(f, "<I"), _read(f, "<Q")
        if count <= ARRAY_KEPT:
            return [_value(f, item, end) for _ in range(count)]
        if item in _SCALAR:
            _skip(f, count * struct.calcsize(_SCALAR[item]), end)
        elif item == STRING:
            for _ in range(count):
                _skip(f, _read(f, "<Q"), end)
        else:
            for _ in range(count):
                _value(f, item, end)
        return Skipped(item, count)
    raise HeaderError(f"unknown metadata value type {t}")


def read_gguf_header(path: str | Path) -> Header:
    """The header of the GGUF file at `path` (HeaderError: one line, where it is not one or is cut short)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    with open(path, "rb") as f:
        end = os.fstat(f.fileno()).st_size  # once: a vocabulary's skip is 262,144 strings
        if f.read(4) != MAGIC:
            raise HeaderError("it does not start with the GGUF magic bytes")
        version = _read(f, "<I")
        n_tensors, n_kv = _read(f, "<Q"), _read(f, "<Q")
        fields = {}
        for _ in range(n_kv):
            key = _string(f)
            fields[key] = _value(f, _read(f, "<I"), end)
        raw = []
        for _ in range(n_tensors):
            name = _string(f)
            dims = tuple(_read(f, "<Q") for _ in range(_read(f, "<I")))
            raw.append((name, dims, _read(f, "<I"), _read(f, "<Q")))
        align = int(fields.get("general.alignment") or 32)
        start = -(-f.tell() // align) * align
    tensors = []
    for name, dims, t, offset in raw:
        n = 1
        for d in dims:
            n *= d
        try:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(t)]
        except (ValueError, KeyError):
            raise HeaderError(f"tensor {name!r} has a type ({t}) this gguf package does not know") from None
        tensors.append(TensorInfo(name, dims, t, start + offset, n, n // block * size))
    return Header(version, fields, tensors)


__all__ = ["ARRAY_KEPT", "Header", "HeaderError", "Skipped", "TensorInfo", "read_gguf_header"]
