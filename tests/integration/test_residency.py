"""Residency (docs/residency.md): the parsers over what Linux and macOS print, the reading between two moments,
the residency roofline, which memory gives out first, and the live readers on this very process."""
import mmap
import os
import sys
from pathlib import Path

import pytest

from measure.core import residency as R
from measure.core.units import GiB, MiB

MAC = Path(__file__).parents[1] / "data" / "mac"

SMAPS = """\
55d0c0000000-55d0c0021000 r--p 00000000 fd:00 1234 /usr/bin/python3.11
Size:                132 kB
Rss:                 132 kB
Swap:                  0 kB
7f0000000000-7f0010000000 r--s 00000000 fd:00 999 /models/m.gguf
Size:             262144 kB
KernelPageSize:        4 kB
Rss:              100000 kB
Swap:                  0 kB
7f0010000000-7f0010100000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                1024 kB
Swap:                512 kB
7f0020000000-7f0020001000 r--s 10000000 fd:00 999 /models/m.gguf
Size:                  4 kB
Rss:                   4 kB
Swap:                  0 kB
"""

ROLLUP = """\
00400000-7fff00000000 ---p 00000000 00:00 0                              [rollup]
Rss:              200000 kB
Pss:              150000 kB
Anonymous:         90000 kB
Swap:              30000 kB
"""

STAT = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 77 0 5 6 0 0 20 0 3 0 100 1000 200"


def test_parsers_read_what_linux_prints():
    mapped, rss, swap = R.parse_smaps_of(SMAPS, "/models/m.gguf")
    assert (mapped, rss, swap) == (262148 * 1024, 100004 * 1024, 0)  # both mappings of the file, nothing else
    assert R.parse_smaps_of(SMAPS, "/models/other.gguf") == (0, 0, 0)
    kb = R.parse_kb(ROLLUP)
    assert kb["Rss"] == 200000 * 1024 and kb["Anonymous"] == 90000 * 1024 and kb["Swap"] == 30000 * 1024
    assert R.parse_majflt(STAT) == 77  # the 12th field, past a command holding spaces and ')'
    assert R.parse_counters("pswpin 12\npgmajfault 900\nnr_free_pages 1\n")["pswpin"] == 12
    assert R.parse_counters("rchar: 10\nread_bytes: 4096\n")["read_bytes"] == 4096
    assert R.parse_psi("some avg10=12.50 avg60=1.00 avg300=0.00 total=5\nfull avg10=3.00 avg60=0 avg300=0 total=1") \
        == 12.5
    assert R.parse_psi("") is None


def _reading(t_s, majflt, read_bytes, pswpin, tokens, swap=0, mapped=True):
    p = R.ProcMemory(1, 300 * MiB, 50 * MiB, swap, 250 * MiB, 400 * MiB if mapped else 0,
                     200 * MiB if mapped else 0, majflt, read_bytes)
    s = R.SysMemory(int(t_s * 1e9), pswpin=pswpin, pressure=7.0, pressure_source="psi some avg10 %",
                    cgroup_limit=512 * MiB)
    return R.Reading(s, (p,), 400 * MiB, tokens)


def test_residency_between_two_readings():
    a = _reading(10.0, 100, 0, 1000, 50)
    b = _reading(12.0, 500, 200 * 10**6, 1000 + 2 * 256, 90)  # 2 s: 40 tokens, 400 faults, 200 MB read, 2 MiB swapped in
    r = R.residency(a, b)
    assert r.mmapped and r.weights_resident == 200 * MiB and r.weights_share == pytest.approx(0.5)
    assert r.majflt_per_token == pytest.approx(10.0)
    assert r.file_read_mbps == pytest.approx(100.0)
    assert r.swap_in_mbps == pytest.approx(2 * MiB / 2 / 1e6)
    f = r.fields()
    for key in ("weights_resident_bytes", "anon_swapped_bytes", "major_faults_per_token", "swap_in_mbps",
                "file_read_mbps", "memory_pressure", "cgroup_limit_bytes"):
        assert key in f
    assert "50% in memory (mmap)" in r.gauge() and "10 major faults/token" in r.gauge()
    # loaded weights: what is swapped out of a worker comes off its weights' residency
    lr = R.residency(_reading(0, 0, 0, 0, 0, swap=100 * MiB, mapped=False),
                     _reading(1, 0, 0, 0, 10, swap=100 * MiB, mapped=False))
    assert not lr.mmapped and lr.weights_resident == 300 * MiB and lr.anon_swapped == 100 * MiB


