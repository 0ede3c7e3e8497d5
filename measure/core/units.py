"""Units in one place: nanoseconds in records, decimal bytes on screen and in files (docs/design.md §12).

Sizes typed by a user accept both conventions: `48G`/`48GB` are decimal (48 × 10⁹ B, as chip spec sheets
and this tool's screens use), `48GiB` is binary (48 × 2³⁰ B). Whatever was parsed is echoed in GB.
"""
from __future__ import annotations

import re

NS = 1_000_000_000  # nanoseconds per second; records hold integer perf_counter_ns() times
KiB, MiB, GiB = 1024, 1024**2, 1024**3


class UnitError(ValueError):
    """A size that cannot be read: one line saying how to write it."""


def parse_size(text: str) -> int:
    """'48G', '48GB', '512M', '20.4GiB' or plain bytes → bytes. G/GB = 10⁹ (decimal), GiB = 2³⁰."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?)(b?)\s*", text.lower())
    if not m or (m.group(3) and not m.group(2)):
        raise UnitError(f"bad size {text!r}: write e.g. 48G (= 48 GB, decimal), 512M or 20.4GiB (binary)")
    power = " kmgt".index(m.group(2) or " ")
    n = float(m.group(1)) * ((1024 if m.group(3) else 1000) ** power)
    if n <= 0:
        raise UnitError(f"size {text!r} must be greater than 0")
    return int(n)


def fmt_bytes(n: float | None) -> str:
    """Decimal units, as chip spec sheets: 1.07 GB, 253 MB."""
    if n is None:
        return "—"
    return f"{n / 1e9:.2f} GB" if abs(n) >= 1e9 else f"{n / 1e6:.0f} MB"


def fmt_gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def fmt_bytes_iec(n: float) -> str:
    """Binary units for KV-cache arithmetic (128 KiB per token, 2 GiB per 16K request)."""
    if n >= GiB:
        return f"{n / GiB:.2f} GiB"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    return f"{n / KiB:.1f} KiB"


def fmt_ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.1f} ms"
