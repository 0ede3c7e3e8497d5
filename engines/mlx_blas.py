"""A fast BLAS for mlx's CPU backend on Linux.

The `mlx[cpu]` wheel links the netlib reference BLAS: one thread, ≈2.5 GFLOPS here, so every matmul is
compute-bound and decoding B sequences together costs B times one (batching cannot show). mlx's only
BLAS calls for a float32 model are `cblas_sgemm`, so a 10-line C shim that defines `cblas_sgemm` and
forwards it to OpenBLAS (the `scipy-openblas32` wheel, whose symbols carry a `scipy_` prefix) is
loaded RTLD_GLOBAL before mlx: the dynamic linker then binds mlx's `cblas_sgemm` to it. The shim counts
its calls, so the engine can say whether it is really in use, and OpenBLAS takes a thread count, so
`set_threads` works for mlx as it does for llama.cpp.

The shim is compiled once with the system C compiler into the inference-top cache. Without a compiler
or the wheel, mlx runs on its bundled BLAS and the run says so.

What the matmuls ran on goes in the run header (engine_settings: blas, blas_kernel, blas_threads, blas_env):
OpenBLAS's kernel for this CPU (its core name: OPENBLAS_CORETYPE, where set, forces an older one), its threads
per worker, and the OPENBLAS_* variables set. Threads are the cost to watch on a shared machine: a threaded
sgemm waits for every one of its threads, and where another process holds a core each of mlx's ≈ 130 small
matmuls per token waits for the scheduler (docs/design/client-processes.md, threaded kernels, gives the numbers).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SHIM_SOURCE = r"""
typedef int blasint;
void scipy_cblas_sgemm(int, int, int, blasint, blasint, blasint, float, const float *, blasint,
                       const float *, blasint, float, float *, blasint);
unsigned long inference_top_sgemm_calls = 0;
void cblas_sgemm(int order, int ta, int tb, blasint m, blasint n, blasint k, float alpha, const float *a,
                 blasint lda, const float *b, blasint ldb, float beta, float *c, blasint ldc) {
    __atomic_add_fetch(&inference_top_sgemm_calls, 1, __ATOMIC_RELAXED);
    scipy_cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
"""
REFERENCE = "the mlx wheel's reference BLAS (1 thread, slow)"


@dataclass(frozen=True)
class BlasChoice:
    shim: str | None  # the compiled shim, or None: mlx keeps its bundled BLAS
    openblas: str | None
    label: str  # what the run header and the screen say
    kernel: str | None = None  # OpenBLAS's core name here (SkylakeX, Haswell …): the kernels its sgemm runs


def kernel_of(openblas: str) -> str | None:
    """The kernels OpenBLAS picked for this CPU (its core name, as OPENBLAS_CORETYPE may force it), read from the
    library itself; None where it cannot say."""
    import ctypes

    try:
        lib = ctypes.CDLL(openblas)
        fn = lib.scipy_openblas_get_corename
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_char_p
    name = fn()
    return name.decode() if name else None


def blas_env() -> dict[str, str]:
    """The OPENBLAS_* variables set in this environment (the workers inherit them)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("OPENBLAS_")}


def _cache_dir() -> Path:
    return Path(os.environ.get("INFERENCE_TOP_CACHE", Path.home() / ".cache" / "inference-top")) / "mlx-blas"


def prepare() -> BlasChoice:
    """The BLAS mlx workers will use; compiles the shim once (Linux only; elsewhere mlx has its own)."""
    if not sys.platform.startswith("linux"):
        return BlasChoice(None, None, "mlx's own (Metal / Accelerate)" if sys.platform == "darwin" else "mlx's own")
    try:
        import scipy_openblas32 as ob
    except ImportError:
        return BlasChoice(None, None, f"{REFERENCE}: pip install scipy-openblas32 for OpenBLAS")
    libdir = ob.get_lib_dir()
    lib = Path(libdir) / f"lib{ob.get_library()}.so"
    if not lib.exists():
        return BlasChoice(None, None, f"{REFERENCE}: {lib} is missing")
    version = getattr(ob, "__version__", "?")
    key = hashlib.sha256(f"{SHIM_SOURCE}|{lib}|{version}".encode()).hexdigest()[:16]
    out = _cache_dir() / key / "libinference_top_cblas.so"
    kernel = kernel_of(str(lib))
    label = (f"OpenBLAS {version} (scipy-openblas32{f', {kernel} kernels' if kernel else ''}) through the "
             "inference-top cblas_sgemm shim")
    if out.exists():
        return BlasChoice(str(out), str(lib), label, kernel)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".tmp{os.getpid()}.so")
    try:
        why = _build(tmp, libdir, ob.get_library()) or _check(tmp, lib)
        if why:
            return BlasChoice(None, None, f"{REFERENCE}: {why}")
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return BlasChoice(str(out), str(lib), label, kernel)


def _build(tmp: Path, libdir: str, libname: str) -> str | None:
    """Compile the shim into `tmp`; the reason it could not be, or None."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return "no C compiler to build the OpenBLAS shim"
    src = tmp.with_name(f"shim{os.getpid()}.c")
    src.write_text(SHIM_SOURCE)
    cmd = [cc, "-O2", "-shared", "-fPIC", str(src), "-o", str(tmp), f"-L{libdir}", f"-l{libname}",
           f"-Wl,-rpath,{libdir}"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"building the OpenBLAS shim failed ({exc})"
    finally:
        src.unlink(missing_ok=True)
    if r.returncode != 0:
        first = (r.stderr.strip().splitlines() or ["?"])[0]
        return f"building the OpenBLAS shim failed ({first})"
    return None


CHECK = """
import sys
from engines.mlx_blas import LoadedBlas
blas = LoadedBlas(sys.argv[1], sys.argv[2])
import mlx.core as mx
a = mx.ones((64, 64))
mx.eval(a @ a)
print(blas.calls())
"""


def _check(shim: Path, lib: Path) -> str | None:
    """Once, after building: does mlx's matmul really go through the shim? The reason if not."""
    root = Path(__file__).resolve().parent.parent
    try:
        r = subprocess.run([sys.executable, "-c", CHECK, str(shim), str(lib)], capture_output=True, text=True,
                           timeout=120, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"checking the OpenBLAS shim failed ({exc})"
    calls = r.stdout.strip().splitlines()[-1:] if r.returncode == 0 else []
    if not calls or not calls[0].isdigit():
        return f"checking the OpenBLAS shim failed ({(r.stderr.strip().splitlines() or ['?'])[-1]})"
    if int(calls[0]) == 0:
        return "mlx's matmul did not go through the OpenBLAS shim"
    return None


class LoadedBlas:
    """The shim as loaded in a worker: call it before mlx is imported."""

    def __init__(self, shim: str | None, openblas: str | None):
        import ctypes

        self._calls = None
        self._threads = None
        if shim and openblas:
            lib = ctypes.CDLL(shim, mode=ctypes.RTLD_GLOBAL)
            self._calls = ctypes.c_ulong.in_dll(lib, "inference_top_sgemm_calls")
            self._threads = ctypes.CDLL(openblas).scipy_openblas_set_num_threads

    def set_threads(self, n: int) -> bool:
        if self._threads is None:
            return False
        self._threads(int(n))
        return True

    def calls(self) -> int | None:
        return None if self._calls is None else int(self._calls.value)