def test_mac_vm_stat_is_parsed_from_the_fixtures():
    idle = R.mac_vm((MAC / "vm_stat_48g_idle.txt").read_text())
    b32 = R.mac_vm((MAC / "vm_stat_48g_b32.txt").read_text())
    assert idle.page == b32.page == 16384
    assert b32.compressed_stored == 701234 * 16384 and b32.swapins == 938475
    rates = R.mac_rates(idle, b32, 100.0)
    assert rates["swap_in_mbps"] == pytest.approx((938475 - idle.swapins) * 16384 / 100 / 1e6)
    assert R.mac_rates(idle, b32, 0)["swap_in_mbps"] == 0.0


RATES = R.StorageRates(where="test", method="O_DIRECT", seq_gbps=2.0, rand_4k_mbps=40.0, swap_cluster_bytes=32768,
                       swap_mbps=200.0, mmap_gbps=1.0, mmap_fault_bytes=1 << 20, minor_fault_us=0.5,
                       read_ahead_bytes=1 << 20)


def test_residency_roofline_by_hand():
    # fits: the step is the resident one
    s = R.residency_step(0.05, 400 * MiB, 500 * MiB, RATES, mmapped=True)
    assert s.t_step_s == 0.05 and s.nonresident_bytes == 0 and s.via == "none"
    # mmap'ed, 100 MiB short: a sweep larger than the room brings back all it touches (KEPT = 0), at the plain
    # mmap rate (1 GB/s) plus a minor fault a page, after the step's own 50 ms (the CPU threads take the faults:
    # a sum): storage-bound
    s = R.residency_step(0.05, 400 * MiB, 300 * MiB, RATES, mmapped=True)
    miss = 400 * MiB - 300 * MiB * R.KEPT
    assert s.nonresident_bytes == pytest.approx(miss)
    assert s.t_step_s == pytest.approx(0.05 + miss / 1e9 + miss / 4096 * 0.5e-6) and s.binding == "storage"
    # swapped: a swap cluster's random read rate, plus a minor fault a page
    w = R.residency_step(0.05, 400 * MiB, 300 * MiB, RATES, mmapped=False)
    assert w.t_step_s == pytest.approx(0.05 + miss / 200e6 + miss / 4096 * 0.5e-6)
    assert w.via.startswith("swap") and w.slowdown > 10
    # a sweep measured in a memory cgroup is preferred to the page-out sweep, that to the plain rates; its faults
    # are inside its rate
    from dataclasses import replace

    both = replace(RATES, reread_file_mbps=500.0, memcg_file_mbps=250.0, reread_swap_mbps=100.0, memcg_swap_mbps=150.0)
    assert R.residency_step(0.05, 400 * MiB, 300 * MiB, both, True).t_step_s == pytest.approx(0.05 + miss / 250e6)
    assert R.residency_step(0.05, 400 * MiB, 300 * MiB, both, False).t_step_s == pytest.approx(0.05 + miss / 150e6)
    no_group = replace(both, memcg_file_mbps=None, memcg_swap_mbps=None)
    assert R.residency_step(0.05, 400 * MiB, 300 * MiB, no_group, True).t_step_s == pytest.approx(0.05 + miss / 500e6)
    # swapped with no group's sweep (not root, or its sweep ended early): the swap cluster's random reads, never the
    # page-out sweep (sequential through swap read-ahead: 5-6x an engine's swap-ins, docs/measurements.md §21)
    w2 = R.residency_step(0.05, 400 * MiB, 300 * MiB, no_group, False)
    assert w2.t_step_s == pytest.approx(w.t_step_s) and w2.via.endswith("(random 32 KiB reads (a swap cluster))")
    # by hand, pastwall's Gemma 3 270M mmap'ed at 0.70 (run 5): 17.0 ms resident (58.85 tok/s), 235 MiB back at
    # 2166 MB/s = 113.8 ms: 130.8 ms → 7.65 tok/s (the max, 113.8 ms, read 8.78 against 7.06 measured)
    g = R.residency_step(1 / 58.85, 235 * MiB, 139 * MiB, replace(RATES, memcg_file_mbps=2166.0), True)
    assert 1 / g.t_step_s == pytest.approx(7.65, abs=0.01)
    # where the reads go on beside the kernels (overlap: a Mac's GPU) a short step hides them: the max
    o = replace(R.residency_step(10.0, 400 * MiB, 399 * MiB, both, True), overlap=True)
    assert o.t_step_s == 10.0
    # no storage rates: no I/O term
    assert R.residency_step(0.05, 400 * MiB, 300 * MiB, None, True).t_step_s == 0.05


