"""Units in one place (docs/design/units.md): nanoseconds in records; memory sizes binary, bandwidth decimal.

- A memory size — RAM, a memory budget, a footprint, KV, weights held in memory — is counted in powers of
  1024, as RAM is sold (a "96 GB" Mac and an "80GB" A100 hold 96 and 80 GiB) and as `free -g`, `ls -h` and
  docker count it. Typed, 48G = 48GB = 48GiB = 48 × 2³⁰ B (`parse_size`: the one parser); exact decimal
  bytes are typed as a number (16000000000 or 16e9). Shown in GiB, MiB, KiB (`fmt_bytes`, `fmt_gib`).
- Bandwidth is decimal: GB/s = 10⁹ B/s, as every chip's spec figure (a transfer rate × a bus width). The
  bytes a decode step reads, W, are shown beside it in GB (10⁹ B): W ÷ TPOT is a bandwidth.
"""
from __future__ import annotations

import re

NS = 1_000_000_000  # nanoseconds per second; records hold integer perf_counter_ns() times
KiB, MiB, GiB = 1024, 1024**2, 1024**3


class UnitError(ValueError):
    """A size that cannot be read: one line saying how to write it."""


def parse_size(text: str) -> int:
    """A memory size → bytes: '48G', '48GB', '48GiB' (each 48 × 2³⁰), '512M', '1.5g', or a number of bytes
    ('16000000000', '16e9')."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*(?:([kmgt])(?:i?b)?|b)?\s*", text.lower())
    if not m or ("e" in m.group(1) and m.group(2)):
        raise UnitError(f"bad size {text!r}: write e.g. 48G (= 48 GiB = 48 × 2³⁰ B), 512M, or a number of "
                        "bytes (16e9)")
    n = float(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " ")
    if n <= 0:
        raise UnitError(f"size {text!r} must be greater than 0")
    return int(n)


def fmt_bytes(n: float | None) -> str:
    """A memory size in binary units: 1.07 GiB, 253.0 MiB, 128.0 KiB, 0 B (— where not known)."""
    if n is None:
        return "—"
    if abs(n) >= GiB:
        return f"{n / GiB:.2f} GiB"
    if abs(n) >= MiB:
        return f"{n / MiB:.1f} MiB"
    return f"{n / KiB:.1f} KiB" if abs(n) >= KiB else f"{n:.0f} B"


def fmt_gib(n: float) -> str:
    """A memory size in GiB, one decimal: budgets and footprints (48.0 GiB)."""
    return f"{n / GiB:.1f} GiB"


def fmt_ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.1f} ms"
