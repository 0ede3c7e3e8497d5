"""engines/spec.py and engines/registry.py: every engine's declaration, found by name, and one line for a name
that is none."""
from __future__ import annotations

import importlib

import pytest

from engines.base import EngineError
from engines.registry import ENGINES, declared
from measure.core.work import KV_LAYOUTS


def test_every_engine_is_declared_under_its_name() -> None:
    assert set(ENGINES) == {"llama", "mlx", "http", "null", "llama-server", "mlx-server", "vllm"}
    for name, e in ENGINES.items():
        assert e.name == name and declared(name) is e
        assert e.kv_layout in KV_LAYOUTS


def test_an_unknown_name_is_one_line_naming_the_engines() -> None:
    with pytest.raises(EngineError) as exc:
        declared("sglang")
    msg = str(exc.value)
    assert "\n" not in msg and "'sglang'" in msg
    assert all(name in msg for name in ENGINES)


def test_in_process_engines_name_a_class_that_exists() -> None:
    for e in ENGINES.values():
        assert bool(e.factory) == e.in_process, e.name
        if e.factory:
            module, cls = e.factory.split(":")
            assert isinstance(getattr(importlib.import_module(module), cls), type)


def test_the_plan_an_engine_is_measured_under_is_an_in_process_engine_with_a_model() -> None:
    for e in ENGINES.values():
        plan = declared(e.plan_engine)
        assert plan.plan_engine == plan.name  # one step, no chain
        assert e.remote or plan.in_process
    assert declared("llama-server").plan_engine == "llama" and declared("null").plan_engine == "llama"
    assert declared("mlx").plan_engine == "mlx" and declared("mlx-server").plan_engine == "mlx"
    assert declared("vllm").plan_engine == "llama"


def test_the_kinds_each_engine_declares() -> None:
    llama, mlx, http, null, server = (declared(n) for n in ("llama", "mlx", "http", "null", "llama-server"))
    assert (llama.model_kind, llama.work_model, llama.probe, llama.gpu) == ("gguf", "gguf", "engine-rates", "layers")
    assert (mlx.model_kind, mlx.work_model, mlx.probe, mlx.gpu) == ("mlx", "config", "bandwidth", "mac")
    assert http.remote and not http.in_process and http.model_kind == "none"
    assert null.simulated and not any(e.simulated for e in (llama, mlx, http, server))
    assert server.starts_server and llama.gguf_tokenizer and not mlx.gguf_tokenizer
    assert llama.flash_attn and not mlx.flash_attn and mlx.own_blas and not llama.own_blas
    assert [e.name for e in ENGINES.values() if e.tune_modes] == ["llama", "mlx", "llama-server", "mlx-server", "vllm"]
    mlx_server, vllm = declared("mlx-server"), declared("vllm")
    assert all(e.starts_server and e.server_flags for e in (server, mlx_server, vllm))
    assert (mlx_server.model_kind, mlx_server.needs, vllm.needs) == ("mlx", "mlx_lm", "vllm")
    assert server.measure_flags == ("--metrics",) and not mlx_server.measure_flags


def test_a_serve_command_fills_the_model_and_port() -> None:
    assert declared("mlx").serve("/m", 8080) == ["mlx_lm.server", "--model", "/m", "--host", "127.0.0.1",
                                                  "--port", "8080"]
    assert declared("llama-server").serve("/m.gguf", 8081, "/bin/ls")[:5] == ["/bin/ls", "-m", "/m.gguf", "--host",
                                                                              "127.0.0.1"]
    with pytest.raises(ValueError, match="llama has no server command"):
        declared("llama").serve("/m", 1)


def test_a_worker_builds_the_engine_its_declaration_names_and_refuses_one_it_cannot() -> None:
    from engines.base import EngineSpec
    from engines.null import NullEngine
    from engines.registry import make_engine

    assert isinstance(make_engine(EngineSpec("null", "")), NullEngine)
    for name, says in (("http", "does not run in a worker of ours"), ("sglang", "unknown engine 'sglang'")):
        with pytest.raises(EngineError, match=says):
            make_engine(EngineSpec(name, ""))