def test_which_memory_gives_out_first():
    lim = R.MemoryLimits(physical=24 * GiB, available=20 * GiB, swap_total=4 * GiB, swap_free=4 * GiB,
                         cgroup_limit=2 * GiB, cgroup_usage=int(1.5 * GiB), cgroup_name="cgroup v1 memory.limit_in_bytes")
    g = R.gives_out(lim, held=int(1.5 * GiB), per_unit=64 * MiB)
    assert g.headroom == GiB // 2 and g.units == 8 and g.memory.startswith("cgroup v1 memory.limit_in_bytes")
    assert "page cache" in g.memory and "0.5 GiB = 8 requests" in g.line()
    loaded = R.gives_out(R.MemoryLimits(24 * GiB, 3 * GiB, 4 * GiB, 4 * GiB, mmapped=False), held=0, per_unit=GiB)
    assert loaded.memory.startswith("anonymous pages") and loaded.units == 3 and loaded.limit.startswith("3.0 GiB available")
    assert "OOM" in R.gives_out(R.MemoryLimits(24 * GiB, 3 * GiB, mmapped=False), held=0).memory
    mac = R.MemoryLimits(48 * GiB, 40 * GiB, mac_working_set=36 * GiB, mac_wired=30 * GiB)
    assert R.gives_out(mac, held=0).memory == "Metal's wired working-set limit"
    roomy = R.MemoryLimits(48 * GiB, 4 * GiB, mac_working_set=36 * GiB, mac_wired=10 * GiB, mac_compressed=2 * GiB)
    assert R.gives_out(roomy, held=0).memory.startswith("compressed memory")
    past = R.gives_out(R.MemoryLimits(24 * GiB, 20 * GiB, cgroup_limit=GiB, cgroup_usage=2 * GiB), held=0)
    assert past.headroom == -GiB and "past it by 1.0 GiB" in past.line()


def test_first_level_past_the_wall_and_the_budget_skip():
    fit = R.LevelFit("B=8", 10 * GiB, 36 * GiB, R.residency_step(0.1, 10 * GiB, 36 * GiB, RATES, False), 80.0)
    over_step = R.residency_step(0.1, 40 * GiB, 36 * GiB, RATES, False)
    over = R.LevelFit("B=32", 40 * GiB, 36 * GiB, over_step, 32 / over_step.t_step_s)
    assert R.first_past([fit, over]) is over and R.first_past([fit]) is None
    note = R.past_wall_note(over, before_tps=80.0)
    assert note.startswith("B=32: working set 40.0 GiB > room 36.0 GiB: predicted") and "storage-bound" in note
    assert R.budget_skip(1.0, 256, 60.0) is not None and "256 tokens would take 256 s" in R.budget_skip(1.0, 256, 60)
    assert R.budget_skip(10.0, 256, 60.0) is None


linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture
def mapped(tmp_path):
    """A 4 MiB file of random bytes, just written (all in the page cache), mapped read-only here: (path, map)."""
    f = tmp_path / "weights.bin"
    f.write_bytes(os.urandom(4 * MiB))
    with open(f, "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
    yield f, m
    if not m.closed:
        m.close()


@linux
def test_live_readers_on_this_process(mapped):
    from measure.machine import residency as M

    f, m = mapped
    for off in range(0, 2 * MiB, mmap.PAGESIZE):  # half of it touched through the mapping
        m[off]
    me = M.proc_memory(os.getpid(), str(f))
    assert me is not None and me.weights_mapped == 4 * MiB and 2 * MiB <= me.weights_resident <= 4 * MiB
    assert me.anon > 0 and me.rss >= me.anon
    m.close()
    assert M.mincore_resident(f) == 4 * MiB  # just written: all in the page cache
    probe = M.ResidencyProbe(str(f), 4 * MiB, mincore=True)
    a = probe.read([os.getpid()], 0)
    b = probe.read([os.getpid()], 10)
    assert a.mincore_resident == 4 * MiB and R.residency(a, b).majflt_per_token is not None
    assert M.sys_memory().t_ns > 0


@linux
def test_storage_probe_reads_from_storage(tmp_path, monkeypatch):
    from measure.machine import storage as S

    monkeypatch.setattr(S, "PROBE_BYTES", 16 * MiB)
    monkeypatch.setattr(S, "RANDOM_S", 0.05)
    r = S.probe_storage(tmp_path)
    assert r.seq_gbps > 0 and r.rand_4k_mbps > 0 and r.swap_mbps > 0 and r.mmap_gbps > 0
    assert r.swap_cluster_bytes >= 4096 and r.minor_fault_us >= 0
    assert list(tmp_path.iterdir()) == []  # the test file is removed
    S.save("k", r)
    assert S.cached_rates("k") == r and S.cached_rates("other") is None
    from dataclasses import replace  # an entry measured the earlier way (shmem sweeps) is measured again

    S.save("old", replace(r, method_version=S.METHOD - 1))
    assert S.cached_rates("old") is None
    assert "storage" in r.describe()


def test_plan_marks_the_first_level_past_the_wall_by_hand():
    """docs/residency.md's case: Llama 3.1 8B bf16 on a 48 GB Mac at 4,096 tokens, budget 36 GiB, a sequence
    512 MiB of KV + 232 MiB of activations; B = 16's step 246.7 ms fits, B = 32's resident step 281.7 ms and
    2.31 GiB over comes back at the assumed 3 GB/s: max(281.7, 825) ms → 38.8 tok/s."""
    mem = R.LevelMemory(14.96 * GiB, 100 * MiB, 744 * MiB, mmapped=False)
    touched16, touched32 = 16.0e9 + 16 * 512 * MiB, 16.0e9 + 32 * 512 * MiB
    b16 = R.level_fit("B=16", (1, 16), 0.2467, touched16, mem, 36 * GiB, None, 3e9)
    b32 = R.level_fit("B=32", (1, 32), 0.2817, touched32, mem, 36 * GiB, None, 3e9)
    assert b16.fits and b16.tps == pytest.approx(16 / 0.2467)
    over = 14.96 * GiB + 100 * MiB + 32 * 744 * MiB - 36 * GiB
    assert not b32.fits and b32.step.nonresident_bytes == pytest.approx(over)
    assert b32.tps == pytest.approx(32 / (over / 3e9), rel=1e-6) and 38 < b32.tps < 40
    lines = R.format_fits([b16, b32])
    assert lines[0].startswith("residency: the first level past the wall is B=32") and "× the level before" in lines[0]
    # measured storage rates: everything touched comes back (KEPT = 0), far slower
    assert R.level_fit("B=32", (1, 32), 0.2817, touched32, mem, 36 * GiB, RATES).tps < b32.tps / 5
    assert R.format_fits([b16])[0].startswith("residency: every level fits")


@linux
def test_the_live_watch_names_the_memory_and_predicts_a_level_past_the_wall():
    from measure.control.live.wall import ResidencyWatch
    from measure.core.guard import Footprint
    from measure.core.roofline import Prediction

    level = Prediction("batch", 1, 4, 1, 0.05, 0.1, 80.0, 20.0, 2e9, "bandwidth", {"bandwidth": 1.0})
    fits = ResidencyWatch(None, 100 * MiB, True, RATES).tick([os.getpid()], 10.0, 1, Footprint(1, 4, 100 * MiB,
                                                                                                 10 * MiB, 40 * MiB),
                                                             10 * MiB, level)
    assert fits.gives_out and " in " in fits.gives_out and fits.past_tps is None
    assert "requests" in fits.gives_out or "past it" in fits.gives_out
    huge = Footprint(1, 4, 1 << 50, 0, 4 * MiB)  # more than any machine holds: past the wall
    past = ResidencyWatch(None, 1 << 50, True, RATES).tick([os.getpid()], 10.0, 1, huge, MiB, level)
    assert past.past_tps is not None and past.past_tps < 80.0 and past.past_note.startswith("K=1 B=4: working set")
    assert past.numbers()["past_wall"] == past.past_note


def test_the_brakes_decision_says_the_predicted_and_measured_rates():
    from measure.control.live.wall import Step, WallWatch
    from measure.core.readings import SystemSample

    w = WallWatch(brake=True)
    w.step(Step("b", 4, 8, 0, 40.0))
    w.predicted_tps = 12.5
    a = SystemSample(1_000_000_000, 24 * GiB, 20 * GiB, 4 * GiB, 4 * GiB, 0, 0.0, 0.0, "psi some avg10 %", 0.0, 50.0)
    b = SystemSample(2_000_000_000, 24 * GiB, 20 * GiB, 4 * GiB, 4 * GiB, 64 * MiB, 0.0, 0.0, "psi some avg10 %", 0.0,
                     50.0)
    hit = w.check(a, b, 9.0, 2_000_000_000)
    assert hit is not None and hit.undo is not None
    assert hit.rates == "predicted 12.5 tok/s, measured 9.0 tok/s"
    # a step up pressed while the probe ran, braked before its level decoded a token: no rate to say (it read
    # "measured 0.0 tok/s" in a 400 MiB memory cgroup)
    early = WallWatch(brake=True)
    early.step(Step("k", 1, 2, 0, 0.0))
    early.predicted_tps = 7.6
    hit = early.check(a, b, 0.0, 2_000_000_000)
    assert hit is not None and hit.undo is not None and hit.rates == "predicted 7.6 tok/s, nothing measured yet"
    # under 1 tok/s is still a rate: loaded weights past the wall ran at 0.6 (pastwall, swap at 289 MB/s)
    slow = WallWatch(brake=True)
    slow.step(Step("b", 1, 2, 0, 1.2))
    assert slow.check(a, b, 0.6, 2_000_000_000).rates == "measured 0.6 tok/s"


@linux
def test_the_header_says_which_memory_gives_out_first():
    from measure.machine.residency import header_fields

    h = header_fields(mmapped=True, per_request=64 * MiB)
    assert "the page cache holding the mmap'ed model" in h["gives_out_first"]
    assert h["headroom_bytes"] > 0 and h["headroom_requests"] == h["headroom_bytes"] // (64 * MiB)
    assert set(h) >= {"cgroup_limit_bytes", "swap_total_bytes", "memory_pressure", "pswpin", "pgmajfault", "storage"}
    loaded = header_fields(mmapped=False)
    assert "page cache" not in loaded["gives_out_first"] and loaded["headroom_requests"] is None


def test_report_draws_residency_against_throughput(tmp_path):
    import warnings

    pytest.importorskip("matplotlib")
    from measure.control.bench.report import render
    from measure.control.bench.runs import Run
    from measure.core.lines import RunHeader

    cells = [{"k": 1, "b": b, "status": "ok", "output_throughput": tps, "weights_resident_share": share,
              "major_faults_per_token": faults, "swap_in_mbps": swap}
             for b, tps, share, faults, swap in ((1, 27.0, 1.0, 0.0, 0.0), (2, 3.9, 0.78, 290.0, 9.3))]
    with warnings.catch_warnings(record=True) as said:  # panels these cells leave bare (no per-user rate): no legend
        warnings.simplefilter("always")
        files = render([Run("pastwall", RunHeader.of({"kind": "header", "engine": "llama"}), cells)], tmp_path)
    assert not [w for w in said if "legend" in str(w.message)], [str(w.message) for w in said]
    assert tmp_path / "residency_vs_throughput.png" in files
    assert (tmp_path / "residency_vs_throughput.png").stat().st_size > 1000
    bare = [{"k": 1, "b": 1, "status": "ok", "output_throughput": 27.0}]
    # each point says what came back: mmap'ed weights re-read are read-in, not swap-in (a bench in a 400 MiB group)
    from measure.control.bench.cell import Cell
    from measure.control.bench.report import residency_label

    mm = Cell.from_json({"k": 1, "b": 2, "status": "ok", "output_throughput": 10.4, "weights_resident_share": 0.69,
                            "major_faults_per_token": 17.3, "swap_in_mbps": 0.0, "file_read_mbps": 1260.9})
    assert residency_label(mm) == "K1B2 17 flt/tok · swap-in 0 · read-in 1261 MB/s"
    none = Cell.from_json({"k": 2, "b": 1, "status": "ok", "output_throughput": 3.0, "weights_resident_share": 1.0})
    assert residency_label(none) == "K2B1 — flt/tok · swap-in — · read-in — MB/s"
    assert tmp_path / "x" / "residency_vs_throughput.png" not in render(
        [Run("no residency", RunHeader.of({"kind": "header", "engine": "llama"}), bare)], tmp_path / "x")


def test_a_sweep_skips_a_level_predicted_past_its_budget_and_a_refusal_says_its_rate(tmp_path, monkeypatch):
    """The null engine's fleet under a memory budget below every level: with this machine's storage rates cached,
    each level is predicted by the residency roofline; a cell timeout shorter than its predicted time skips it with
    the prediction in its cell and the table's SKIPPED line; a longer one leaves it to admission, which refuses it
    and says what it would have run at."""
    from dataclasses import replace

    import presets
    from measure.control.bench import sweep as sweep_mod
    from measure.control.bench.sweep import CellRunner, SweepConfig, format_table, run_sweep
    from measure.core import work as W
    from measure.core.records import RunMeta
    from measure.core.roofline import Machine, Roofline
    from measure.machine import storage
    from measure.machine.ceilings import machine_key
    from measure.sources.fleet import Fleet
    from engines.base import EngineSpec

    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path / "logs"))
    storage.save(machine_key(), replace(RATES, method_version=storage.METHOD))  # as the probe would have cached them
    work = W.from_preset(presets.model("gemma-3-270m-q4_k_m"))
    roof = Roofline(work, Machine("test", 10.0, "test"), 10.0)
    fleet = Fleet(EngineSpec("null", "", options={"ttft_s": 0.01, "itl_s": 0.02}),
                  RunMeta("null", "null", 300 * MiB, simulated=True), k=1, threads=1, events=False)
    fleet.start()
    try:
        cfg = SweepConfig(ks=[1], mode="batch", bs=[1, 2], max_tokens=8, requests=4, cell_timeout_s=2.0, max_b=4,
                          memory_budget=250 * MiB, roofline=roof, kv_bytes_per_token=1024.0)
        cells, _, _ = run_sweep(fleet, presets.workload("default"), cfg, lambda m: None)
        assert [c.status for c in cells] == ["skipped", "skipped"]
        assert cells[0].reason.startswith("predicted ") and "past the memory wall" in cells[0].reason
        assert "over the level's budget of 2 s; skipped" in cells[0].reason and "working set" in cells[0].reason
        assert cells[1].reason.startswith("after K=1 B=1 skipped past the memory wall")
        table = format_table(cells)
        assert "SKIPPED K=1 B=1: predicted" in table
        cfg = SweepConfig(ks=[1], mode="batch", bs=[1], max_tokens=8, requests=4, cell_timeout_s=600.0, max_b=4,
                          memory_budget=250 * MiB, roofline=roof, kv_bytes_per_token=1024.0)
        refused, _, _ = run_sweep(fleet, presets.workload("default"), cfg, lambda m: None)
        assert refused[0].status == "refused" and "past the wall it would run at" in refused[0].reason
        # --force: a level predicted past the wall within its budget is measured there, the wall's check off (it
        # had stopped such a level in a 400 MiB memory cgroup before a request ended, on the pressure its own load
        # left), and its prediction is the residency roofline's
        class Walled:  # a check that always sees the wall
            def __init__(self, *a):
                pass

            def __call__(self):
                return "swap grew by 64 MiB (planted)"

        monkeypatch.setattr(sweep_mod, "WallCheck", Walled)
        said: list[str] = []
        cfg = replace(cfg, force=True)
        fit = CellRunner(fleet, cfg, said.append).past_wall("batch", 1, 1, cfg.ctx)
        assert fit is not None and not fit.fits
        forced, _, _ = run_sweep(fleet, presets.workload("default"), cfg, said.append)
        assert forced[0].status == "ok" and forced[0].requests.completed == 4, forced[0]
        assert forced[0].prediction.binding == f"past the memory wall: {fit.step.via}"
        assert forced[0].prediction.output_throughput == pytest.approx(fit.tps)
        assert forced[0].prediction.tpot_ms == pytest.approx(fit.step.t_step_s * 1e3)
        assert forced[0].prediction.error_output_throughput == pytest.approx(
            fit.tps / forced[0].output_throughput - 1)
        assert any(line.startswith(f"K=1 B=1: past the memory wall, predicted {fit.tps:.2f} tok/s, within the level's "
                                   "budget of 600 s: measured there, the memory wall's check off") for line in said)
        # not past the wall: the check stands, and stops the level
        cfg = replace(cfg, memory_budget=None)
        stopped, _, _ = run_sweep(fleet, presets.workload("default"), cfg, lambda m: None)
        assert stopped[0].status == "wall" and "planted" in stopped[0].reason
    finally:
        fleet.close()


