"""The Mac paths, driven on Linux by what real Macs print (tests/data/mac/, docs/design/unified-memory.md)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from measure.core import guard
from measure.core.readings import ThermalLog
from measure.machine import host, probes
from measure.core.guard import GiB, MiB
from measure.core.sizing import PlanMachine, chip_predictions, plan, unified_memory
from measure.machine.model_files import work_model


def llama_8b():
    """plan --preset llama-3.1-8b's model, read as plan reads it."""
    return work_model(None, None, "llama-3.1-8b")


DATA = Path(__file__).parents[1] / "data" / "mac"


def text(name: str) -> str:
    return (DATA / name).read_text()


def mac(case: str = "b32", sysctl: str | None = None):
    """A `run` answering each tool as a 48 GB Mac does, idle or at the published batch-32 cell."""
    files = {"sysctl": sysctl or ("sysctl_48g.txt" if case == "b32" else "sysctl_48g_idle.txt"),
             "vm_stat": f"vm_stat_48g_{case}.txt", "memory_pressure": f"memory_pressure_{case}.txt",
             "pmset": "pmset_therm_nominal.txt"}

    def run(cmd):
        name = files.get(cmd[0])
        return text(name) if name else None
    return run


# ---- readings ------------------------------------------------------------------------------------------
def test_vm_stat_gives_activity_monitors_memory_used():
    vm = host.parse_vm_stat(text("vm_stat_48g_b32.txt"))
    assert vm.page == 16384
    # App Memory (anonymous − purgeable) + Wired + Compressed: 97.6 % of the 48 GiB, as the published cell
    assert vm.used / (48 * GiB) == pytest.approx(0.976, abs=0.001)
    assert vm.wired == 2_420_000 * 16384 and vm.compressed == 132_232 * 16384
    idle = host.parse_vm_stat(text("vm_stat_48g_idle.txt"))
    assert idle.used == pytest.approx(5.72 * GiB, rel=0.01)
    with pytest.raises(ValueError, match="page size"):
        host.parse_vm_stat("Pages free: 12.\n")


def test_memory_pressure_swap_and_sysctl():
    assert host.parse_memory_pressure(text("memory_pressure_b32.txt")) == 4.0
    assert host.parse_memory_pressure("nothing here") is None
    sc = host.parse_sysctl(text("sysctl_48g.txt"))
    assert sc["hw.memsize"] == "51539607552" and sc["kern.memorystatus_vm_pressure_level"] == "4"
    swap = host.parse_swapusage(sc["vm.swapusage"])
    assert swap["used"] == int(19251.25 * MiB)  # the published 18.8 GB in swap
    assert swap["total"] == 20 * GiB


@pytest.mark.parametrize("total_gib, expect_mib", [
    (16, 10922.67),  # llama.cpp's ggml_metal_init on 16 GB: recommendedMaxWorkingSetSize = 10922.67 MB (MiB)
    (32, 21845.34),  # on 32 GB: 21845.34
    (48, 36864.0),  # on 48 GB: 38654.71 MB (10⁶ B) = 36 GiB
    (64, 49152.0),
    (96, 73728.0),
])
def test_default_working_set_rule_matches_what_macs_log(total_gib, expect_mib):
    assert host.default_working_set(total_gib * GiB) / MiB == pytest.approx(expect_mib, abs=0.01)


def test_working_set_sources_in_order():
    info = json.loads(text("mlx_device_info_m4pro_48g.json"))
    total = 48 * GiB
    ws = host.working_set(total, info, "40960")
    assert ws.bytes == 36 * GiB and "mlx" in ws.source  # mlx's device info first
    ws = host.working_set(total, None, "40960")
    assert ws.bytes == 40 * GiB and "iogpu.wired_limit_mb = 40960" in ws.source
    ws = host.working_set(total, None, "0")  # 0: macOS's default rule
    assert ws.bytes == 36 * GiB and "default rule" in ws.source
    assert host.working_set(total, {"max_recommended_working_set_size": 0}, None).bytes == 36 * GiB


