"""Issue 17 (in part): a worker dying before it is ready never hangs the fleet; budgets honour a container's
limit; an output path that cannot be written is refused at start."""
import os
import signal
import subprocess
import sys
import time
import pytest

import presets
from engines.base import EngineSpec
from measure.core.records import RunMeta
from measure.core.workload import ClosedLoop, Load
from measure.sources.fleet import Fleet

META = RunMeta("null (scheduled tokens, no model)", "none", 0, simulated=True)
# a tmux server of the tests' own: on the default socket a user's running server (make test started inside tmux)
# would run the dashboard with that server's environment, not the test's (its own cache and log folders)
TMUX = ("tmux", "-L", f"inference-top-tests-{os.getpid()}")


def warming(fleet, wid=None):
    end = time.monotonic() + 30
    while time.monotonic() < end:
        for w in fleet.workers():
            if w.state == "warming" and (wid is None or w.wid == wid) and w.pid:
                return w
        time.sleep(0.02)
    raise AssertionError(f"worker {wid or 'any'} never reached its warmup")


def test_a_worker_killed_during_warmup_is_replaced_then_k_lowered(tmp_path, monkeypatch):
    """K=2 on the null engine with a 1 s TTFT (so a warmup lasts ≥ 2 s): SIGKILL one worker while it warms up →
    one replacement starts; kill the replacement in its warmup too → K is lowered to 1 and the fleet serves
    (the bench hung here before: waiting for a worker that would never be ready)."""
    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path))
    fleet = Fleet(EngineSpec("null", "", options={"ttft_s": 1.0, "itl_s": 0.005}), META, k=2, threads=1)
    try:
        fleet.start(wait_ready=False)
        os.kill(warming(fleet).pid, signal.SIGKILL)
        os.kill(warming(fleet, wid=3).pid, signal.SIGKILL)  # the replacement, in its own warmup
        t0 = time.monotonic()
        fleet.wait_ready(timeout=60)
        assert time.monotonic() - t0 < 30
        assert fleet.target_k == 1
        recs = fleet.run_requests(Load(presets.workload("synthetic:4"), ClosedLoop(1, total=2), 3), timeout=60)
        assert len(recs) == 2 and all(r.error is None and r.k == 1 for r in recs)
        deaths = [w for w in fleet.workers() if w.state == "dead"]
        assert len(deaths) == 2 and all("during its warmup" in w.error for w in deaths)
    finally:
        fleet.close()


