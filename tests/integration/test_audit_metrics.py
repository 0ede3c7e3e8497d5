"""Issue 22 (audit items 6, 9, 10, 11 and its extra points) and issue 21's report bandwidth: each test states the
hand-computed case it checks, and fails on the code before the fix."""
import json
import subprocess
import sys
import time

import pytest

from measure.control.bench import report as R, runs as RU
from measure.control.live.stats import LiveStats
from measure.control.bench.cell import Cell, Spec
from measure.control.bench.sweep import format_table
from measure.machine import power
from measure.core import metrics as M
from measure.core.records import RequestRecord
from measure.core.lines import RunHeader, Sample
from measure.core.units import NS

MS = 1_000_000


def rec(rid, sched, tokens, done=None, *, k=1, b=1, mode="instances", start=None, worker=1, pid=None, error=None,
        finish="length", **more):
    """A record from times in seconds (tokens: their timestamps)."""
    ns = [int(round(t * NS)) for t in tokens]
    return RequestRecord(run_id="r", request_id=rid, mode=mode, engine="e", model="m", model_bytes=1_000_000_000,
                         k=k, b=b, worker=worker, pid=pid, t_scheduled_ns=int(sched * NS),
                         t_submitted_ns=int(sched * NS), t_started_ns=int((sched if start is None else start) * NS),
                         t_first_token_ns=ns[0] if ns else None,
                         t_done_ns=int((done if done is not None else (tokens[-1] if tokens else sched)) * NS),
                         token_ns=ns, output_tokens=len(ns), error=error, finish_reason=finish, **more)


# ---- item 6: ITL over chunk arrivals --------------------------------------------------------------------------
def test_itl_is_over_chunk_arrivals_when_a_chunk_carries_several_tokens():
    """A server packing 3 tokens per chunk, one chunk every 30 ms: tokens at 0, 0, 0, 30, 30, 30, 60, 60, 60 ms.
    The gaps between chunk arrivals are 30 and 30 ms, so ITL p50 = 30 ms (it read 0.0 ms: six of the eight
    token-to-token gaps are the zeros inside a chunk). TPOT stays (60 − 0) ÷ 8 = 7.5 ms."""
    toks = [0.0] * 3 + [0.030] * 3 + [0.060] * 3
    r = rec(1, 0.0, toks)
    assert M.itls([r]) == pytest.approx([0.030, 0.030])
    s = M.summarize([r])
    assert s["median_itl_ms"] == pytest.approx(30.0)
    assert s["median_tpot_ms"] == pytest.approx(7.5)
    # the live panel's ITL p50 is the same figure
    live = LiveStats(5.0)
    live.add_record(r)
    assert live.request_numbers()["itl_p50"] == pytest.approx(0.030)


# ---- item 9: a recording's concurrency and batch bandwidth over each level's own periods -----------------------
def _periods_samples(plan):
    """Samples every 0.5 s for [(k, b, mode, start_s, end_s)], and the last one at the end."""
    samples = []
    for k, b, mode, a, e in plan:
        samples += [Sample(t_ns=int((a + i / 2) * NS), k=k, b=b, mode=mode, paused=False, system={})
                    for i in range(int((e - a) * 2))]
    samples.append(Sample(t_ns=int(plan[-1][4] * NS), k=plan[-1][0], b=plan[-1][1], mode=plan[-1][2], paused=False,
                          system={}))
    return samples


