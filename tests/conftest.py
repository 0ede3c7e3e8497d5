import os

import psutil
import pytest

from bench.fleet import Fleet
from bench.session import build_spec, resolve_model, run_meta


@pytest.fixture(scope="session")
def model():
    return resolve_model("llama", None)


@pytest.fixture(scope="module")
def engine(model):
    """The llama.cpp engine in this process: 2 threads, 256 tokens of context."""
    from engines.base import EngineSpec
    from engines.llama_cpp import LlamaCppEngine

    e = LlamaCppEngine(EngineSpec("llama", str(model.path), threads=2, ctx=256))
    e.load()
    yield e
    e.close()


@pytest.fixture
def make_fleet(model, tmp_path, monkeypatch):
    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path / "logs"))
    made = []

    def make(k=1, threads=1, ctx=512, **kw):
        spec = build_spec("llama", model, threads, ctx, k)
        f = Fleet(spec, run_meta("llama", model), k=k, threads=threads, **kw)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def descendants(pid: int | None = None) -> list[psutil.Process]:
    """Live descendant processes, less multiprocessing's own resource tracker (one per parent)."""
    try:
        kids = psutil.Process(pid or os.getpid()).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for p in kids:
        try:
            if _alive(p) and "resource_tracker" not in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out
