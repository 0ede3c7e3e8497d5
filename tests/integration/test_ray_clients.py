"""Client actors on a real Ray cluster (issue 36; measure/control/bench/cluster.py, docs/design/ray.md): a head and a
second node started on this machine (`ray start`, their own resources, stopped after: this cluster's processes
only), two client actors, one per node, against the null server. Every request of the one schedule sent once; records streamed into one
records.jsonl while the run goes on; the combined figures = every client's records pooled on the driver's clock,
and within the truth matrix's tolerances of the schedule (benchmarks/truth_matrix.py's checks) and of one client
sending the whole schedule; a client killed mid-run, or stopped (SIGSTOP), is named within seconds, its records
kept and its unsent share said. The CLI's refusals need no Ray."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engines.null_server import free_port
from measure.core.lines import EventLine

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import ray_clients as R  # noqa: E402
import truth_matrix as T  # noqa: E402

CLI = [sys.executable, "-m", "tui.cli"]
RATE = 40.0
REQUESTS = 40


@pytest.fixture(scope="module")
def cluster():
    """A head (2 CPUs) and a second node (1 CPU, resource node2) on this machine; the test process the driver."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'inference-top[cluster]'")
    port = free_port()
    try:
        address = R.start_local_cluster(port, head_cpus=2)
        import logging

        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
        end = time.monotonic() + 30
        while len([n for n in ray.nodes() if n.get("Alive")]) < 2:
            assert time.monotonic() < end, "the second Ray node did not join"
            time.sleep(0.2)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        R.stop_local_cluster(port)


@pytest.fixture(scope="module")
def server():
    s = T.NullServers(1)
    yield s.urls[0]
    s.close()


def _plan(url: str, requests: int = REQUESTS, rate: float = RATE):
    from measure.control.builder import make_plan
    from tui.options import plan_options
    from measure.control.bench.sweep import SweepConfig
    from presets import slo
    from tui.options import build_parser

    _, parser = build_parser()
    args = parser.parse_args(["--engine", "http", "--url", url, "--rate", str(rate), "--arrivals", "poisson",
                              "--requests", str(requests), "--max-tokens", str(T.TOKENS), "--slo", "interactive",
                              "--seed", "3", "--tokenizer", "none"])
    plan = make_plan(plan_options(args), default_max_tokens=256)
    plan.workload = T._workload()
    plan.slo = slo("interactive")
    cfg = SweepConfig(ks=[1], bs=[1], mode="http", requests=requests, max_tokens=T.TOKENS,
                      ignore_eos=True, arrivals=plan.arrivals, slo=plan.slo, cell_timeout_s=120.0)
    header = plan.header({"command": "bench", "ks": [1], "bs": [1], "mode": "http", "requests": requests,
                          "seed": 3})
    return plan, cfg, header


def _requests(path: Path):
    from measure.machine.recorder import read_jsonl

    _, recs, other = read_jsonl(path)
    return recs, other