def test_read_mac_memory_from_the_tools():
    info = json.loads(text("mlx_device_info_m4pro_48g.json"))
    mem = host.read_mac_memory(mac("b32"), lambda: info)
    assert mem.total == 48 * GiB and mem.working_set.bytes == 36 * GiB
    assert mem.pressure_level == 4 and mem.free_percent == 4.0
    assert mem.swap_used == int(19251.25 * MiB)
    idle = host.read_mac_memory(mac("idle", "sysctl_48g_wired_limit.txt"), lambda: None)
    assert idle.working_set.bytes == 40 * GiB  # the user's sysctl, mlx absent
    assert host.others_held(idle) == idle.used and host.others_held(idle, ours=10 * GiB) == 0
    dead = host.read_mac_memory(lambda cmd: None, lambda: None)  # no tool answers: readings None, not 0
    assert dead.used is None and dead.swap_used is None and dead.pressure_level is None
    assert "hw.memsize" in dead.notes[0]


# ---- the budget ----------------------------------------------------------------------------------------
def test_unified_budget_is_the_working_set_less_what_others_hold():
    total = 48 * GiB
    b, why = guard.unified_budget(total, 36 * GiB, "mlx")
    assert b == 36 * GiB and "assumed" in why  # 48 − 4 GiB assumed for macOS leaves more than the 36
    b, why = guard.unified_budget(total, 36 * GiB, "mlx", others=14 * GiB)
    assert b == 34 * GiB and "read (vm_stat)" in why  # a browser and an IDE: what is left binds
    assert b < guard.DEFAULT_BUDGET_FRACTION * total  # the old default: 40.8 GiB


def test_default_budget_on_a_mac_reads_the_machine(monkeypatch):
    info = json.loads(text("mlx_device_info_m4pro_48g.json"))
    monkeypatch.setattr(host, "is_mac", lambda: True)
    monkeypatch.setattr(host, "run_tool", mac("idle"))
    monkeypatch.setattr(host, "mlx_device_info", lambda: info)
    b, why = host.default_budget(48 * GiB, "physical memory")
    assert b == 36 * GiB and "Metal's recommended working set" in why and "5.7 GiB read (vm_stat)" in why
    # a cgroup's limit (Linux) keeps the fraction rule
    monkeypatch.setattr(host, "is_mac", lambda: False)
    b, why = host.default_budget(48 * GiB, "physical memory")
    assert b == int(0.85 * 48 * GiB) and "85%" in why


def test_the_published_48gb_sweep_is_refused_where_it_collapsed():
    """mlx, 48 GB, 4096-token context, an 8B model's KV (128 KiB a token): the sweep peaked at B=8, fell 30 % at
    16 and collapsed at 32 (97.6 % of RAM, swapping). The old default (85 % of RAM, KV only) admitted B=32
    and more; the unified-memory budget with what mlx keeps for each sequence refuses it."""
    shape = guard.shape_from_preset("llama-3.1-8b")
    assert shape.per_token("bf16") == 128 * 1024 and shape.intermediate == 14336
    old = plan(shape, [4096], 48 * GiB, "bf16")
    assert old["rows"][0]["max_b_one_engine"] >= 48  # the old rule: 51 sequences "fit"
    new = plan(shape, [4096], 48 * GiB, "bf16", machine=PlanMachine(unified=True))
    assert new["budget"] == 36 * GiB
    assert 16 <= new["rows"][0]["max_b_one_engine"] < 32
    assert new["rows"][0]["engine_per_request"] == pytest.approx(232 * MiB, rel=0.001)
    fp = guard.engine_footprint("batch", 1, 32, guard.EngineMemory(
        b_cap=32, seq_ctx=4096, ctx=0, weight_bytes=shape.weight_bytes, kv_per_token=shape.per_token("bf16"),
        seq_extra_bytes=shape.prefill_bytes_per_seq(4096)))
    assert guard.admit(fp, new["budget"]) is not None
    fp16 = guard.engine_footprint("batch", 1, 16, guard.EngineMemory(
        b_cap=16, seq_ctx=4096, ctx=0, weight_bytes=shape.weight_bytes, kv_per_token=shape.per_token("bf16"),
        seq_extra_bytes=shape.prefill_bytes_per_seq(4096)))
    assert guard.admit(fp16, new["budget"]) is None