def test_the_budget_honours_every_memory_limit(tmp_path):
    """A cgroup v1 group limited to 1 GB and a cgroup v2 group with memory.high 2 GB under 24 GB of RAM: the
    budget's base is the tightest (1 GB, named); a group without a limit (v1 writes 2⁶³ − 4096) adds nothing."""
    from measure.control.builder import resolve_budget
    from measure.machine.probes import effective_memory, memory_limits

    cg = tmp_path / "cg"
    (cg / "memory" / "box").mkdir(parents=True)
    (cg / "memory" / "box" / "memory.limit_in_bytes").write_text("1000000000\n")
    (cg / "v2grp").mkdir()
    (cg / "v2grp" / "memory.max").write_text("max\n")
    (cg / "v2grp" / "memory.high").write_text("2000000000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/box\n0::/v2grp\n")
    limits = memory_limits(str(proc), str(cg))
    assert ("cgroup v1 memory.limit_in_bytes", 1_000_000_000) in limits
    assert ("cgroup v2 memory.high", 2_000_000_000) in limits and not any(n == "cgroup v2 memory.max" for n, _ in limits)
    total, name = effective_memory(limits)
    assert (total, name) == (1_000_000_000, "cgroup v1 memory.limit_in_bytes")
    budget, src = resolve_budget(None, total, name)
    assert budget == 850_000_000 and "cgroup v1 memory.limit_in_bytes" in src
    (cg / "memory" / "box" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert not any(n.startswith("cgroup v1") for n, _ in memory_limits(str(proc), str(cg)))


def test_an_unwritable_output_is_refused_at_start(tmp_path):
    """A path under a regular file cannot be made (root passes permission bits, not this): one line, exit 2,
    before any worker starts."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for args in (["bench", "--out", str(blocker / "out")], ["--record", str(blocker / "s.jsonl")]):
        p = subprocess.run([sys.executable, "-m", "tui.cli", *args, "--max-tokens", "2"], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 2 and "cannot write" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_credentials_in_the_url_never_reach_files_or_the_terminal(tmp_path):
    """--url http://user:s3cret-pw@127.0.0.1:PORT/v1 and an API key: neither the password nor the key is in
    records.jsonl, summary.json, stdout or stderr; records.jsonl is readable by its owner only."""
    from engines.null_server import Behaviour, NullServer

    with NullServer(Behaviour(ttft_ms=5, itl_ms=2)) as srv:
        url = srv.url.replace("http://", "http://user:s3cret-pw@")
        out = tmp_path / "b"
        env = dict(os.environ, IT_KEY="sk-do-not-leak-42")
        p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", url, "--b", "1",
                            "--requests", "2", "--max-tokens", "3", "--api-key-env", "IT_KEY", "--tokenizer", "none",
                            "--out", str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    for text in (p.stdout, p.stderr, (out / "records.jsonl").read_text(), (out / "summary.json").read_text()):
        assert "s3cret-pw" not in text and "sk-do-not-leak-42" not in text
    assert "***@127.0.0.1" in (out / "records.jsonl").read_text()
    assert (out / "records.jsonl").stat().st_mode & 0o077 == 0


def test_sighup_mid_sweep_keeps_the_finished_cells_and_leaves_no_process(tmp_path):
    """B=1 then B=2 against a slow null server (20 tokens at 100 ms): SIGHUP (the terminal closed) while B=2
    runs → exit 129 with one line; summary.json holds the finished B=1 cell and the cut B=2 one; every line of
    records.jsonl parses (tests/integration/test_cli.py checks that no worker outlives a signal)."""
    import json

    from engines.null_server import Behaviour, NullServer

    with NullServer(Behaviour(ttft_ms=10, itl_ms=100)) as srv:
        out = tmp_path / "cut"
        proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", srv.url,
                                 "--b", "1,2", "--requests", "2", "--max-tokens", "20", "--tokenizer", "none",
                                 "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        seen = ""
        end = time.monotonic() + 60
        while "K=1 B=2" not in seen and time.monotonic() < end:
            seen += proc.stdout.readline()
        time.sleep(0.5)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 129, err
    assert len(err.strip().splitlines()) == 1 and "interrupted (signal SIGHUP)" in err
    cells = json.loads((out / "summary.json").read_text())
    assert [(c["b"], c["status"]) for c in cells] == [(1, "ok"), (2, "cut")]
    lines = (out / "records.jsonl").read_text().splitlines()
    assert all(json.loads(x) for x in lines) and len(lines) >= 3


def test_an_interruption_says_its_status_and_its_name():
    from measure.control.bench.sweep import interruption

    assert interruption(KeyboardInterrupt()) == (130, "Ctrl-C")
    assert interruption(SystemExit(128 + signal.SIGHUP)) == (129, "signal SIGHUP")
    assert interruption(SystemExit("bye")) == (1, "exit")


@pytest.mark.parametrize("where, exc, expect", [
    ("reps", SystemExit(128 + signal.SIGTERM), [(1, "ok", ""), (2, "cut", "signal SIGTERM")]),
    ("wall", KeyboardInterrupt(), [(1, "ok", "")]),
])
def test_the_sweep_marks_the_cell_an_interruption_cut_and_only_that_one(monkeypatch, where, exc, expect):
    """Ctrl-C (or a signal's SystemExit) during a cell: run_sweep adds that cell, marked "cut" with what ended it,
    to the cells it was given and lets the interruption go on up (the bench's summary names the cell from there:
    no state kept in the SweepConfig). One that comes between two cells (here in the next cell's memory check)
    marks nothing: the cell before it finished."""
    import measure.control.bench.sweep as S
    from engines.null_server import Behaviour, NullServer
    from measure.sources.http import HttpSource

    real_reps, real_wall = S._run_reps, S.CellRunner.past_wall

    def reps(runner, wl, k, b, seq_ctx, at, past=None):
        if where == "reps" and b == 2:
            raise exc
        return real_reps(runner, wl, k, b, seq_ctx, at, past)

    def wall(self, mode, k, b, seq_ctx):
        if where == "wall" and b == 2:
            raise exc
        return real_wall(self, mode, k, b, seq_ctx)

    monkeypatch.setattr(S, "_run_reps", reps)
    monkeypatch.setattr(S.CellRunner, "past_wall", wall)
    cells: list = []
    with NullServer(Behaviour(ttft_ms=2.0, itl_ms=1.0)) as srv:
        src = HttpSource([srv.url], RunMeta("null", "null", 0, mode="http", simulated=True), b=1, events=False)
        src.start()
        try:
            with pytest.raises(type(exc)):
                S.run_sweep(src, presets.workload("default"), S.SweepConfig(mode="http", bs=[1, 2], requests=2,
                            max_tokens=4, cell_timeout_s=30), lambda m: None, cells=cells)
        finally:
            src.close()
    assert [(c.b, c.status, c.reason.split("(")[-1].split(")")[0] if c.status == "cut" else "")
            for c in cells] == expect
    assert all(c.reason.startswith("interrupted (") and "while this cell ran" in c.reason for c in cells if not c.ok)


def test_a_full_disk_mid_run_warns_once_keeps_lines_whole_and_fails_the_bench(tmp_path):
    """records.jsonl on a 24 kB tmpfs fills after a few records: one warning, the sweep finishes, every line in
    the file parses, the exit code says it failed."""
    import json

    import pytest

    from engines.null_server import Behaviour, NullServer

    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a tiny tmpfs")
    try:
        with NullServer(Behaviour(ttft_ms=2, itl_ms=1)) as srv:
            p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", srv.url,
                                "--b", "1", "--requests", "60", "--max-tokens", "8", "--tokenizer", "none",
                                "--out", str(mnt / "run")], capture_output=True, text=True, timeout=120)
        assert p.returncode == 1, p.stderr
        warnings = [x for x in p.stderr.splitlines() if "warning" in x]
        assert len(warnings) == 1 and "No space left" in warnings[0]
        lines = (mnt / "run" / "records.jsonl").read_text().splitlines()
        assert len(lines) >= 2 and all(json.loads(x) for x in lines)
        assert "records were not kept" in p.stderr.splitlines()[-1]
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_absurd_starting_values_are_refused_before_anything_starts():
    """--k 1000 (the dashboard would spawn 1000 workers) is refused by the memory guard with its numbers; a
    synthetic prompt longer than the context is refused with what to change. One line, exit 2, no process."""
    for args, says in ((["--k", "1000"], "needs ≈"), (["bench", "--workload", "synthetic:5000", "--ctx", "512"],
                                                     "exceeds --ctx 512")):
        p = subprocess.run([sys.executable, "-m", "tui.cli", *args, "--max-tokens", "8"], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_a_containers_memory_limit_refuses_the_step_before_any_swap(tmp_path):
    """Real cgroup v1: the bench runs in a group limited to 4 GB. Its budget is 85 % of that (the header names
    the limit), so B=32 and B=64 at an 8192-token context (≈ 5.3 and 10 GB with their KV) are refused before
    they start, and B=2 runs. The group is removed afterwards, whatever happened."""
    import json

    import pytest

    from conftest import memory_cgroup

    out = tmp_path / "cg"
    with memory_cgroup(4_000_000_000, "it-test") as inside:
        try:  # under pytest-timeout's 300 s, so that a bench that hangs shows what it printed
            p = subprocess.run([*inside, sys.executable, "-m",
                                "tui.cli", "bench", "--b", "2,32,64", "--ctx", "8192", "--max-tokens", "16",
                                "--requests", "64", "--out", str(out)], capture_output=True, text=True, timeout=240)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the bench ran past 240 s (36 s alone on 2 cores); it printed:\n{exc.stdout}\n{exc.stderr}")
    assert p.returncode == 0, p.stderr
    cells = json.loads((out / "summary.json").read_text())
    assert [(c["b"], c["status"]) for c in cells] == [(2, "ok"), (32, "refused"), (64, "refused")]
    header = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    assert "cgroup v1 memory.limit_in_bytes" in header["memory_budget_source"]
    assert header["memory_budget"] == pytest.approx(3.4e9, rel=1e-4)  # the kernel rounds to pages


class Misbehaving:
    """Handlers for the ways a server misbehaves mid-protocol."""

    @staticmethod
    def handler():
        from http.server import BaseHTTPRequestHandler

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path.startswith("/busy"):
                    self.send_response(429)
                    self.send_header("retry-after", "2")
                    self.send_header("content-length", "4")
                    self.end_headers()
                    self.wfile.write(b"busy")
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                if self.path.startswith("/huge"):
                    self.wfile.write(b'data: {"choices": [{"text": "' + b"x" * (4 << 20) + b'"}]}\n\n')
                elif self.path.startswith("/badutf8"):
                    self.wfile.write(b'data: {"choices": [{"text": "\xff\xfe"}]}\n\n')

        return H


@pytest.mark.parametrize("lean", [False, True], ids=["aiohttp", "lean"])
def test_a_misbehaving_server_is_recorded_per_request(lean):
    """429 with Retry-After, an SSE line of 4 MB, invalid UTF-8: each one request's error, in one line."""
    import asyncio
    import threading
    from http.server import ThreadingHTTPServer

    from engines.http_lean import LeanSession
    from engines.http_openai import endpoint_body, new_session, stream_one

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Misbehaving.handler())
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"

    async def one(path):
        async with (LeanSession() if lean else new_session()) as s:
            return await stream_one(s, base + path, endpoint_body("completions", None, "hi", 4, True), {}, 5.0)

    try:
        busy, huge, bad = (asyncio.run(one(p)) for p in ("/busy", "/huge", "/badutf8"))
    finally:
        srv.shutdown()
    assert "HTTP 429" in busy.error and "retry after 2 s" in busy.error
    assert huge.error and "\n" not in huge.error and len(huge.error) < 300
    assert bad.error and "malformed" in bad.error


def test_a_server_killed_mid_run_and_restarted_and_no_asyncio_warnings(tmp_path):
    """The null server is killed while 2 streams run, then restarted on its port: the requests in flight and
    those sent while it was down are recorded with their errors, the later ones succeed, the bench finishes;
    then B = 1, 8, 32, 64 against it: no asyncio warning (a stream abandoned, a session unclosed) on stderr."""
    import json

    from conftest import NullServerProcess

    server = NullServerProcess(ttft_ms=5, itl_ms=20)
    port = server.port
    out = tmp_path / "killed"
    bench = subprocess.Popen([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url",
                              f"http://127.0.0.1:{port}/v1", "--b", "2", "--requests", "40", "--max-tokens", "10",
                              "--tokenizer", "none", "--warmup", "0",  # the kill falls in the measured load
                              "--out", str(out)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2.5)
        server.kill()
        time.sleep(1.0)
        server.start()
        _, err = bench.communicate(timeout=120)
        assert bench.returncode == 0, err
        recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()[1:]]
        failed = [r for r in recs if r["error"]]
        assert len(recs) == 40 and failed and len(failed) < 40  # the run went on through the outage
        p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url",
                            f"http://127.0.0.1:{port}/v1", "--b", "1,8,32,64", "--requests", "64", "--max-tokens",
                            "4", "--tokenizer", "none", "--out", str(tmp_path / "many")], capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        cells = json.loads((tmp_path / "many" / "summary.json").read_text())
        assert [c["errors"] for c in cells] == [0, 0, 0, 0]  # the restarted server serves every stream level
        for bad in ("Task was destroyed", "Unclosed", "never awaited", "Traceback"):
            assert bad not in p.stderr, p.stderr
    finally:
        server.kill()
        bench.kill()


def test_an_oom_kill_refuses_that_step_and_larger_ones_for_the_session():
    """Pure: the guard admitted K=2 (its estimate fit a 4 GB budget) and the kernel OOM-killed a worker there.
    From then on K=2 and K=3 of that mode are refused with one line naming the kill, even on the confirm key;
    K=1 and the other mode are not; the estimate at K=2 is raised above the budget; --force passes."""
    from measure.control.live.admission import Admission
    from measure.core.guard import GiB, MiB, fmt_gib

    clock = [0.0]
    adm = Admission(16 * GiB, 4 * GiB, False, 2048, 250 * MiB, 20_000.0, clock=lambda: clock[0])
    adm.observe([400 * MiB])
    fp2 = adm.footprint("instances", 2, 1, 1)
    assert adm.check(fp2, "k", "instances") == (None, None)
    line = adm.note_oom("instances", 2, 1, 1)
    assert "OOM killer" in line and "K=2 B=1" in line and "\n" not in line
    assert adm.footprint("instances", 2, 1, 1).total > adm.budget > fp2.total  # no longer below what killed it
    for k in (2, 3):
        for _ in range(2):  # pressing the key again does not confirm past a kill
            refusal, warning = adm.check(adm.footprint("instances", k, 1, 1), "k", "instances")
            assert warning is None and refusal and "\n" not in refusal
            assert "OOM killer ended a worker at K=2 B=1 instances" in refusal and f"K={k} B=1 is refused" in refusal
            assert f"(estimated {fmt_gib(fp2.total)} fit the {fmt_gib(4 * GiB)} budget)" in refusal
    assert adm.check(adm.footprint("instances", 1, 1, 1), "k", "instances") == (None, None)
    assert oom_free(adm.check(adm.footprint("batch", 2, 1, 1), "m", "batch"))
    adm.force = True
    assert adm.check(adm.footprint("instances", 3, 1, 1), "k", "instances") == (None, None)


def oom_free(result) -> bool:
    refusal, _ = result
    return refusal is None or "OOM killer" not in refusal


def test_ctrl_c_twice_during_the_cleanup_still_leaves_no_process_and_keeps_the_summary(tmp_path):
    """bench --k 1,2 on the embedded model: Ctrl-C while K=2 runs, and Ctrl-C again while the first one's cleanup
    runs (50 ms and 400 ms later): exit 130, no worker after 3 s, summary.json holds the finished K=1 cell and the
    cut K=2 one, every line of records.jsonl parses, no traceback."""
    import json

    from conftest import descendants

    for delay in (0.05, 0.4):
        out = tmp_path / f"twice-{delay}"
        proc = subprocess.Popen([sys.executable, "-m", "tui.cli", "bench", "--k", "1,2", "--requests", "6",
                                 "--max-tokens", "24", "--threads", "1", "--ctx", "512", "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        seen = ""
        end = time.monotonic() + 120
        while "K=2 B=1 rep" not in seen and time.monotonic() < end and proc.poll() is None:
            seen += proc.stdout.readline()
        time.sleep(0.3)
        kids = descendants(proc.pid)
        assert len(kids) >= 2, seen
        proc.send_signal(signal.SIGINT)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        left = _outliving(kids, 3.0)
        assert not left, f"after Ctrl-C twice ({delay} s apart) these outlived the bench by 3 s: {left}"
        assert proc.returncode == 130 and "Traceback" not in err, err
        assert "interrupted (Ctrl-C)" in err.strip().splitlines()[-1]
        cells = json.loads((out / "summary.json").read_text())
        assert [(c["k"], c["status"]) for c in cells] == [(1, "ok"), (2, "cut")], delay
        lines = (out / "records.jsonl").read_text().splitlines()
        assert len(lines) >= 7 and all(json.loads(x) for x in lines)


OOM_SCRIPT = r'''
import json, sys, time
import presets
from measure.control.live.controller import LiveController, LiveHooks, LiveSettings
from measure.machine.model_choice import build_spec, resolve_model, run_meta
from measure.sources.fleet import Fleet

m = resolve_model("llama", None, progress=lambda s: None)
fleet = Fleet(build_spec("llama", m, 1, 2048, 1), run_meta("llama", m), k=1, threads=1)
# --memory-budget 8G given by hand: the guard's estimate fits it, the group's limit is what ends the step
c = LiveController(fleet, presets.workload("default"), LiveSettings(max_tokens=16, ctx=2048, memory_budget=8 * 10**9),
                   hooks=LiveHooks(watch_wall=False))

def until(pred, secs):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        snap = c.tick()
        if pred(snap):
            return True
        time.sleep(0.2)
    return False

out = {}
try:
    c.start(thread=False)
    out["k1_served"] = until(lambda s: c.totals["requests"] - c.totals["errors"] >= 3, 90)
    out["first_step"] = c.set_k(2)
    t0 = time.monotonic()
    out["oom_seen"] = until(lambda s: any("OOM killer" in x[3] for x in s.log), 60)
    out["oom_after_s"] = round(time.monotonic() - t0, 1)
    ok = c.totals["requests"] - c.totals["errors"]
    out["went_on"] = until(lambda s: c.totals["requests"] - c.totals["errors"] >= ok + 3, 60)
    out["down"] = c.set_k(1)
    out["again"] = c.set_k(2)
    out["deaths"] = [w.error for w in fleet.workers() if w.state == "dead"]
    out["log"] = [x[3] for x in c.snapshot().log]
finally:
    c.close()
print("RESULT " + json.dumps(out), flush=True)
'''


def test_a_worker_oom_killed_at_a_step_is_named_and_the_step_refused_next_time(tmp_path):
    """Real cgroup v1 without swap: the controller and its llama workers (ctx 2048, ≈ 130 MB anonymous each; the
    model's file pages are not charged here) run in a group limited to 230 MB. K=1 fits (≈ 158 MB with the
    parent); the step to K=2 (≈ 290 MB), admitted because --memory-budget says 8 GB, makes the kernel kill a
    worker: its death says "out of memory", the controller logs one line naming the kill and keeps serving
    with the worker left, and a second step to K=2 is refused by the guard, naming the kill. The group is
    removed afterwards, whatever happened."""
    import json
    from pathlib import Path

    import pytest

    from conftest import memory_cgroup

    if len(Path("/proc/swaps").read_text().strip().splitlines()) > 1:
        pytest.skip("swap is on: a worker over the group's limit would swap, not be OOM-killed")
    repo = Path(__file__).resolve().parents[2]
    with memory_cgroup(230_000_000, "it-oom") as inside:
        p = subprocess.run([*inside, sys.executable, "-c", OOM_SCRIPT], capture_output=True, text=True, timeout=300,
                           cwd=repo, env=dict(os.environ, INFERENCE_TOP_LOGS=str(tmp_path / "logs")))
    found = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    assert p.returncode == 0 and found, p.stdout[-2000:] + p.stderr[-3000:]
    r = json.loads(found[-1][len("RESULT "):])
    assert r["k1_served"] and r["first_step"] is None, r
    assert r["oom_seen"], r["log"]
    assert any("out of memory" in d for d in r["deaths"]), r["deaths"]
    assert sum("OOM killer" in x for x in r["log"]) >= 1 and all("\n" not in x for x in r["log"])
    assert r["went_on"], r["log"]  # the worker left serves on
    assert r["down"] is None
    assert r["again"] and "OOM killer ended a worker at K=2 B=1 instances" in r["again"], r["again"]
    assert "K=2 B=1 is refused" in r["again"] and "\n" not in r["again"]


def gone(p):
    """A psutil process ended: not running, or a zombie (its parent has not reaped it)."""
    import psutil

    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _outliving(kids, within_s):
    """The pids of `kids` still running `within_s` after now (looked at every 0.1 s: done when all are gone)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end and not all(gone(k) for k in kids):
        time.sleep(0.1)
    return [k.pid for k in kids if not gone(k)]


@pytest.mark.parametrize("sig", ["SIGINT twice", "SIGTERM", "SIGHUP"])
def test_signals_to_the_dashboard_and_the_replay_leave_nothing_and_keep_the_recording(tmp_path, sig):
    """The dashboard (K=2 on the embedded model, recording) in a tmux pane gets the signal (SIGINT twice: the
    second during its cleanup): it quits as `q` does, no worker outlives it by 3 s, and every line of the
    recording parses. Then the replay of that recording gets the same: it ends too."""
    import json
    import shutil

    import psutil

    from conftest import descendants

    if not shutil.which("tmux"):
        pytest.skip("tmux is not installed (the dashboard needs a terminal)")
    rec = tmp_path / "s.jsonl"
    exe = os.path.join(os.path.dirname(sys.executable), "inference-top")
    for what, cmd, ready in (
            ("dashboard", [exe, "--k", "2", "--threads", "1", "--ctx", "512", "--max-tokens", "8", "--record", str(rec)],
             lambda: rec.exists() and rec.read_text().count('"kind":"request"') >= 2),
            ("replay", [exe, "replay", str(rec)], lambda: True)):
        session = f"it-sigint-{os.getpid()}-{what}"
        subprocess.run([*TMUX, "new-session", "-d", "-s", session, "-x", "160", "-y", "48", " ".join(cmd)],
                       check=True)
        try:
            pane = int(subprocess.run([*TMUX, "display", "-p", "-t", session, "#{pane_pid}"], capture_output=True,
                                      text=True).stdout)
            end = time.monotonic() + 120
            while time.monotonic() < end and not ready():
                time.sleep(0.3)
            time.sleep(2.0)
            app = psutil.Process(pane)
            kids = descendants(pane)
            if what == "dashboard":
                assert len(kids) >= 2, "the dashboard's workers did not start"
            signum = getattr(signal, sig.split()[0])
            app.send_signal(signum)

            while sig.endswith("twice") and what == "dashboard" and not gone(app) and not any(gone(k) for k in kids):
                time.sleep(0.01)  # until the cleanup has begun stopping workers
            if sig.endswith("twice") and not gone(app):
                app.send_signal(signum)
            gone_by = time.monotonic() + 10
            while time.monotonic() < gone_by and not gone(app):
                time.sleep(0.1)
            assert gone(app), f"the {what} did not quit"
            left = _outliving(kids, 3.0)
            assert not left, f"{what}: these outlived it by 3 s: {left}"
        finally:
            subprocess.run([*TMUX, "kill-session", "-t", session], capture_output=True)
        lines = rec.read_text().splitlines()
        assert all(json.loads(x) for x in lines)


def test_the_dashboard_whose_terminal_is_gone_ends_and_leaves_no_worker(tmp_path):
    """The terminal closed under the dashboard while a parent kept its session (as `make run` does: the dashboard
    gets no SIGHUP). It sees the terminal gone itself (tui/signals.terminal_gone, each second) and ends as SIGHUP
    ends it: Textual's exit writes to a terminal that takes no more output and waits on its writer for ever, so the
    watchdog (tui/signals.Cleanup.arm) stops the workers, closes the recording and ends the process within
    EXIT_WAIT_S. Before, the dashboard and its workers ran on until some signal came (round 26: 20 minutes at a core
    after the screen tool's `make run`)."""
    import json
    import shutil

    import psutil

    from conftest import descendants
    from tui.signals import EXIT_WAIT_S

    if not shutil.which("tmux"):
        pytest.skip("tmux is not installed (the dashboard needs a terminal)")
    rec = tmp_path / "s.jsonl"
    exe = os.path.join(os.path.dirname(sys.executable), "inference-top")
    session = f"it-gone-{os.getpid()}"
    cmd = f"{exe} --k 2 --threads 1 --ctx 512 --max-tokens 8 --record {rec}"
    subprocess.run([*TMUX, "new-session", "-d", "-s", session, "-x", "160", "-y", "48",
                    f"bash -c 'trap \"\" HUP; {cmd}; sleep 60'"], check=True)
    app = None
    try:
        pane = int(subprocess.run([*TMUX, "display", "-p", "-t", session, "#{pane_pid}"], capture_output=True,
                                  text=True).stdout)
        end = time.monotonic() + 120
        while time.monotonic() < end and not (rec.exists() and rec.read_text().count('"kind":"request"') >= 2):
            time.sleep(0.3)
        app = next(p for p in psutil.Process(pane).children() if "inference-top" in " ".join(p.cmdline()))

        kids = descendants(app.pid)
        assert len(kids) >= 2, "the dashboard's workers did not start"
        subprocess.run([*TMUX, "kill-session", "-t", session], check=True)  # the terminal is gone, no SIGHUP
        gone_by = time.monotonic() + 1.0 + 2 * EXIT_WAIT_S + 10  # its check each second, then the watchdog's
        while time.monotonic() < gone_by and not gone(app):
            time.sleep(0.2)
        assert gone(app), "the dashboard ran on"
        left = _outliving(kids, 3.0)
        assert not left, f"these outlived it by 3 s: {left}"
        assert all(json.loads(x) for x in rec.read_text().splitlines())
    finally:
        subprocess.run([*TMUX, "kill-session", "-t", session], capture_output=True)
        if app is not None and app.is_running():
            for k in descendants(app.pid):
                k.kill()
            app.kill()


@pytest.mark.parametrize("phase", ["starting", "loading", "warming", "idle", "serving", "batch"])
def test_a_worker_dying_in_any_phase_is_seen_within_2_s_and_the_rest_serve_on(tmp_path, monkeypatch, phase):
    """K=2 null workers (a 1.5 s model load, 0.3 s TTFT): SIGKILL one in each phase of its life. It is marked
    dead within 2 s with the signal named (and the phase where it was not ready yet); what it held is
    recorded as failed; then a finite load still completes on what is left — a replacement before ready, K−1
    after (its records say K=1) — with no wait on the dead process."""
    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path))
    fleet = Fleet(EngineSpec("null", "", options={"load_s": 1.5, "ttft_s": 0.3, "itl_s": 0.05}), META, k=2,
                  threads=1, b_cap=2)
    wl = presets.workload("synthetic:4")
    recs = []
    try:
        if phase in ("idle", "serving", "batch"):
            fleet.start(timeout=60)
            if phase == "batch":
                fleet.set_batch("batch", 2, b_cap=2)
                fleet.wait_ready(30)
            if phase != "idle":
                fleet.set_load(Load(wl, ClosedLoop(4 if phase == "batch" else 2), 40))
                end = time.monotonic() + 30
                want = 2 if phase == "batch" else 1
                while time.monotonic() < end and not any(w.active >= want for w in fleet.workers()):
                    time.sleep(0.02)
            victim = next(w for w in fleet.workers() if w.active >= (2 if phase == "batch" else 1 if
                                                                    phase == "serving" else 0))
        else:
            fleet.start(wait_ready=False)
            state = {"starting": ("starting", "loading"), "loading": ("loading",), "warming": ("warming",)}[phase]
            end = time.monotonic() + 30
            victim = None
            while victim is None and time.monotonic() < end:
                victim = next((w for w in fleet.workers() if w.pid and w.state in state), None)
                time.sleep(0.005)
            assert victim is not None, f"no worker reached {state}"
        t0 = time.monotonic()
        os.kill(victim.pid, signal.SIGKILL)
        dead = None
        while time.monotonic() - t0 < 5 and dead is None:
            dead = next((w for w in fleet.workers() if w.wid == victim.wid and w.state == "dead"), None)
            time.sleep(0.01)
        assert dead is not None and time.monotonic() - t0 < 2.0
        assert "SIGKILL" in dead.error
        if phase in ("starting", "loading", "warming"):
            assert "before it was ready" in dead.error or "while" in dead.error or "during" in dead.error
        if phase in ("serving", "batch"):
            fleet.set_load(None)
            end = time.monotonic() + 10
            while time.monotonic() < end and any(w.active for w in fleet.workers()):
                time.sleep(0.05)  # what the survivor held finishes
            while not fleet.events.empty():
                ev = fleet.events.get_nowait()
                if type(ev).__name__ == "Finished":
                    recs.append(ev.record)
            lost = [r for r in recs if r.error and "died mid-request" in r.error]
            assert len(lost) == (2 if phase == "batch" else 1), [r.error for r in recs]
        fleet.wait_ready(timeout=30)
        done = fleet.run_requests(Load(wl, ClosedLoop(2, total=4), 3), timeout=60)
        assert len(done) == 4 and all(r.error is None for r in done)
        if phase in ("idle", "serving", "batch"):
            assert all(r.k == 1 for r in done), [(r.k, r.worker) for r in done]  # K−1, labelled as such
    finally:
        fleet.close()


def test_a_sweep_refuses_the_cells_above_one_where_a_worker_was_oom_killed():
    """bench's sweep over K=1,2,3 (null-engine fleet, 4 requests of 4 tokens a cell): the kernel's OOM killer
    'ends a worker' during K=2 (recorded in oom_killed, where the fleet puts a real one: the real kill is in
    the cgroup test above). That cell is marked, the estimate raised, and K=3 is refused in this run with one
    line naming the kill; K=1 ran before it."""
    from measure.control.bench.sweep import SweepConfig, run_sweep

    class Killed(Fleet):
        def run_requests(self, load, timeout=None, should_stop=None):
            if self.target_k == 2:
                self.oom_killed.append((2, 1, "instances"))
            return super().run_requests(load, timeout, should_stop)

    src = Killed(EngineSpec("null", "", options={"ttft_s": 0.01, "itl_s": 0.005}), META, k=1, threads=1, events=False)
    said = []
    try:
        src.start(timeout=60)
        cfg = SweepConfig(ks=[1, 2, 3], bs=[1], requests=4, max_tokens=4, memory_budget=8 * 10**9)
        cells, _, src = run_sweep(src, presets.workload("synthetic:4"), cfg, said.append)
    finally:
        src.close()
    assert [(c.k, c.status) for c in cells] == [(1, "ok"), (2, "ok"), (3, "refused")]
    assert cells[1].machine.oom_killed and "OOM killer ended a worker at K=2 B=1" in cells[2].reason
    assert any("larger cells of this mode are refused" in x for x in said)
    assert 2 * cfg.overhead_bytes > 8 * 10**9  # raised: K=2's estimate (2 × overhead, no weights) exceeds the budget