def test_the_numbers_panel_shows_the_collapse_predicted_and_which_memory_gives_out():
    from dataclasses import replace

    from test_panels import SNAP, VIEW
    from tui.panels import render_numbers

    past = "K=1 B=8: working set 1.2 GiB > room 0.9 GiB: predicted 2.1 tok/s (storage-bound: …)"
    n = replace(SNAP.numbers, residency="residency: weights 62% in memory (mmap) · 290 major faults/token",
                gives_out="the page cache holding the mmap'ed model (…) in 0.1 GiB = 2 requests (cgroup v1 …)",
                past_wall=past)
    text = render_numbers(replace(SNAP, numbers=n), VIEW).plain
    assert f"past the wall: {past}" in text and "gives out first: the page cache holding" in text
    assert "290 major faults/token" in text
    assert "past the wall" not in render_numbers(SNAP, VIEW).plain


def test_the_watch_reads_every_second_near_the_wall_and_every_ten_seconds_far_from_it():
    """Far from the wall (room for twice what the engines hold, every weight resident, nothing swapped or faulted)
    the smaps walks run every CALM_READ_S; near it, or at a new level, every READ_EVERY_S."""
    from dataclasses import replace

    from measure.control.live import wall as W
    from measure.core.guard import Footprint
    from measure.core.residency import Residency
    from measure.core.units import NS

    ok = Residency(100, 100, True, 50, 0, 0.0, 0.0, 0.0, None, "")
    assert W.calm(ok, headroom=300, held=150, footprint=200)
    assert not W.calm(None, 300, 150, 200)  # one reading: no rates yet
    assert not W.calm(ok, headroom=140, held=150, footprint=100)  # could not double
    assert not W.calm(ok, headroom=300, held=100, footprint=301)  # the level's footprint is over the room
    assert not W.calm(replace(ok, weights_resident=98), 300, 150, 200)  # a weight evicted
    assert not W.calm(replace(ok, anon_swapped=1), 300, 150, 200)
    assert not W.calm(replace(ok, swap_in_mbps=0.1), 300, 150, 200)
    assert not W.calm(replace(ok, majflt_per_token=0.5), 300, 150, 200)

    reads: list[int] = []
    watch = W.ResidencyWatch(None, 100 * MiB, True, RATES)
    real = watch.probe.read
    details: list[bool] = []
    watch.probe.read = lambda pids, tokens=0, detail=True: (  # type: ignore[method-assign]
        reads.append(1), details.append(detail), real(pids, tokens, detail))[2]
    fp = Footprint(1, 1, 100 * MiB, 0, 10 * MiB)
    for s in range(0, 30):  # 30 s of ticks at 1 Hz on this quiet process, far from any wall
        watch.tick([os.getpid()], 10.0, 1 + s * NS, fp, MiB, None)
    assert 3 <= len(reads) <= 6  # two to judge it calm, then one each 10 s
    assert details[:2] == [True, True] and not any(details[2:])  # calm: no smaps walk
    n = len(reads)
    watch.tick([os.getpid()], 10.0, 1 + 30 * NS, replace(fp, b=2, kv=20 * MiB), MiB, None)  # a new level
    assert len(reads) == n + 1


