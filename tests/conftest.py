import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from measure.sources.fleet import Fleet
from measure.machine.model_choice import build_spec, resolve_model, run_meta


def pytest_configure(config):
    """Tests Ctrl-C a bench (SIGINT) and expect it to stop. A shell that runs `make test &` in the background
    starts pytest with SIGINT ignored, which every program it starts inherits: Python then installs no
    KeyboardInterrupt and such a bench ran on (two failures that were only how the tests were launched). A
    handler is reset to the default in a child at exec, so one here gives the tests' children Ctrl-C back."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Two xdist workers each run an engine of auto_threads(1) = every core, so on 2 cores four OpenMP threads share
    # two: llama.cpp's barrier (`omp barrier`, libgomp's) spins 300,000 rounds by default before it sleeps, spinning
    # through the time slice its partner needs. Round 24's CI: the cgroup bench (36 s alone) ran past its 300 s
    # beside `tune` (45 s alone, 291 s there). Here, the two side by side: 107 s and 96 s as they are; 67 s and 56 s
    # with 20,000 rounds; alone 36 s either way (OMP_WAIT_POLICY=PASSIVE: 60/64 side by side, 48 alone). Set for
    # every process the tests start, before any loads libgomp; a value already set is kept.
    os.environ.setdefault("GOMP_SPINCOUNT", "20000")
    # the truth matrix's sample (tests/integration/test_truth_matrix.py) is drawn afresh on every run: its seed chosen once
    # here, so pytest-xdist's workers (and a restarted one) draw the same cells; TRUTH_SEED=N replays a run
    import random

    os.environ.setdefault("TRUTH_SEED", str(random.SystemRandom().randrange(1_000_000)))
    # The tests never write into the user's own cache (~/.cache/inference-top: a probe taken while the suite ran,
    # 150 log folders): every cache and log folder is one of this session's, set here so that every process the
    # tests start (xdist's workers, a fleet's, a bench's, a server's) inherits it. Set once by the first process
    # (pytest itself); its workers find it set. Removed at the session's end (pytest_sessionfinish).
    if "INFERENCE_TOP_TEST_HOME" not in os.environ:
        import tempfile

        home = tempfile.mkdtemp(prefix="inference-top-tests-")
        os.environ["INFERENCE_TOP_TEST_HOME"] = home
        os.environ["INFERENCE_TOP_CACHE"] = os.path.join(home, "cache")
        os.environ["INFERENCE_TOP_LOGS"] = os.path.join(home, "logs")
        config._inference_top_home = (home, _home_cache_state())


USER_CACHE = Path.home() / ".cache" / "inference-top"


def physics():
    """benchmarks/physics.py as a module (it is a script, not a package's), loaded once."""
    import importlib.util

    if "physics" not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "benchmarks" / "physics.py"
        spec = importlib.util.spec_from_file_location("physics", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["physics"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["physics"]
# what marks a test `slow` (issue 60 item 5): the fixtures that load the real model or start a fleet, and the
# functions tests/slow_tests.txt lists (≥ 1 s in a full run); `pytest -m "not slow"` is the fast loop
SLOW_FIXTURES = {"model", "engine", "make_fleet", "mlx_model", "engine_sweep"}
SLOW_LIST = Path(__file__).parent / "slow_tests.txt"
# what marks a test `timing`: a module whose verdicts are read from token timing or the pace of a screen (a serving
# mode's word, a knee, a null engine's chunk times, the dashboard's redraws). `make test` runs the rest on two
# workers and these after, alone on one (Makefile): beside a second worker on 2 cores each of test_server_verdicts,
# test_null_engine and test_serving flipped a verdict in one of three full runs, and test_llama_server's B = 2 fell
# under 1.3 × its B = 1 in one more (tests/README.md); test_ray_clients' two actors judged by the truth matrix's
# lateness bound (p99 ≤ 30 ms) sent one request 47 ms late beside a second worker (round 27's first make test)
TIMING_MODULES = {"test_server_verdicts", "test_serving", "test_null_engine", "test_find", "test_truth_matrix",
                  "test_live_figures", "test_dashboard", "test_llama_server", "test_ray_clients"}


def pytest_collection_modifyitems(config, items):
    listed = {ln.strip() for ln in SLOW_LIST.read_text(encoding="utf-8").splitlines()
              if ln.strip() and not ln.startswith("#")}
    for item in items:
        base = item.nodeid.split("[", 1)[0]
        if base in listed or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if Path(item.nodeid.split("::", 1)[0]).stem in TIMING_MODULES:
            item.add_marker(pytest.mark.timing)


def _home_cache_state() -> dict[str, tuple[int, int]]:
    """The user's own cache folder as it stands: every file's path → (size, mtime)."""
    out = {}
    for p in USER_CACHE.rglob("*") if USER_CACHE.is_dir() else ():
        try:
            st = p.lstat()
        except OSError:
            continue
        out[str(p.relative_to(USER_CACHE))] = (st.st_size, st.st_mtime_ns)
    return out


def pytest_sessionfinish(session, exitstatus):
    """The session that set the tests' own cache (pytest_configure) checks that the user's was left as it was, and
    fails the run naming what changed; then removes its own."""
    import shutil

    made = getattr(session.config, "_inference_top_home", None)
    if made is None:
        return
    home, before = made
    after = _home_cache_state()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        print(f"\nerror: the tests changed {len(changed)} file(s) in the user's cache {USER_CACHE}: "
              + ", ".join(changed[:10]) + ("…" if len(changed) > 10 else ""))
        session.exitstatus = 1
    shutil.rmtree(home, ignore_errors=True)


def pytest_report_header(config):
    """The CPU features llama.cpp was built for and the CPU it runs on, at the top of every test run: a crash
    in llama.cpp's kernels can depend on them (an AMX or AVX512 path one machine has and another lacks)."""
    import platform

    lines = [f"cpu: {platform.processor() or platform.machine()}",
             f"truth matrix sample: TRUTH_SEED={os.environ.get('TRUTH_SEED')} replays it"]
    try:
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
        if name:
            lines[0] = f"cpu: {name}"
    except OSError:
        pass
    try:
        import llama_cpp

        lines.append("llama.cpp built for: " + llama_cpp.llama_print_system_info().decode().strip())
    except Exception as exc:  # noqa: BLE001 - a header line, never a failure
        lines.append(f"llama.cpp: not loaded ({type(exc).__name__})")
    return lines


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


from engines.null_server import free_port  # noqa: E402 - one free_port for the tree (issue 60 item 3)


def wait_answering(url: str, timeout_s: float = 60, proc: subprocess.Popen | None = None) -> bool:
    """Until GET {url}/models answers 200 (True), or timeout_s passed or `proc` ended (False)."""
    import httpx

    end = time.monotonic() + timeout_s
    while time.monotonic() < end and (proc is None or proc.poll() is None):
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            time.sleep(0.05)
    return False


_SERVERS: dict[str, tuple[subprocess.Popen, str]] = {}  # url → (process, its log file)


def start_server(cmd: list[str], port: int, timeout_s: float = 60):
    """Run a server command listening on loopback `port`, waited for until /v1/models answers: (proc, url).
    Its output goes to a log file; one that does not answer in time fails the test with that log's end."""
    import tempfile

    log = tempfile.NamedTemporaryFile(prefix="it-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    url = f"http://127.0.0.1:{port}/v1"
    _SERVERS[url] = (proc, log.name)
    if not wait_answering(url, timeout_s, proc):
        proc.kill()
        proc.wait()
        pytest.fail(f"{os.path.basename(cmd[0])} {' '.join(cmd[1:3])} did not answer at {url} within {timeout_s:.0f} s"
                    + server_log(url))
    return proc, url


def server_log(url: str, lines: int = 25) -> str:
    """For a failing test's message: whether the server at `url` (started by start_server) still runs, or how it
    ended, and the end of its output (a server that crashed or refused mid-test says why there)."""
    if url not in _SERVERS:
        return ""
    proc, path = _SERVERS[url]
    rc = proc.poll()
    state = "still running" if rc is None else f"exited with {rc}" + (f" (signal {-rc})" if rc < 0 else "")
    try:
        tail = Path(path).read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        tail = []
    return f"\n--- the server at {url}: {state}; its log ({path}) ends:\n" + "\n".join(tail)


def serve(module_args: list[str], timeout_s: float = 60, port: int | None = None):
    """`python -m <module_args> --port P` on loopback, waited for until /v1/models answers: (proc, url)."""
    port = port or free_port()
    return start_server([sys.executable, "-m", *module_args, "--port", str(port)], port, timeout_s)


class NullServerProcess:
    """engines.null_server in its own process on a fixed port: kill() it, start() it again on that port."""

    def __init__(self, ttft_ms: float = 5.0, itl_ms: float = 20.0):
        self.port = free_port()
        self.args = ["engines.null_server", "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc = None
        self.start()

    def start(self) -> None:
        self.proc, _ = serve(self.args, 20, self.port)
        assert self.proc.poll() is None, "the null server did not start"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


CGROUP_V1_MEMORY = "/sys/fs/cgroup/memory"


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int, name: str):
    """A cgroup v1 memory group limited to `limit_bytes` (pytest.skip where not root or no such controller):
    yields the argv prefix that runs a command inside it. Afterwards, whatever happened, anything left in it
    goes back to the root group and the group is removed."""
    import pytest

    base = CGROUP_V1_MEMORY
    if os.geteuid() != 0 or not os.path.isdir(base):
        pytest.skip("needs root and cgroup v1's memory controller")
    group = f"{base}/{name}-{os.getpid()}"
    try:
        os.mkdir(group)
        with open(f"{group}/memory.limit_in_bytes", "w") as fh:
            fh.write(str(limit_bytes))
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup here: {exc}")
    try:
        yield ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$0" "$@"']
    finally:
        try:
            with open(f"{group}/cgroup.procs") as fh:
                left = fh.read().split()
            for pid in left:
                try:
                    with open(f"{base}/cgroup.procs", "w") as fh:
                        fh.write(pid)
                except OSError:
                    pass
        except OSError:
            pass
        for _ in range(50):
            try:
                os.rmdir(group)
                break
            except OSError:
                time.sleep(0.1)


def record_dashboard(tmp_path, url, argv_extra, until_requests=8):
    """A dashboard session (--engine http against `url`, no terminal) recorded to a file, ticked until
    `until_requests` ended or 30 s: (its path, its plan)."""
    from measure.control.builder import make_plan
    from measure.control.live.controller import LiveController, LiveSettings
    from measure.control.wiring import make_source
    from measure.machine.recorder import Recorder
    from tui.options import build_parser, plan_options

    dash, _ = build_parser()
    plan = make_plan(plan_options(dash.parse_args(["--engine", "http", "--url", url, "--tokenizer", "none", *argv_extra])),
                     default_max_tokens=8)
    path = tmp_path / "session.jsonl"
    src = make_source(plan, k=1)
    src.start()
    c = LiveController(src, plan.workload, LiveSettings.from_plan(plan), recorder=Recorder(path, plan.header({})))
    try:
        c.start(thread=False)
        end = time.monotonic() + 30
        while time.monotonic() < end and c.totals["requests"] < until_requests:
            c.tick()
            time.sleep(0.2)
        c.tick()
    finally:
        c.close()
    return path, plan