def test_two_client_actors_send_the_schedule_once_streamed_and_combined_on_one_clock(cluster, server, tmp_path):
    from measure.control.bench.cell import Cell, Spec
    from measure.control.bench.cluster import run_cluster
    from measure.machine.ray_cluster import ClusterSpec
    from measure.control.bench.sweep import run_sweep
    from measure.core.clients import deal
    from measure.control.wiring import make_source

    plan, cfg, header = _plan(server)
    growth: list[int] = []  # request lines in records.jsonl, sampled while the clients run
    stop = threading.Event()

    def watch(clients):
        def count():
            while not stop.is_set():
                p = tmp_path / "records.jsonl"
                growth.append(p.read_text().count('"kind":"request"') if p.exists() else 0)
                time.sleep(0.1)
        threading.Thread(target=count, daemon=True).start()

    lines: list[str] = []
    try:
        run = run_cluster(ClusterSpec(cluster, 2), plan, cfg, header, tmp_path, lines.append, on_start=watch)
    finally:
        stop.set()
    assert not run.failed and not run.warnings, (run.warnings, lines)
    a, b = run.clients
    assert a.node_id != b.node_id, "the placement group put both clients on one node"
    for c in run.clients:  # one machine: one clock; the offset is inside its bound, the bound a round trip's half
        assert abs(c.offset_ns) <= c.bound_ns and c.bound_ns < 20_000_000, (c.offset_ns, c.bound_ns)
    recs, other = _requests(tmp_path / "records.jsonl")
    ids = sorted(r.request_id for r in recs)
    assert ids == list(range(ids[0], ids[0] + REQUESTS)), "every request of the schedule sent exactly once"
    owner = deal([1, 1], REQUESTS)
    assert all(owner[r.request_id - ids[0]] == r.extra["client"] for r in recs), "each client sent its own share"
    assert any(0 < g < REQUESTS for g in growth), f"records were not streamed while the run went on: {growth}"
    assert [e.more["state"] for e in other if isinstance(e, EventLine) and e.type == "client"] == ["done", "done"]
    # the combined cell = every client's records pooled on the driver's clock (report --combine's figures)
    (cell,) = run.cells
    truth = Cell.measure(recs, Spec(1, 1, 0, mode="http", slo=plan.slo))
    for f in ("output_throughput", "achieved_concurrency", "goodput_tps", "slo_attainment", "p99_ttft_ms",
              "median_ttft_ms"):
        x, y = cell.to_json()[f], truth.to_json()[f]
        assert x is not None and y is not None and abs(x - y) <= 1e-6 * max(1.0, abs(y)), (f, x, y)
    # … and within the truth matrix's tolerances of the schedule (every request once, TTFT = set + lateness,
    # tok/s and concurrency), and of one client sending the whole schedule
    res = T.Result("ray 2 clients")
    T._check_cell(T.Combo("http", "poisson", requests=REQUESTS), cell, recs, res)
    assert res.checked >= 5 and not res.failures, res.failures
    src = make_source(plan, events=False, per_cell=True)
    src.start()
    try:
        one, one_recs, src = run_sweep(src, plan.workload, _plan(server)[1], say=lambda m: None)
    finally:
        src.close()
    assert abs(cell.output_throughput / one[0].output_throughput - 1) <= T.RATE_TOL
    assert abs(cell.requests.ttft.p50 - one[0].requests.ttft.p50) <= T.TTFT_TOL_MS


def _wait(what, limit_s: float = 30.0):
    end = time.monotonic() + limit_s
    while not (got := what()):
        assert time.monotonic() < end, "not within the limit"
        time.sleep(0.1)
    return got


def test_the_live_dashboard_drives_its_load_from_two_actors_rows_b_and_a_death(cluster, server, tmp_path):
    """inference-top --ray: B=3 dealt 2 + 1 over the two actors (one per node), their records on the driver's clock
    in the recording with unique ids, one row per client; B → 6 gives 4 + 2 and the level is ready once both
    said so; an actor killed is named (an error line) and its row is down, its streams dealt to the other, which goes on."""
    import ray

    from measure.machine.ray_cluster import ClusterSpec
    from measure.control.builder import make_plan
    from tui.options import plan_options
    from measure.control.live.start import start_live
    from tui.options import build_parser

    dash, _ = build_parser()
    args = dash.parse_args(["--engine", "http", "--url", server, "--b", "3", "--max-tokens", str(T.TOKENS),
                            "--tokenizer", "none", "--ray", cluster, "--clients", "2", "--weights", "2,1"])
    plan = make_plan(plan_options(args), default_max_tokens=128)
    rec = tmp_path / "live.jsonl"
    run = start_live(plan, str(rec), brake=True, ray=ClusterSpec(cluster, 2, [2, 1]))
    src, c = run.peers, run.controller
    try:
        assert [x.streams for x in src.clients] == [2, 1]
        assert src.clients[0].ip and len({x.pid for x in src.clients}) == 2
        _wait(lambda: all(r.requests for r in src.readings()))  # both clients' records reach the driver
        assert c.set_b(6) is None
        assert [x.streams for x in src.clients] == [4, 2]
        _wait(lambda: c._pending is None)  # the level is ready: both clients that changed said LevelReady
        n_before = c.totals["requests"]
        ray.kill(src.clients[1].actor, no_restart=True)
        _wait(lambda: not src.readings()[1].up, 15)
        _wait(lambda: c.totals["requests"] > n_before + 5)  # client 1 goes on
        rows = src.readings()
        assert rows[0].up and not rows[1].up and rows[1].error
        assert [x.streams for x in src.clients] == [6, 0], "B stays 6: the dead client's streams dealt to the other"
        _wait(lambda: any("client 2/2" in t and "died" in t for _, _, lvl, t in list(c._log) if lvl == "error"))
    finally:
        run.close()
    recs, _ = _requests(rec)
    ids = [r.request_id for r in recs]
    assert len(ids) == len(set(ids)) and len(recs) >= 10, "every record once, no two clients' ids alike"
    assert {r.extra["client"] for r in recs} == {1, 2}
    for r in recs:  # on the driver's clock: one machine, so each record's own order holds after the shift
        assert r.t_scheduled_ns <= r.t_first_token_ns <= r.t_done_ns
    from measure.machine.recorder import read_jsonl

    head = read_jsonl(rec)[0][0]
    assert [x["client"] for x in head.line["ray"]["client_list"]] == [1, 2]


