"""The one reader of model files (docs/design/model-reads.md): a config.json and the sizes of the safetensors beside it,
a GGUF's header (engines/gguf_file.py parses it). The physics of models (core/work.py's WorkModel constructors)
and the memory guard's footprint (core/guard.py's KVShape) take what is read here; they read nothing."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from engines.gguf_file import GGUFInfo, inspect_gguf
from measure.core import work as W
from measure.core.guard import GuardError, KVShape, shape_of_config, shape_of_gguf
from measure.core.hf_config import text_part, with_defaults
from measure.core.work import ConfigFile, WorkModel


def safetensors_bytes(folder: Path) -> int:
    """The bytes of the *.safetensors files in `folder` (0: none): the weights of an mlx-lm / Hugging Face
    model as shipped."""
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def read_config(path: str | os.PathLike[str]) -> ConfigFile:
    """A config.json and the safetensors beside it: its language model's keys (a multimodal config's text_config)
    with what its architecture's transformers config class fills in where it is silent (core/hf_config.py), each
    such key named in `assumed`. OSError where it cannot be read, ValueError where it is not JSON or not a JSON
    object."""
    p = Path(path)
    data = json.loads(p.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    text, left = text_part(data)
    text, filled = with_defaults(text)
    return ConfigFile(p, text, safetensors_bytes(p.parent), tuple(left + filled))


def is_gguf(path: Path) -> bool:
    """Whether `path` is a file that starts as a GGUF does."""
    if not path.is_file():
        return False
    with path.open("rb") as fh:
        return fh.read(4) == b"GGUF"


def read_gguf(path: str | os.PathLike[str], progress: Callable[[str], None] | None = None) -> GGUFInfo:
    """A GGUF's header and tensor totals (engines/gguf_file.inspect_gguf, cached by the file's identity)."""
    return inspect_gguf(path, progress)


def work_from_config(path: str | os.PathLike[str]) -> WorkModel:
    """The work model of a config.json (core/work.from_config). OSError, ValueError or KeyError where it cannot
    be read or lacks a shape."""
    return W.from_config(read_config(path))


def work_from_gguf(path: str | os.PathLike[str], kv_element_bytes: float = 2.0) -> WorkModel:
    """The work model of a GGUF (core/work.from_gguf)."""
    return W.from_gguf(read_gguf(path), kv_element_bytes)


def work_model(config: str | None, model_path: str | None, preset: str | None) -> WorkModel:
    """plan's model: a config.json, else a GGUF, else a presets/models.toml entry (PresetError where unknown)."""
    from presets import model

    if config:
        return work_from_config(config)
    if model_path:
        return work_from_gguf(model_path)
    if preset is None:
        raise ValueError("give --config, --model or --preset")  # the parser requires one of the three
    return W.from_preset(model(preset))


def shape_from_config(path: str | os.PathLike[str]) -> KVShape:
    """The guard's model shape of a config.json (core/guard.shape_of_config); GuardError: one line."""
    try:
        config = read_config(path)
    except (OSError, ValueError) as exc:
        raise GuardError(f"cannot read {Path(path)} as a config.json: {exc}") from None
    return shape_of_config(config)


def shape_from_gguf(path: str | os.PathLike[str]) -> KVShape:
    """The guard's model shape of a GGUF (core/guard.shape_of_gguf); EngineError where it is not one."""
    return shape_of_gguf(read_gguf(path), str(path))


__all__ = ["read_config", "read_gguf", "is_gguf", "safetensors_bytes", "work_from_config", "work_from_gguf",
           "work_model", "shape_from_config", "shape_from_gguf"]