def test_report_concurrency_is_over_the_levels_own_periods():
    """K=2 for 60 s (two streams, each busy the whole period), K=1 for 60 s, K=2 again for 60 s. K=2's achieved
    concurrency = 2 × 120 s busy ÷ its 120 s = 2.0; over first scheduled → last done it read 240 ÷ 180 = 1.33."""
    plan = [(2, 1, "instances", 0, 60), (1, 1, "instances", 60, 120), (2, 1, "instances", 120, 180)]
    records, rid = [], 0
    for k, _b, _m, a, e in plan:
        for w in range(k):
            rid += 1
            records.append(rec(rid, a, [a + 0.1 * (i + 1) for i in range(int((e - a) * 10) - 1)], e, k=k, worker=w))
    cells = {c.k: c for c in RU.cells_from_records(records, RunHeader(model_bytes=1), _periods_samples(plan))}
    assert cells[2].achieved_concurrency == pytest.approx(2.0, rel=1e-3)
    assert cells[1].achieved_concurrency == pytest.approx(1.0, rel=1e-3)


def test_report_batch_bandwidth_is_over_the_levels_own_periods():
    """Batch mode, W = 1 GB. B=2 for 60 s at 10 steps/s (both sequences' tokens share each step's timestamp),
    B=1 for 60 s, B=2 again for 60 s. B=2's bandwidth product = 10 steps/s × 1 GB = 10 GB/s over its own 120 s;
    over first scheduled → last done it read 1198 steps ÷ 180 s × 1 GB = 6.66 GB/s."""
    plan = [(1, 2, "batch", 0, 60), (1, 1, "batch", 60, 120), (1, 2, "batch", 120, 180)]
    records, rid = [], 0
    for k, b, mode, a, e in plan:
        steps = [a + 0.1 * (i + 1) for i in range(int((e - a) * 10) - 1)]
        for _seq in range(b):
            rid += 1
            records.append(rec(rid, a, steps, e, k=k, b=b, mode=mode, pid=7))
    cells = {c.b: c for c in RU.cells_from_records(records, RunHeader(model_bytes=1_000_000_000),
                                                   _periods_samples(plan))}
    assert cells[2].bandwidth.gbps == pytest.approx(10.0 * 599 / 600, rel=1e-3)
    assert cells[1].bandwidth.gbps == pytest.approx(10.0 * 599 / 600, rel=1e-3)
    assert cells[2].achieved_concurrency == pytest.approx(2.0, rel=1e-3)


# ---- extra: a p99 from too few requests is marked ---------------------------------------------------------------
def _cell_of(n):
    """n requests, TTFT 10, 20, …, n × 10 ms: their p99 (linear interpolation) lies between the two largest."""
    recs = [rec(i, 0.0, [0.010 * (i + 1), 0.010 * (i + 1) + 0.005]) for i in range(n)]
    return Cell.measure(recs, Spec(1, 1, 1_000_000_000))


def test_a_p99_of_fewer_than_100_requests_is_marked_approximate():
    """16 requests (a bench default): TTFT p99 sits at rank 0.99 × 15 = 14.85, so 150 + 0.85 × 10 = 158.5 ms,
    between the two largest: no request lies above it, it is about their maximum, and the bench table, the
    report and the dashboard mark it '≈'. 200 requests: two lie above p99, shown plain."""
    few, many = _cell_of(16), _cell_of(200)
    assert few.requests.ttft.p99 == pytest.approx(158.5)
    table = format_table([few]).splitlines()
    assert f"≈{few.requests.ttft.p99:.0f}ms" in table[2]
    assert "≈: p99 of fewer than 100 requests" in table[-2]  # the legend says what ≈ means
    assert "≈" not in format_table([many]).splitlines()[2]
    run = RU.Run("t", RunHeader(model_bytes=1), [few, many.to_json() | {"k": 2}])
    md = R.markdown([run], [])
    rows = [line for line in md.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert f"| ≈{few.requests.ttft.p99:.0f} |" in rows[0] and "≈" not in rows[1]
    assert "≈: p99 of fewer than 100 requests" in md


def test_the_dashboard_marks_a_p99_of_fewer_than_100_requests():
    from sim import run_for, sim_controller
    from tui.app import InferenceTop

    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 5)
    snap = c.snapshot()
    assert 0 < snap.numbers.requests < 100
    text = InferenceTop(c, live=False)._render_numbers(snap).plain
    assert f"p99 ≈{snap.numbers.ttft_p99 * 1e3:.1f} ms (queue-incl.)" in text
    assert "chunk ITL p50" in text  # item 6: the panel says which ITL it shows