def test_the_predicted_batch_curve_peaks_on_a_48gb_mac():
    shape = guard.shape_from_preset("llama-3.1-8b")
    result = plan(shape, [4096], 48 * GiB, "bf16", machine=PlanMachine(unified=True))
    _, m, rows = chip_predictions(llama_8b, "apple-m4-pro", 128, 256, context=4096,
                                  result=result)
    assert m.flops is not None  # the compute ceiling is drawn
    batch = {p.b: p for p in rows if p.mode == "batch"}
    best = max(batch.values(), key=lambda p: p.aggregate_tps)
    assert best.b <= 16
    assert batch[32].binding == "memory" and "swap" in batch[32].wall()
    assert batch[64].aggregate_tps < batch[32].aggregate_tps < best.aggregate_tps
    # without the budget the tiled kernels' arithmetic alone bends the curve flat by B=64 (two 32-column tiles a
    # step: +11 %; it climbed to 811 tok/s there with no FLOP/s figure for the chip and the KV read at 192 tokens)
    _, _, flat = chip_predictions(llama_8b, "apple-m4-pro", 128, 256, context=4096)
    fb = {p.b: p for p in flat if p.mode == "batch"}
    assert fb[64].binding == "compute" and fb[64].aggregate_tps < 1.15 * fb[32].aggregate_tps
    assert fb[64].regime == "tiled (B = 64 priced as 64)" and fb[16].regime == "tiled (B = 16 priced as 32)"


def test_the_kv_is_read_at_the_context_asked():
    _, m, short = chip_predictions(llama_8b, "apple-m4-pro", 128, 256)
    _, _, long = chip_predictions(llama_8b, "apple-m4-pro", 128, 256, context=4096)
    s = {p.b: p for p in short if p.mode == "batch"}
    lg = {p.b: p for p in long if p.mode == "batch"}
    # 16 sequences × (4096 − 256) tokens × 128 KiB of KV more a step, beside 15 GB of weights: at least that read
    # at the chip's bandwidth (the tiled kernels' attention arithmetic comes on top)
    more = 16 * (4096 - 256) * 131_072
    assert lg[16].tpot_s - s[16].tpot_s >= more / (m.bandwidth_gbps * 1e9)
    assert lg[16].tpot_s > 1.2 * s[16].tpot_s


def test_apple_presets_carry_a_compute_ceiling():
    from presets import chips

    apple = {k: c for k, c in chips().items() if k.startswith("apple-")}
    assert all(c.unified for c in apple.values())
    assert all(c.fp16_tflops for k, c in apple.items() if not k.startswith("apple-m5"))
    assert any(48 in c.memory_gib for c in apple.values())  # a 48 GB Mac to plan for
    assert unified_memory("apple-m4-pro") and not unified_memory("nvidia-h100") and not unified_memory("nope")


def test_plan_cli_refuses_the_collapsed_batch(capsys):
    from tui.cli import main

    assert main(["plan", "--preset", "llama-3.1-8b", "--chip", "apple-m4-pro", "--memory", "48G",
                 "--context", "4096"]) == 0
    out = capsys.readouterr().out
    assert "GPU working set 36.0 GiB" in out
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("4,096"))
    assert 16 <= int(row.split()[3]) < 32  # max B in one engine (after the KV a request: "512.0 MiB")
    b32 = next(ln for ln in out.splitlines() if ln.startswith("batch") and ln.split()[2] == "32")
    assert "memory:" in b32 and "swap" in b32


# ---- heat ----------------------------------------------------------------------------------------------
def test_pmset_therm():
    t = host.parse_pmset_therm(text("pmset_therm_nominal.txt"))
    assert t.state == "nominal" and t.source == "pmset -g therm"
    t = host.parse_pmset_therm(text("pmset_therm_throttled.txt"))
    assert t.state == "throttled" and "71 %" in t.detail
    assert host.parse_pmset_therm("").state == "unknown"
    reader = host.ThermalReader(every_s=0, run=lambda cmd: text("pmset_therm_throttled.txt"),
                                system=lambda: "Darwin")
    assert reader.read().label() == "throttled (CPU speed limit 71 %)"


