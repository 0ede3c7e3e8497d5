"""Every engine of this build by its --engine name: the declarations its modules hold (engines/spec.py), and
the one lookup that refuses an unknown name with one line."""
from __future__ import annotations

import importlib

from engines.base import Engine, EngineError, EngineSpec
from engines.http_openai import HTTP
from engines.llama_cpp import LLAMA, LLAMA_SERVER
from engines.mlx_lm import MLX, MLX_SERVER
from engines.null import NULL
from engines.spec import EngineDecl
from engines.vllm import VLLM

ENGINES: dict[str, EngineDecl] = {e.name: e for e in (LLAMA, MLX, HTTP, NULL, LLAMA_SERVER,
                                                                  MLX_SERVER, VLLM)}


def declared(name: str) -> EngineDecl:
    """The engine named `name` (EngineError: one line naming the engines there are)."""
    try:
        return ENGINES[name]
    except KeyError:
        raise EngineError(f"unknown engine {name!r}; this build has: {', '.join(ENGINES)}") from None


def make_engine(spec: EngineSpec) -> Engine:
    """The in-process engine `spec` names, built in this (worker) process from its declaration's factory."""
    e = declared(spec.engine)
    if not e.factory:
        raise EngineError(f"engine {e.name} does not run in a worker of ours; the ones that do: "
                          f"{', '.join(n for n, d in ENGINES.items() if d.factory)}")
    module_name, cls_name = e.factory.split(":")
    engine: Engine = getattr(importlib.import_module(module_name), cls_name)(spec)
    return engine