def test_maps_give_the_model_files_mapped_bytes_without_a_page_walk():
    maps = ("7f0000000000-7f0000400000 r--s 00000000 fd:01 42   /models/m.gguf\n"
            "7f0000400000-7f0000401000 rw-p 00000000 00:00 0 \n"
            "7f0000500000-7f0000600000 r--s 00400000 fd:01 42   /models/m.gguf\n"
            "7f0000600000-7f0000700000 r--s 00000000 fd:01 43   /models/other.gguf\n")
    assert R.parse_maps_of(maps, "/models/m.gguf") == 4 * MiB + 1 * MiB
    assert R.parse_maps_of(maps, "/models/none.gguf") == 0


@linux
def test_a_calm_read_takes_the_mapping_from_maps_and_residency_from_mincore(mapped):
    from measure.machine import residency as M

    f, _ = mapped
    full = M.proc_memory(os.getpid(), str(f))
    calm = M.ResidencyProbe(str(f), 4 * MiB, mincore=True).read([os.getpid()], 0, detail=False)
    assert full is not None and full.weights_mapped == 4 * MiB and full.rss >= full.anon > 0
    me = calm.procs[0]
    assert me.weights_mapped == 4 * MiB and me.weights_resident == calm.mincore_resident == 4 * MiB
    assert abs(me.anon - full.anon) < 64 * MiB  # the same counters, read twice