def _zone(root: Path, n: int, temp_mc: int, trip_mc: int | None, kind="x86_pkg_temp"):
    z = root / "class" / "thermal" / f"thermal_zone{n}"
    z.mkdir(parents=True)
    (z / "temp").write_text(f"{temp_mc}\n")
    (z / "type").write_text(kind + "\n")
    if trip_mc is not None:
        (z / "trip_point_0_type").write_text("passive\n")
        (z / "trip_point_0_temp").write_text(f"{trip_mc}\n")


def _cpu(root: Path, n: int, cur: int, mx: int):
    c = root / "devices" / "system" / "cpu" / f"cpu{n}" / "cpufreq"
    c.mkdir(parents=True)
    (c / "scaling_cur_freq").write_text(f"{cur}\n")
    (c / "cpuinfo_max_freq").write_text(f"{mx}\n")


def test_linux_thermal_from_sys(tmp_path):
    assert host.linux_thermal(str(tmp_path)).state == "unknown"
    cool = tmp_path / "cool"
    _zone(cool, 0, 52000, 95000)
    _cpu(cool, 0, 1_200_000, 3_600_000)  # a slow clock while cool is idle, not heat
    t = host.linux_thermal(str(cool))
    assert t.state == "nominal" and "43 °C below its trip" in t.detail
    hot = tmp_path / "hot"
    _zone(hot, 0, 92000, 95000)
    _cpu(hot, 0, 2_000_000, 3_600_000)
    assert host.linux_thermal(str(hot)).state == "throttled"
    over = tmp_path / "over"
    _zone(over, 0, 99000, 95000, "acpitz")
    assert host.linux_thermal(str(over)).state == "throttled"


def test_nvml_throttle_reasons():
    assert host.nvml_reasons(0x1).state == "nominal"  # GPU idle is not heat
    t = host.nvml_reasons(0x20 | 0x40)
    assert t.state == "throttled" and "thermal slowdown (hardware)" in t.detail


def test_every_sample_carries_the_thermal_state_and_a_change_is_seen():
    states = iter(["pmset_therm_nominal.txt", "pmset_therm_throttled.txt", "pmset_therm_throttled.txt"])
    reader = host.ThermalReader(every_s=0, run=lambda cmd: text(next(states)), system=lambda: "Darwin")
    p = probes.SystemProbe(thermal=reader)
    heat = ThermalLog()
    check = probes.WallCheck(p, heat)  # a sweep cell's wall check: its first sample
    assert check.prev.thermal == "nominal (no warning recorded)" and not heat.changed
    check()
    assert check.prev.thermal.startswith("throttled") and heat.changed
    check()
    assert heat.describe() == "nominal (no warning recorded) → throttled (CPU speed limit 71 %)"
    heat.mark()  # the next cell starts from the state now
    assert not heat.changed and heat.describe().startswith("throttled")
    heat.note("unknown")  # no reading is not a state
    assert heat.describe() == "throttled (CPU speed limit 71 %)"


def test_a_sweep_cell_records_its_thermal_states(tmp_path, monkeypatch):
    """Two cells of the null engine; the machine turns hot as the second starts: each cell says the one state it
    saw, and neither changed (issue 43: the first cell's last state carried over and marked the second changed)."""
    import presets
    from engines.base import EngineSpec
    from measure.control.bench.sweep import SweepConfig, run_sweep
    from measure.core.records import RunMeta
    from measure.sources.fleet import Fleet

    hot = {"now": False}
    reader = host.ThermalReader(every_s=0, system=lambda: "Darwin", run=lambda cmd: text(
        "pmset_therm_throttled.txt" if hot["now"] else "pmset_therm_nominal.txt"))
    probe = probes.SystemProbe(thermal=reader)
    calls = {"n": 0}
    real = probe.sample

    def sample():
        calls["n"] += 1
        return real()
    monkeypatch.setattr(probe, "sample", sample)
    monkeypatch.setattr("measure.control.bench.sweep.SystemProbe", lambda thermal=None: probe)
    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path / "logs"))
    fleet = Fleet(EngineSpec("null", "", options={"ttft_s": 0.01, "itl_s": 0.02}),
                  RunMeta("null", "null", 0, simulated=True), k=1, threads=1, events=False)
    fleet.start()
    cfg = SweepConfig(ks=[1], mode="batch", bs=[1, 2], max_tokens=8, requests=4, cell_timeout_s=30, max_b=4)
    set_batch = fleet.set_batch

    def heat_up_at_b2(mode, b, **kw):  # the machine turns hot as the second cell starts
        hot["now"] = b == 2
        return set_batch(mode, b, **kw)
    monkeypatch.setattr(fleet, "set_batch", heat_up_at_b2)
    try:
        cells, _, _ = run_sweep(fleet, presets.workload("default"), cfg, lambda m: None)
    finally:
        fleet.close()
    first, second = cells
    assert calls["n"] >= 2
    assert first.machine.thermal == "nominal (no warning recorded)" and first.machine.thermal_changed is None
    assert second.machine.thermal == "throttled (CPU speed limit 71 %)"
    assert second.machine.thermal_changed is None and "thermal_changed" not in second.to_json()


