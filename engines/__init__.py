"""Engines: one protocol (engines.base), one module per backend, each importing its library lazily."""
from engines.base import Engine, EngineError, EngineSpec

__all__ = ["Engine", "EngineError", "EngineSpec"]  # make_engine and the engines by name: engines.registry
