"""The Makefile builds llama.cpp without AMX on x86-64 (docs/design/llama-build.md): compiled for a Sapphire Rapids
CPU with the flags the Makefile exports, AMX is off and the other native features (AVX512-VNNI, FP16) are on."""
import os
import platform
import shlex
import shutil
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64" or not shutil.which("make") or not shutil.which("g++"),
                                reason="the AMX flags are for x86-64 builds with make and g++")


def _exported_cmake_args(env_args: str = "") -> list[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".mk", delete=False) as f:
        f.write(f"include {ROOT}/Makefile\nshow-cmake-args:\n\t@printf '%s' \"$$CMAKE_ARGS\"\n")
    try:
        env = {**os.environ, "CMAKE_ARGS": env_args} if env_args else {k: v for k, v in os.environ.items()
                                                                     if k != "CMAKE_ARGS"}
        out = subprocess.run(["make", "-s", "-C", ROOT, "-f", f.name, "show-cmake-args"], env=env,
                             capture_output=True, text=True, timeout=60, check=True).stdout
    finally:
        os.unlink(f.name)
    return shlex.split(out)


def _defines(flags: list[str]) -> set[str]:
    out = subprocess.run(["g++", *flags, "-march=sapphirerapids", "-dM", "-E", "-x", "c++", os.devnull],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return {ln.split()[1] for ln in out.splitlines() if ln.startswith("#define ")}


def _flags(args: list[str], name: str) -> list[str]:
    vals = [a.split("=", 1)[1] for a in args if a.startswith(f"-D{name}=")]
    assert vals, f"the Makefile exports no {name} in CMAKE_ARGS: {args}"
    return shlex.split(vals[-1])


def test_the_makefile_builds_llama_cpp_without_amx_and_keeps_the_rest():
    args = _exported_cmake_args()
    for name in ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"):
        d = _defines(_flags(args, name))
        assert not {"__AMX_TILE__", "__AMX_INT8__", "__AMX_BF16__"} & d, f"{name} leaves AMX on"
        assert {"__AVX512VNNI__", "__AVX512FP16__", "__AVX512BW__"} <= d, f"{name} turned off more than AMX"
    assert "__AMX_INT8__" in _defines([]), "this compiler's sapphirerapids has no AMX: the check above proves nothing"


def test_a_cmake_args_of_ones_own_is_kept():
    args = _exported_cmake_args("-DGGML_CUDA=on")
    assert args[0] == "-DGGML_CUDA=on" and any(a.startswith("-DCMAKE_CXX_FLAGS=") for a in args)


def test_a_llama_cpp_built_with_amx_says_so_in_the_engine_log_and_one_without_is_silent():
    import io

    from engines.llama_cpp import amx_warning

    class Lib:
        def __init__(self, info: str):
            self.info = info

        def llama_print_system_info(self) -> bytes:
            return self.info.encode()

    out = io.StringIO()
    line = amx_warning(Lib("CPU : SSE3 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 |"), out)
    assert line and "AMX_INT8 = 1" in line and "-mno-amx-int8" in line and out.getvalue().strip() == line
    out = io.StringIO()
    assert amx_warning(Lib("CPU : SSE3 = 1 | AVX512 = 1 | REPACK = 1 |"), out) is None and out.getvalue() == ""
    import llama_cpp

    assert amx_warning(llama_cpp, io.StringIO()) is None, "this build has AMX: the Makefile's flags did not reach it"


def test_the_build_s_cpu_features_name_its_batch_path():
    """llama_print_system_info's names set to 1, read once by the probe: which matmul code a CPU batch step runs
    (presets/kernels.toml [cpu]); this build's own have LLAMAFILE and REPACK (the Makefile keeps both)."""
    from engines.llama_cpp import cpu_features

    class Lib:
        def llama_print_system_info(self) -> bytes:
            return b"CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 0 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 0 | "

    assert cpu_features(Lib()) == ["AVX2", "LLAMAFILE", "OPENMP", "SSE3"]
    import llama_cpp

    own = cpu_features(llama_cpp)
    assert {"LLAMAFILE", "REPACK"} <= set(own) and ("AVX2" in own or "NEON" in own)