def test_a_cell_on_a_mac_has_joules_per_token_per_rail(tmp_path, monkeypatch):
    """zeus-apple-silicon's window around each cell (a stand-in module with the library's names, as the
    frozen-CPU Mac returns them): J/token per readable rail, the frozen and absent ones said, not 0."""
    import sys
    import types

    import presets
    from engines.base import EngineSpec
    from measure.control.bench.sweep import SweepConfig, run_sweep
    from measure.core.records import RunMeta
    from measure.sources.fleet import Fleet

    window = json.loads(text("zeus_window_frozen_cpu.json"))

    class Monitor:  # zeus_apple_silicon.AppleEnergyMonitor's interface
        def begin_window(self, label):
            self.label = label

        def end_window(self, label):
            assert label == self.label
            return types.SimpleNamespace(**{k: v for k, v in window.items() if k.endswith("_mj")})
    monkeypatch.setitem(sys.modules, "zeus_apple_silicon", types.SimpleNamespace(AppleEnergyMonitor=Monitor))
    monkeypatch.setattr(host, "is_mac", lambda: True)
    monkeypatch.setattr(host.ThermalReader, "read", lambda self: host.UNKNOWN_THERMAL)
    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path / "logs"))
    fleet = Fleet(EngineSpec("null", "", options={"ttft_s": 0.01, "itl_s": 0.02}),
                  RunMeta("null", "null", 0, simulated=True), k=1, threads=1, events=False)
    fleet.start()
    try:
        (cell,), _, _ = run_sweep(fleet, presets.workload("default"),
                                  SweepConfig(ks=[1], bs=[1], max_tokens=8, requests=4, cell_timeout_s=30),
                                  lambda m: None)
    finally:
        fleet.close()
    m = cell.machine
    assert set(m.rails_watts) == {"gpu", "dram"} and m.rails_watts["gpu"] > 0
    assert m.rails_joules_per_token["gpu"] == pytest.approx(179.9 / cell.requests.total_output_tokens)
    assert "cpu: frozen" in m.rails_unread and "ane: not reported" in m.rails_unread
    assert "cpu" not in m.rails_joules_per_token and m.thermal is None  # no reading: not recorded


def test_a_live_level_is_not_settled_while_its_thermal_state_changes():
    from measure.control.live.stats import LevelFigures
    from measure.control.live.steps import SETTLE_SAMPLES, StepLevel, StepReading, StepTable
    from measure.core.units import NS

    fig = LevelFigures()
    fig.good = fig.finished = 20
    fig.tpot = [0.05] * 20
    fig.ttft = [0.2] * 20
    table = StepTable()

    def tick(t_s, thermal):
        return table.tick(StepLevel("K=1", "instances", 1, 1, 0),
                          StepReading(int(t_s * NS), True, fig, 20.0, 1.0, wall="none", thermal=thermal))
    t = 5.0
    for _ in range(SETTLE_SAMPLES):
        row = tick(t, "nominal (no warning recorded)")
        t += 0.5
    assert row.settled
    row = tick(t, "throttled (CPU speed limit 71 %)")  # the machine got hot: the readings before are a cool one's
    assert not row.settled and "thermal state now throttled" in row.progress
    for _ in range(SETTLE_SAMPLES):
        t += 0.3
        row = tick(t, "throttled (CPU speed limit 71 %)")
    assert not row.settled and "3 s ago" in row.progress  # 10 readings, but under 5 s since the change
    t += 3.0
    row = tick(t, "throttled (CPU speed limit 71 %)")
    assert not row.settled and "0/8 requests" in row.progress  # its request figures: the hot machine's only
    fig.good = fig.finished = 28  # 8 requests end on the hot machine
    fig.tpot += [0.06] * 8
    fig.ttft += [0.3] * 8
    fig.tpot_added, fig.version = 8, fig.version + 1
    row = tick(t, "throttled (CPU speed limit 71 %)")
    assert row.settled and row.tpot_p50 == 0.06 and row.ttft_p50 == 0.3
    assert tick(t + 0.5, "unknown").settled  # no reading is not a change