# ---- items 10 and 11: power, counted once, over the cell -------------------------------------------------------
class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _zone(root, name, label, uj, max_uj=None):
    d = root / name
    d.mkdir()
    (d / "name").write_text(label + "\n")
    (d / "energy_uj").write_text(str(uj))
    if max_uj is not None:
        (d / "max_energy_range_uj").write_text(str(max_uj))
    return d


def _rapl_tree(root):
    """A two-socket box as /sys/class/powercap lists it: the package zones, their core/uncore/dram sub-zones,
    and the MMIO interface's duplicate of package 0. Package 0 draws 28 W, package 1 10 W; core and uncore are
    part of their package; the MMIO zone counts package 0's energy again."""
    zones = {"intel-rapl:0": ("package-0", 28), "intel-rapl:0:0": ("core", 20), "intel-rapl:0:1": ("uncore", 3),
             "intel-rapl:1": ("package-1", 10), "intel-rapl:1:0": ("core", 6), "intel-rapl:1:1": ("dram", 2),
             "intel-rapl-mmio:0": ("package-0", 28)}
    for name, (label, _w) in zones.items():
        _zone(root, name, label, 1_000_000)
    return zones


def _advance(root, zones, seconds):
    for name, (_label, watts) in zones.items():
        f = root / name / "energy_uj"
        f.write_text(str(int(f.read_text()) + int(watts * seconds * 1e6)))


def test_rapl_counts_top_level_packages_once(tmp_path):
    """28 W + 10 W = 38 W drawn; summing every zone the glob matched read 28 + 20 + 3 + 10 + 6 + 2 + 28 = 97 W
    (core and uncore are inside their package, MMIO is package 0 again; DRAM is left out: packages only):
    J/token 2.55× too high."""
    zones = _rapl_tree(tmp_path)
    assert power.PowerMeter(root=str(tmp_path), nvml=False).source == "RAPL (intel-rapl:0, intel-rapl:1)"
    clock = FakeClock()
    meter = power.PowerMeter(root=str(tmp_path), nvml=False, clock=clock)
    assert meter.sample() is None  # the first reading starts the interval
    clock.t += 10.0
    _advance(tmp_path, zones, 10.0)
    assert meter.sample() == pytest.approx(38.0)


def test_rapl_mmio_is_used_only_where_the_msr_zones_are_absent(tmp_path):
    _zone(tmp_path, "intel-rapl-mmio:0", "package-0", 5_000_000)
    _zone(tmp_path, "intel-rapl-mmio:0:0", "dram", 5_000_000)
    assert power.PowerMeter(root=str(tmp_path), nvml=False).source == "RAPL (intel-rapl-mmio:0)"


def test_rapl_counter_wrap_is_added_back(tmp_path):
    """A package counter at 262 143 328 850 µJ of its 262 143 328 850 range wraps to 9 999 999: 10 J in 2 s."""
    d = _zone(tmp_path, "intel-rapl:0", "package-0", 262_143_328_850 - 1, max_uj=262_143_328_850)
    clock = FakeClock()
    meter = power.PowerMeter(root=str(tmp_path), nvml=False, clock=clock)
    meter.sample()
    (d / "energy_uj").write_text("9999999")
    clock.t += 2.0
    assert meter.sample() == pytest.approx(5.0)


