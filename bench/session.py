"""Turning command-line choices into an engine spec and run metadata: shared by the TUI and `bench`."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.fleet import RunMeta, auto_threads
from engines.base import EngineError, EngineSpec
from engines.embedded import EMBEDDED_NAME, embedded_model_path
from engines.gguf_file import GGUFInfo, inspect_gguf, sha256_prefix


@dataclass
class ModelChoice:
    path: Path
    name: str
    file_bytes: int
    info: GGUFInfo | None
    embedded: bool


def resolve_model(engine: str, model: str | None, progress: Callable[[str], None] | None = None) -> ModelChoice:
    """The model to load, checked before any worker starts (EngineError: one line saying what to do)."""
    progress = progress or (lambda msg: print(msg, flush=True))
    if engine != "llama":
        raise EngineError(f"unknown engine {engine!r}; this build has: llama")
    if model is None:
        path = embedded_model_path(progress)
        info = inspect_gguf(path, progress)
        return ModelChoice(path, EMBEDDED_NAME, info.file_bytes, info, True)
    info = inspect_gguf(model, progress)
    return ModelChoice(Path(model), info.name or Path(model).stem, info.file_bytes, info, False)


def build_spec(engine: str, choice: ModelChoice, threads: int | None, ctx: int, k: int,
               flash_attn: bool = True) -> EngineSpec:
    if ctx < 16:
        raise EngineError(f"--ctx {ctx} is too small; give at least 16 tokens (default 2048)")
    return EngineSpec(engine=engine, model_path=str(choice.path), threads=threads or auto_threads(k), ctx=ctx,
                      flash_attn=flash_attn)


def run_header(choice: ModelChoice, spec: EngineSpec, extra: dict) -> dict:
    from bench.envinfo import environment

    return {
        "environment": environment(),
        "engine": spec.engine,
        "engine_settings": {"threads": spec.threads, "ctx": spec.ctx, "flash_attn": spec.flash_attn, "seed": spec.seed},
        "model": choice.name,
        "model_path": str(choice.path),
        "model_bytes": choice.file_bytes,
        "model_sha256_prefix": sha256_prefix(choice.path),
        "simulated": False,
        **extra,
    }


def engine_label(engine: str) -> str:
    """The name records and screens show for an --engine value."""
    return {"llama": "llama.cpp"}.get(engine, engine)


def run_meta(engine: str, choice: ModelChoice, mode: str = "instances", b: int = 1) -> RunMeta:
    return RunMeta(engine=engine_label(engine), model=choice.name,
                   model_bytes=choice.file_bytes, mode=mode, b=b)