# ---- power ---------------------------------------------------------------------------------------------
def test_rail_power_and_a_frozen_counter():
    w = json.loads(text("zeus_window_m4pro.json"))
    rails = {r.rail: r for r in host.rail_power(w, w["seconds"])}
    assert rails["gpu"].watts == pytest.approx(18.24) and rails["dram"].watts == pytest.approx(0.98)
    assert rails["ane"].watts == 0.0  # a counter at 0 on a rail that may idle is a reading
    jpt = host.rails_joules_per_token(list(rails.values()), w["tokens"])
    assert jpt["gpu"] == pytest.approx(182.4 / 1389)
    f = json.loads(text("zeus_window_frozen_cpu.json"))
    frozen = {r.rail: r for r in host.rail_power(f, f["seconds"])}
    assert frozen["cpu"].watts is None and frozen["cpu"].note.startswith("frozen")
    assert "0 W" not in frozen["cpu"].label() and "frozen" in frozen["cpu"].label()
    assert frozen["ane"].note == "not reported on this Mac"
    assert "cpu" not in host.rails_joules_per_token(list(frozen.values()), f["tokens"])  # never counted as 0 J
    assert host.rails_joules_per_token(list(frozen.values()), 0) == {}


def test_powermetrics_watts():
    pm = host.parse_powermetrics("CPU Power: 4210 mW\nGPU Power: 18020 mW\nANE Power: 0 mW\n"
                                 "Combined Power (CPU + GPU + ANE): 22230 mW\n")
    assert pm == {"cpu": 4.21, "gpu": 18.02, "ane": 0.0, "combined": 22.23}


def test_energy_window_without_the_library_says_why(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_zeus(name, *a, **k):
        if name == "zeus_apple_silicon":
            raise ImportError(name)
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_zeus)
    w = host.EnergyWindow()
    assert not w.begin() and "zeus-apple-silicon" in w.error and w.end() == []


# ---- the script a Mac user runs -------------------------------------------------------------------------
def test_mac_check_prints_each_reading_beside_the_systems(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("mac_check", Path(__file__).parents[2] / "benchmarks" /
                                                  "mac_check.py")
    assert spec and spec.loader
    mc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mc)
    for src, dst in [("sysctl_48g.txt", "sysctl.txt"), ("vm_stat_48g_b32.txt", "vm_stat.txt"),
                     ("memory_pressure_b32.txt", "memory_pressure.txt"), ("pmset_therm_throttled.txt", "pmset.txt"),
                     ("mlx_device_info_m4pro_48g.json", "mlx.json"), ("zeus_window_frozen_cpu.json", "zeus.json")]:
        shutil.copy(DATA / src, tmp_path / dst)
    (tmp_path / "powermetrics.txt").write_text("GPU Power: 17990 mW\nCPU Power: 3900 mW\n")
    assert mc.main(["--fixtures", str(tmp_path), "--power", "10", "--sudo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("replaying fixtures")
    assert "36.00 GiB (Metal's recommended working set (mlx device_info))" in out
    assert "max_recommended_working_set_size = 38654705664" in out
    assert "System-wide memory free percentage: 4%" in out
    assert "vm.swapusage: total = 20480.00M" in out
    assert "throttled (CPU speed limit 71 %)" in out
    assert "power gpu" in out and "powermetrics 17.99 W" in out
    assert "cpu: frozen" in out