def _signal_later(clients, plan: list[tuple[float, int, int]], fired: dict[int, float]):
    """Signals sent to client actors' processes at set times after the clients were told to start."""
    def go():
        t0 = time.monotonic()
        for after_s, sig, which in plan:
            time.sleep(max(0.0, t0 + after_s - time.monotonic()))
            os.kill(clients[which].pid, sig)
            fired[which] = time.monotonic()
    threading.Thread(target=go, daemon=True).start()


def test_a_client_killed_or_stalled_mid_run_is_named_its_records_kept_its_unsent_share_said(cluster, server,
                                                                                              tmp_path):
    """Three clients on two nodes (said: some nodes run two): client 3 killed (SIGKILL) and client 1 stopped
    (SIGSTOP) while the schedule runs, client 2 goes on to the end."""
    from measure.control.bench.cluster import run_cluster
    from measure.machine.ray_cluster import ClusterSpec
    from measure.machine.ray_cluster import STALL_S

    plan, cfg, header = _plan(server, requests=60)  # 1.5 s of schedule from 1 s after the start
    said: list[tuple[float, str]] = []
    fired: dict[int, float] = {}
    run = run_cluster(ClusterSpec(cluster, 3), plan, cfg, header, tmp_path, lambda m: said.append((time.monotonic(), m)),
                      lost_s=STALL_S + 0.6,
                      on_start=lambda cs: _signal_later(cs, [(1.4, signal.SIGSTOP, 0), (1.6, signal.SIGKILL, 2)],
                                                        fired))
    assert any("2 nodes for 3 clients" in m for _, m in said), said
    stopped, fine, killed = run.clients
    assert (stopped.state, fine.state, killed.state) == ("lost", "done", "died"), \
        [(c.state, c.why) for c in run.clients]
    died = [t for t, m in said if "client 3/3" in m and " died: " in m]
    assert died and died[0] - fired[2] < 5.0, said
    stall = [t for t, m in said if "client 1/3" in m and "has not answered" in m]
    lost = [t for t, m in said if "client 1/3" in m and " lost: " in m]
    assert stall and lost and stall[0] < lost[0] and lost[0] - fired[0] < STALL_S + 3, said
    recs, other = _requests(tmp_path / "records.jsonl")
    by = {i: [r for r in recs if r.extra["client"] == i] for i in (1, 2, 3)}
    assert len(by[2]) == fine.requests
    for c in (stopped, killed):  # its records so far kept; the share it did not send said
        assert 0 < len(by[c.i]) == len(c.records) < c.requests and c.sent < c.requests
        (w,) = [w for w in run.warnings if f"client {c.i}/3" in w]
        assert f"{c.requests - c.sent} requests of the schedule" in w and "were not sent" in w, w
        (ev,) = [e for e in other if isinstance(e, EventLine) and e.type == "client" and e.more["client"] == c.i]
        assert ev.more["state"] == c.state and ev.more["sent"] == c.sent and ev.more["records"] == len(by[c.i])
    (cell,) = run.cells
    assert cell.requests.completed == len(recs), "the combined cell counts the records every client left"


