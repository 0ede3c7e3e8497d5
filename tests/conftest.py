import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from measure.sources.fleet import Fleet
from measure.core.model_choice import build_spec, resolve_model, run_meta


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(module_args: list[str], timeout_s: float = 60):
    """`python -m <module_args> --port P` on loopback, waited for until /v1/models answers: (proc, url)."""
    import httpx

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", *module_args, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    return proc, url