def test_past_the_wall_the_predicted_tpot_slows_with_the_tok_s():
    """Past the wall the residency roofline's tok/s takes the level's place, and its TPOT slows by as much (the
    same streams, each step longer): in a 400 MiB cgroup the screen said 'predicted 14.0 ms' beside 'predicted
    6.6 tok/s' where 4.2 tok/s came at 237 ms."""
    from measure.control.live.wall import ResidencyView
    from measure.core.roofline import Prediction
    from sim import run_for, sim_controller

    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 5)
    workers = c.source.workers()
    level = Prediction("batch", 1, 4, 1, 0.05, 0.1, 80.0, 20.0, 2e9, "bandwidth", {"bandwidth": 1.0})
    tpot, tps, _ = c._predicted(level, workers)
    assert tpot and tps

    class Past:  # the live watch's answer for a level past the wall: a quarter of the rate
        def tick(self, *_a):
            return ResidencyView(past_tps=tps / 4, past_note="K=1 B=1: working set > room")

    c.residency = Past()
    ptpot, ptps, by, _ = c._predicted_past(level, workers, tps, clock.now)
    assert ptps == pytest.approx(tps / 4) and ptpot == pytest.approx(4 * tpot) and by.startswith("residency roofline")


def _perms_at(maps: str, addr: int) -> str:
    """The permissions ('rw-p': private, 'rw-s': shared) of the mapping holding `addr` in a maps text."""
    for line in maps.splitlines():
        f = line.split()
        if len(f) >= 5 and "-" in f[0]:
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            if lo <= addr < hi:
                return f[1]
    raise AssertionError(f"{addr:#x} is in no mapping")


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/maps")
def test_the_swap_sweeps_use_private_memory_as_an_engine_does():
    """The probe's anonymous sweeps map private memory, as an engine's malloc'ed weights are. Python's mmap(-1, n)
    is MAP_SHARED (shmem): its swap-in gives up the swap slot, so every eviction wrote the page again, and the
    sweep read 120-137 MB/s where private pages read 223-263 and llama.cpp's loaded weights 244-259
    (docs/measurements.md §21). Checked in /proc/PID/maps for the sweep run in a memory group (its child, here
    outside any group, at 8 MiB) and for the paging-out sweep's buffer."""
    import ctypes
    import subprocess

    from measure.machine import storage as S

    show = ("\nimport ctypes\nprint('at', ctypes.addressof(ctypes.c_char.from_buffer(m)))\n"
            "print(open('/proc/self/maps').read())\n")
    out = subprocess.run([sys.executable, "-c", S.MEMCG_CHILD + show, "-", str(8 << 20)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    at = int(next(line for line in out.stdout.splitlines() if line.startswith("at ")).split()[1])
    assert _perms_at(out.stdout, at) == "rw-p"
    m = S._private(1 << 20)
    try:
        c = ctypes.c_char.from_buffer(m)
        assert _perms_at(Path("/proc/self/maps").read_text(), ctypes.addressof(c)) == "rw-p"
        del c
    finally:
        m.close()


def test_a_group_sweep_that_ends_early_is_run_again(tmp_path, monkeypatch):
    """The OOM killer ends some anonymous sweeps in a memory group (SIGKILL: returncode -9); one such sweep left the
    swap rate unmeasured and a prediction fell to the page-out sweep (+363 %, docs/measurements.md §21). A sweep is
    tried up to MEMCG_TRIES times; the first that ends well gives the rate, and none gives None."""
    import subprocess
    from types import SimpleNamespace

    from measure.machine import storage as S

    codes: list[int] = []

    def run(cmd, **kw):
        rc = codes.pop(0)
        return SimpleNamespace(returncode=rc, stdout="250000000.0\n" if rc == 0 else "", stderr="Killed")

    monkeypatch.setattr(subprocess, "run", run)
    codes[:] = [-9, -9, 0]
    assert S._memcg_sweep(tmp_path, "-") == 250e6 and not codes
    codes[:] = [-9] * S.MEMCG_TRIES + [0]
    assert S._memcg_sweep(tmp_path, "-") is None and codes == [0]


@pytest.mark.parametrize("shares", ["0.7,x", "0.05", "1.1,,0.6"])
def test_pastwall_refuses_limits_it_cannot_set_in_one_line(shares, capsys):
    """benchmarks/pastwall.py --shares: a limit that is not a share of the working set it can set is one line
    and exit 2, before anything is made (no swap file, no cgroup)."""
    import importlib.util

    path = Path(__file__).parents[2] / "benchmarks" / "pastwall.py"
    spec = importlib.util.spec_from_file_location("bench_pastwall", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
        with pytest.raises(SystemExit) as ended:
            mod.main(["--shares", shares])
    finally:
        del sys.modules[spec.name]
    err = capsys.readouterr().err.strip().splitlines()
    assert ended.value.code == 2 and f"error: --shares {shares!r}: " in err[-1] and err[0].startswith("usage:")