def test_bench_ray_from_the_command_line_with_weights(cluster, server, tmp_path):
    """The command a user types: its own driver joins the cluster, shares 3:1, one records.jsonl, summary.json."""
    import json

    out = tmp_path / "o"
    p = run_cli(["bench", "--engine", "http", "--url", server, "--tokenizer", "none", "--max-tokens", str(T.TOKENS),
                 "--rate", "40", "--requests", "24", "--ray", cluster, "--clients", "2", "--weights", "3,1",
                 "--out", str(out)])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "client 1/2" in p.stdout and "18 of 24 requests" in p.stdout and "6 of 24 requests" in p.stdout
    recs, _ = _requests(out / "records.jsonl")
    assert sorted(r.extra["client"] for r in recs) == [1] * 18 + [2] * 6
    (cell,) = json.loads((out / "summary.json").read_text())
    assert cell["completed"] == 24 and cell["segments"] == "1/2 + 2/2"


def run_cli(args, env=None):
    return subprocess.run(CLI + args, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))


def one_line_error(p, says):
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and says in lines[0], p.stderr


BENCH = ["bench", "--engine", "http", "--url", "http://127.0.0.1:9/v1", "--tokenizer", "none", "--max-tokens", "8"]


@pytest.mark.parametrize("extra,says", [
    (["--clients", "2", "--rate", "5"], "--clients and --weights go with --ray"),
    (["--ray", "auto", "--requests", "4"], "--ray splits one open-loop schedule"),
    (["--ray", "auto", "--rate", "5", "--segment", "1/2"], "drop --segment and --start-at"),
    (["--ray", "auto", "--rate", "5", "--clients", "2", "--weights", "2,1,1"], "give 2 weights"),
    (["--ray", "auto", "--rate", "5", "--b", "1,2"], "one cell and one rep"),
])
def test_bench_ray_refuses_in_one_line(extra, says, tmp_path):
    one_line_error(run_cli(BENCH + extra + ["--out", str(tmp_path / "o")]), says)


DASH = ["--engine", "http", "--url", "http://127.0.0.1:9/v1", "--tokenizer", "none", "--max-tokens", "8"]


@pytest.mark.parametrize("extra,says", [
    (["--clients", "2"], "--clients and --weights go with --ray"),
    (["--ray", "auto", "--clients", "2", "--weights", "2,1,1"], "give 2 weights"),
    (["--ray", "auto", "--peer", "127.0.0.1:9400"], "drop --peer"),
])
def test_the_dashboard_ray_refuses_in_one_line(extra, says):
    one_line_error(run_cli(DASH + extra), says)


def test_without_ray_it_says_what_to_install(tmp_path):
    """Ray not importable (a package named ray that fails to import, first on the path): one line, exit 2."""
    fake = tmp_path / "shadow" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no ray here')\n")
    p = run_cli(BENCH + ["--ray", "auto", "--rate", "5", "--out", str(tmp_path / "o")],
                env={"PYTHONPATH": os.pathsep.join([str(fake.parent), str(Path(__file__).resolve().parents[2])])})
    one_line_error(p, "pip install 'inference-top[cluster]'")
    p = run_cli(DASH + ["--ray", "auto"], env={"PYTHONPATH": os.pathsep.join([str(fake.parent), str(Path(
        __file__).resolve().parents[2])])})
    one_line_error(p, "pip install 'inference-top[cluster]'")  # the dashboard's --ray


def test_a_cluster_nobody_answers_at_is_one_line_not_a_hang(tmp_path):
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'inference-top[cluster]'")
    t0 = time.monotonic()
    p = run_cli(BENCH + ["--ray", f"127.0.0.1:{free_port()}", "--rate", "5", "--out", str(tmp_path / "o")])
    one_line_error(p, "nothing answers at")
    one_line_error(run_cli(DASH + ["--ray", f"127.0.0.1:{free_port()}"]), "nothing answers at")  # the dashboard
    assert time.monotonic() - t0 < 30