class FakeNvml:
    """pynvml as it answers on a box with `n` GPUs: each draws `busy_w` while `busy` is set, `idle_w` after.
    With energy=True the driver's total-energy counter (mJ) integrates that draw on `clock`."""

    class NVMLError(Exception):
        pass

    def __init__(self, clock, n=1, busy_w=300.0, idle_w=50.0, energy=True):
        self.clock, self.n, self.busy_w, self.idle_w, self.energy = clock, n, busy_w, idle_w, energy
        self.busy = False
        self.mj = [0.0] * n
        self.t_last = clock()
        self.inits = 0

    def _tick(self):
        now = self.clock()
        for i in range(self.n):
            self.mj[i] += (self.busy_w if self.busy else self.idle_w) * (now - self.t_last) * 1e3
        self.t_last = now

    def set_busy(self, busy):
        self._tick()
        self.busy = busy

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetPowerUsage(self, h):
        return int((self.busy_w if self.busy else self.idle_w) * 1e3)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.energy:
            raise self.NVMLError("Not Supported")
        self._tick()
        return int(self.mj[h])


def test_nvml_energy_is_integrated_over_the_cell(monkeypatch):
    """A GPU drawing 300 W for a 10 s cell, idle (50 W) when the cell's last reading is taken: the cell's power
    is 3000 J ÷ 10 s = 300 W from the energy counter; one power reading after the cell read 50 W (J/token 6×
    too low)."""
    clock = FakeClock()
    nv = FakeNvml(clock)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    meter = power.PowerMeter(root="/nonexistent", clock=clock)
    assert meter.source == "NVML (1 GPU, energy counter)"
    meter.sample()
    nv.set_busy(True)
    clock.t += 10.0
    nv.set_busy(False)
    assert meter.sample() == pytest.approx(300.0)


def test_nvml_without_an_energy_counter_integrates_sampled_power():
    """A GPU with no total-energy counter (before Volta): its power is read every 20 ms while the meter lives
    and integrated; 300 W for 0.6 s then idle at the reading reads ≈ 300 W (one reading at the end said 50)."""
    nv = FakeNvml(time.monotonic, energy=False)
    meter = power.PowerMeter(root="/nonexistent", nvml=nv, poll_s=0.02)
    try:
        assert meter.source == "NVML (1 GPU, sampled power)"
        meter.sample()
        nv.busy = True
        time.sleep(0.6)
        nv.busy = False
        w = meter.sample()
    finally:
        meter.close()
    assert 270 < w <= 301


def test_rapl_and_nvml_are_summed(tmp_path, monkeypatch):
    """A Linux GPU box with readable RAPL: 38 W of CPU packages + 2 GPUs × 300 W = 638 W; RAPL alone (38 W) was
    read and the GPUs' 600 W never counted."""
    zones = _rapl_tree(tmp_path)
    clock = FakeClock()
    nv = FakeNvml(clock, n=2)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    assert power.PowerMeter(root=str(tmp_path)).source == "RAPL (intel-rapl:0, intel-rapl:1) + NVML (2 GPUs, energy counter)"
    meter = power.PowerMeter(root=str(tmp_path), clock=clock)
    meter.sample()
    nv.set_busy(True)
    clock.t += 10.0
    _advance(tmp_path, zones, 10.0)
    assert meter.sample() == pytest.approx(638.0)


