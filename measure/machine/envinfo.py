"""What a run records about where it ran (docs/design/fairness.md)."""
from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

from measure.machine.probes import detect_chip, total_memory_bytes

PACKAGES = ("inference-top", "llama_cpp_python", "mlx", "mlx-cpu", "mlx-lm", "transformers", "scipy-openblas32", "numpy",
            "psutil", "gguf", "textual", "httpx")


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def environment() -> dict[str, Any]:
    chip_name, preset = detect_chip()
    return {
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu": chip_name,
        "chip_preset": preset.key if preset else None,
        "memory_bytes": total_memory_bytes(),
        "python": sys.version.split()[0],
        "packages": package_versions(),
    }