def test_nothing_of_ray_is_imported_on_the_paths_that_do_not_use_it():
    code = ("import sys, tui.cli, measure.control.bench.sweep, measure.sources.http_pool, measure.control.bench.runs; "
            "sys.exit(1 if any(m == 'ray' or m.startswith('ray.') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_weights_deal_every_request_once_in_proportion_spread_through_the_schedule():
    from measure.core.arrivals import ArrivalSpec
    from measure.core.clients import Segment, deal

    assert deal([1, 1, 1], 7) == [1, 2, 3, 1, 2, 3, 1]  # equal weights: docs/design/client-machines.md's round robin
    assert deal([2, 1, 1], 8) == [1, 2, 3, 1, 1, 2, 3, 1]
    sched = ArrivalSpec("poisson", rate=50.0, seed=2)
    parts = [Segment(sched.make(40, 0), i, 3, t0_ns=0, weights=[2, 1, 1]) for i in (1, 2, 3)]
    got = [p.due_indexed(2**62, 0) for p in parts]
    assert [len(g) for g in got] == [20, 10, 10]
    whole = sorted(idx for g in got for idx, _ in g)
    assert whole == list(range(40)), "every request of the schedule in exactly one share"
    offsets = dict(sum(got, []))
    one = sched.make(40, 0)
    assert offsets == dict(enumerate(one.due(0, 0) + one.due(2**62, 0))), "each at its own scheduled time"
    assert max(idx for idx, _ in got[1]) >= 36, "a share spreads over the whole span, not a block"


def test_the_clock_offset_is_inside_half_the_round_trip():
    """Another clock 5 ms ahead, read at an unknown point of each round trip (asymmetric paths): the offset found
    is within the bound of the truth, the bound half the shortest round trip."""
    import random

    from measure.machine.ray_cluster import measure_offset

    rng = random.Random(1)
    now = [0]

    def tick() -> int:
        return now[0]

    def read() -> int:
        there = rng.randrange(100_000, 2_000_000)  # the way there, then back: unequal
        now[0] += there
        seen = now[0] + 5_000_000
        now[0] += rng.randrange(50_000, 3_000_000)
        return seen

    off, bound, rtt = measure_offset(read, trips=16, now=tick)
    assert abs(off - 5_000_000) <= bound and bound == rtt // 2 + 1 and rtt < 5_000_000


@pytest.mark.parametrize("text,n,says", [("2,x", 2, "whole numbers"), ("2,0", 2, "≥ 1"), ("2,1,1", 2, "give 2")])
def test_weights_are_checked_in_one_line(text, n, says):
    from measure.control.bench.cluster import ClusterError, parse_weights

    with pytest.raises(ClusterError, match=says):
        parse_weights(text, n)
    assert parse_weights("2,1,1", None) == [2, 1, 1]


class _Calls:
    """A client actor's `call.remote` as the driver uses it: what it was sent, in order (no Ray)."""

    def __init__(self):
        self.sent = []
        self.call = self

    def remote(self, name, *args):
        self.sent.append((name, args))


def test_the_live_clients_deal_b_users_and_rate_by_weight_and_their_ids_never_meet():
    from types import SimpleNamespace

    from measure.sources.ray_clients import ID_STRIDE, LiveClient, RayClients
    from measure.core.workload import ClosedLoop, ClosedShare, Load, Poisson

    plan = SimpleNamespace(meta=lambda: SimpleNamespace(engine="http", model_bytes=0), endpoints=[], bs=[3])
    src = RayClients(plan, lambda: None, "auto", 2, [2, 1], events=True)
    src.clients = [LiveClient(1, 2, 2, _Calls()), LiveClient(2, 2, 1, _Calls())]
    src.set_batch("http", 3)
    assert [c.streams for c in src.clients] == [2, 1]
    wl = SimpleNamespace(key="w")
    src.set_users(5)  # --users 5 over weights 2,1: the weighted deal, 3 users and 2
    src.set_load(Load(wl, ClosedLoop(5), 8))
    loads = [[a for n, a in c.actor.sent if n == "set_load"][-1] for c in src.clients]
    users = [[a for n, a in c.actor.sent if n == "set_users"][-1][0] for c in src.clients]
    assert users == [3, 2] and all(isinstance(lo[0].arrivals, ClosedShare) for lo in loads)
    assert loads[0][0].arrivals.users + loads[1][0].arrivals.users == 5
    assert loads[0][1] != loads[1][1] and abs(loads[0][1] - loads[1][1]) >= ID_STRIDE  # id blocks apart
    src.set_users(None)  # an endless Poisson stream: parts at 2/3 and 1/3 of the rate
    src.set_load(Load(wl, Poisson(9.0), 8))
    parts = [[a for n, a in c.actor.sent if n == "set_load"][-1][0].arrivals for c in src.clients]
    assert [p.rate for p in parts] == [6.0, 3.0]
    src.set_batch("http", 1)  # B below the clients: the second holds no stream and no load
    assert [c.streams for c in src.clients] == [1, 0]
    assert src.clients[1].actor.sent[-1] == ("set_load", (None,))


class _Ref:
    """A fake Ray object ref: ready with a value, ready with an error, or never ready."""

    def __init__(self, value=None, ready=True):
        self.value, self.ready = value, ready


class _FakeRay:
    class exceptions:  # noqa: N801 - Ray's name
        class RayError(Exception):
            pass

        class GetTimeoutError(RayError):
            pass

    def __init__(self):
        self.killed = []

    def wait(self, refs, num_returns, timeout):
        return [r for r in refs if r.ready], [r for r in refs if not r.ready]

    def get(self, ref, timeout=None):
        if isinstance(ref.value, Exception):
            raise ref.value
        return ref.value

    def kill(self, actor, no_restart=True):
        self.killed.append(actor)


class _Actor:
    """A client actor whose takes answer as `answers` says, one a take (the last one again after)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.take = self

    def remote(self):
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_the_client_group_names_a_dead_actor_a_stalled_one_and_stops_a_silent_one_where_told(monkeypatch):
    """machine/ray_cluster.ClientGroup's poll, both uses' rules, on a fake Ray and a fake clock (no cluster): an
    answer absorbed; Ray's error at a take → died; silent past STALL_S named once and stopped past lost_s where
    given (bench); where not (live) named once and said again when it answers."""
    from types import SimpleNamespace

    import measure.machine.ray_cluster as RC

    now = [100.0]
    monkeypatch.setattr(RC, "time", SimpleNamespace(monotonic=lambda: now[0], perf_counter_ns=lambda: 0))
    fake = _FakeRay()
    said, got, gone = [], [], []
    group = RC.ClientGroup.__new__(RC.ClientGroup)
    group.ray, group.say, group.stopped = fake, lambda text, level: said.append((level, text)), None
    dead = fake.exceptions.RayError("The actor died unexpectedly")
    late = _Ref(ready=False)
    clients = [RC.RayClient(1, 3, actor=_Actor(_Ref("a"))), RC.RayClient(2, 3, actor=_Actor(_Ref(dead))),
               RC.RayClient(3, 3, actor=_Actor(late))]
    absorb, lose = (lambda c, x: got.append((c.i, x))), (lambda c, state, why: gone.append((c.i, state, why)))
    group.poll(clients, absorb, lose, lost_s=5.0)
    assert got == [(1, "a")] and gone == [(2, "died", "The actor died unexpectedly")] and not said
    following = [clients[0], clients[2]]
    for step in (RC.STALL_S + 0.5, 1.0):  # past STALL_S: named once; still silent a second later: not again
        now[0] += step
        group.poll(following, absorb, lose, lost_s=5.0)
    assert [t for lvl, t in said if lvl == "warn"] == [
        "client 3/3 on ? (?, pid None) has not answered for 4 s: stalled? (stopped after 5 s)"]
    now[0] += 1.0  # past lost_s: stopped and lost
    group.poll(following, absorb, lose, lost_s=5.0)
    assert fake.killed == [clients[2].actor] and gone[-1] == (3, "lost", "no answer for 6 s (stalled), stopped")
    # the live dashboard's rule (no lost_s): named, never stopped, and said again once it answers
    said.clear()
    fake.killed.clear()
    c = RC.RayClient(1, 1, actor=_Actor(late))
    group.poll([c], absorb, lose)
    now[0] += 10.0
    group.poll([c], absorb, lose)
    assert said == [("warn", "client 1/1 on ? (?, pid None) has not answered for 10 s: stalled?")] and not fake.killed
    late.ready, late.value = True, "b"
    group.poll([c], absorb, lose)
    assert got[-1] == (1, "b") and said[-1] == ("info", "client 1/1 on ? (?, pid None) answers again")