# ---- issue 21: report of an HTTP recording made with --model-bytes keeps its bandwidth ----------------------
def test_report_of_an_http_recording_shows_the_bandwidth_the_dashboard_showed(tmp_path):
    """Null server, 20 ms per token, --model-bytes 1G, B=2: one server step per 20 ms reads W = 1 GiB, so the
    dashboard showed W ÷ TPOT p50 ≈ 1.074 GB ÷ 20 ms ≈ 53.7 GB/s and the report gives the sweep's figure for the
    level's records (W ÷ their TPOT p50, as the bench computes it); it gave None (the instances-mode rule
    tok/s × W re-applied, which has no answer over HTTP)."""
    from conftest import NullServerProcess, record_dashboard

    srv = NullServerProcess(ttft_ms=5.0, itl_ms=20.0)
    try:
        path, _ = record_dashboard(tmp_path, srv.url, ["--b", "2", "--max-tokens", "8", "--model-bytes", "1G"])
    finally:
        srv.kill()
    run = RU.load_run(path)
    (cell,) = [c.to_json() for c in run.cells if c.mode == "http"]
    assert cell.get("periods")  # a recording: the level's own periods were used
    w = run.header.model_bytes
    assert w == 2**30  # 1G: a size is binary
    bench = Cell.measure([r for r in run.records if r.mode == "http"],
                         Spec(cell["k"], cell["b"], w, mode="http")).to_json()
    assert cell["bandwidth_gbps"] == pytest.approx(bench["bandwidth_gbps"])
    assert cell["bandwidth_gbps"] == pytest.approx(w / (cell["median_tpot_ms"] / 1e3) / 1e9)
    shown = sorted(s.bw_gbps for s in run.samples if s.bw_gbps)
    assert shown and cell["bandwidth_gbps"] == pytest.approx(shown[len(shown) // 2], rel=0.2)
    assert 40 < cell["bandwidth_gbps"] < 58  # 1.07 GB ÷ 20 ms = 53.7 GB/s
    md = R.markdown([run], [])
    assert f"| {cell['bandwidth_gbps']:.2f} |" in md


# ---- extra: reasoning models' reasoning_content chunks are tokens; TTFAT beside TTFT ---------------------------
def test_reasoning_chunks_are_tokens_and_time_to_first_answer_token_is_reported():
    """A chat server that reasons for 4 tokens before answering (delta.reasoning_content, as vLLM and
    llama-server send it), 5 ms to the first token, 20 ms per token, max_tokens 8. All 8 tokens count (4
    were, the reasoning ones dropped); TTFT is the first reasoning token's ≈ 5 ms (it read ≈ 85 ms, the first
    answer token's); TTFAT = 5 + 4 × 20 = 85 ms is reported beside it."""
    from engines.null_server import Behaviour, NullServer
    from measure.core.records import RunMeta
    from measure.core.workload import ClosedLoop, Load
    from measure.sources.http import HttpSource
    from presets import Workload

    with NullServer(Behaviour(ttft_ms=5.0, itl_ms=20.0, reasoning_tokens=4)) as srv:
        src = HttpSource(srv.url, RunMeta(engine="http", model="?", model_bytes=0, mode="http"), b=1,
                         endpoint="chat", events=False)
        src.start()
        try:
            recs = src.run_requests(Load(Workload("t", "tiny", prompts=("Hello there",)), ClosedLoop(1, 3), 8, True),
                                    timeout=30)
        finally:
            src.close()
    assert len(recs) == 3 and all(r.error is None for r in recs)
    for r in recs:
        assert r.output_tokens == 8 and r.reasoning_tokens == 4
        assert (r.t_first_answer_ns - r.t_first_token_ns) / MS == pytest.approx(80.0, abs=15.0)
    s = M.summarize(recs)
    assert s["median_ttft_ms"] < 40 and s["median_ttfat_ms"] == pytest.approx(s["median_ttft_ms"] + 80, abs=15)
    assert s["reasoning_tokens"] == 12
    cell = Cell.measure(recs, Spec(1, 1, 0, mode="http"))
    assert "TTFAT p50" in format_table([cell]).splitlines()[2]
    assert "TTFAT p50" in R.markdown([RU.Run("t", RunHeader(model_bytes=0), [cell])], [])


def test_without_reasoning_ttfat_is_ttft():
    r = rec(1, 0.0, [0.05, 0.07])
    assert M.ttfat(r) == M.ttft(r) == pytest.approx(0.05)
    assert M.summarize([r])["median_ttfat_ms"] == pytest.approx(50.0)
    only_reasoning = rec(2, 0.0, [0.05, 0.07], reasoning_tokens=2)  # cut at max_tokens before any answer
    assert M.ttfat(only_reasoning) is None


# ---- extra: a server that stops before max_tokens although ignore_eos was sent is flagged per cell ------------
def test_a_server_that_ignores_ignore_eos_is_flagged_in_the_bench_cell_and_the_report(tmp_path):
    """A server that ends every answer after 3 tokens (finish_reason 'stop') whatever ignore_eos says; bench
    asks 6 tokens with EOS ignored (the default). Every one of the 4 requests stopped early: the cell says
    stopped_early 4, the bench table and the report say so. With --stop-at-eos an early stop is expected and
    not flagged."""
    from engines.null_server import Behaviour, NullServer

    with NullServer(Behaviour(ttft_ms=5.0, itl_ms=5.0, eos_after=3)) as srv:
        outs = {}
        for name, extra in (("eos-ignored", []), ("stop-at-eos", ["--stop-at-eos"])):
            outs[name] = tmp_path / name
            p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", srv.url,
                                "--tokenizer", "none", "--requests", "4", "--max-tokens", "6", *extra,
                                "--out", str(outs[name])], capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, p.stderr
            if name == "eos-ignored":
                assert "STOPPED EARLY 4/4" in p.stdout
            else:
                assert "STOPPED EARLY" not in p.stdout
    (cell,) = json.loads((outs["eos-ignored"] / "summary.json").read_text())
    assert cell["stopped_early"] == 4 and cell["total_output_tokens"] == 12
    (other,) = json.loads((outs["stop-at-eos"] / "summary.json").read_text())
    assert not other.get("stopped_early")
    run = RU.load_run(outs["eos-ignored"])
    assert "STOPPED EARLY 4/4" in R.markdown([run], [])
    # the same records without summary.json (a run cut short, or a recording): the header says what was asked
    (outs["eos-ignored"] / "summary.json").unlink()
    (again,) = RU.load_run(outs["eos-ignored"]).cells
    assert again.requests.stopped_early == 4


def test_stopped_early_by_hand():
    """max_tokens 6, EOS ignored: A ran to 6 ('length'); B stopped at 3 ('stop'); C 'stop' at 6 (at the limit:
    not early); D failed. One stopped early; without a fixed max_tokens (per-request lengths) 'stop' alone
    counts: two."""
    recs = [rec(1, 0, [0.1 * i for i in range(1, 7)]), rec(2, 0, [0.1, 0.2, 0.3], finish="stop"),
            rec(3, 0, [0.1 * i for i in range(1, 7)], finish="stop"), rec(4, 0, [], error="x", finish="error")]
    assert M.stopped_early(recs, 6) == 1 and M.stopped_early(recs) == 2
    assert Cell.measure(recs, Spec(1, 1, 1, max_tokens=6, ignore_eos=True)).requests.stopped_early == 1
    assert "stopped_early" not in Cell.measure(recs, Spec(1, 1, 1, max_tokens=6, ignore_eos=False)).to_json()


def test_bench_batch_bandwidth_by_hand():
    """A bench cell in batch mode (the sweep's rule, shared with the report's since batch_reads): B=2, one
    step every 0.1 s from 0.1 to 1.0 s (10 steps, both sequences' tokens in each), scheduled at 0, done at 1 s:
    10 steps/s × 1 GB = 10 GB/s; with 100 B of KV per token and 4-token prompts, the steps read Σ over both
    sequences of (4 + i) × 100 B for i = 0..9 = 2 × 8500 B in 1 s."""
    steps = [0.1 * (i + 1) for i in range(10)]
    recs = [rec(i, 0.0, steps, 1.0, b=2, mode="batch", pid=7, prompt_tokens=4) for i in range(2)]
    cell = Cell.measure(recs, Spec(1, 2, 1_000_000_000, mode="batch", kv_bytes_per_token=100.0))
    assert cell.bandwidth.steps_per_s == pytest.approx(10.0, rel=1e-6)
    assert cell.bandwidth.kv_read_gbps == pytest.approx(17_000 / 1e9, rel=1e-6)
    assert cell.bandwidth.gbps == pytest.approx(10.0 + 17_000 / 1e9, rel=1e-6)
