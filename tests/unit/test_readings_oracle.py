"""Oracles for what a machine says (measure/core/readings.py): the parsers of a Mac's tools on tiny texts written
here in their formats (tests/data/mac/ holds what real Macs print: tests/integration/test_mac.py), each figure
worked by hand, and the probe's ceilings as a user reads them. Pure (benchmarks/mutation.py mutates the module
against these)."""
from __future__ import annotations

import pytest

from measure.core import readings as R

GiB, MiB = 1 << 30, 1 << 20


def test_the_default_working_set_and_its_sources():
    assert R.default_working_set(32 * GiB) == int(32 * GiB * 2 / 3)  # at or below 32 GiB: 2/3
    assert R.default_working_set(32 * GiB + 1) == int((32 * GiB + 1) * 3 / 4)
    ws = R.working_set(48 * GiB, {"max_recommended_working_set_size": 38_654_705_664})
    assert ws == R.WorkingSet(38_654_705_664, "Metal's recommended working set (mlx device_info)")
    assert R.working_set(48 * GiB, {"max_recommended_working_set_size": 1.5}).bytes == 1
    for bad in ({"max_recommended_working_set_size": 0}, {"max_recommended_working_set_size": "9"}, {}, None):
        assert R.working_set(48 * GiB, bad, "40960") == R.WorkingSet(40 * GiB, "sysctl iogpu.wired_limit_mb = 40960")
    assert R.working_set(48 * GiB, None, "99999").bytes == 48 * GiB  # never more than there is
    assert R.working_set(48 * GiB, None, "1") == R.WorkingSet(MiB, "sysctl iogpu.wired_limit_mb = 1")
    for unset in ("0", "-5", "lots", None):
        assert R.working_set(48 * GiB, None, unset) == R.WorkingSet(36 * GiB, "macOS's default rule: 75% of 48 GiB")
    assert R.working_set(24 * GiB) == R.WorkingSet(16 * GiB, "macOS's default rule: 67% of 24 GiB")


def test_parse_sysctl_keeps_name_value_lines():
    text = "hw.memsize: 51539607552\niogpu.wired_limit_mb: 0\nnot a line\nspaced key: 3\n: empty\nvm.x:   7  \n"
    assert R.parse_sysctl(text) == {"hw.memsize": "51539607552", "iogpu.wired_limit_mb": "0", "vm.x": "7"}
    assert R.parse_sysctl("a:b:c") == {"a": "b:c"}


VM_STAT = """Mach Virtual Memory Statistics: (page size of 16384 bytes)
Pages free:                               10.
"Pages wired down":                        100.
Anonymous pages:                          300.
Pages purgeable:                           20.
Pages occupied by compressor:              50.
File-backed pages:                         70.
Swapins:                                    5.
Swapouts:                                   6.
Pageouts:                                 n/a.
"""


def test_parse_vm_stat_and_activity_monitors_figures():
    v = R.parse_vm_stat(VM_STAT)
    assert v.page == 16384 and v.pages["Pages free"] == 10 and "Pageouts" not in v.pages
    assert v.pages["Pages wired down"] == 100  # its quotes dropped
    assert v.bytes("Pages free") == 10 * 16384 and v.bytes("nothing") == 0
    assert v.app == (300 - 20) * 16384  # anonymous less purgeable
    assert v.wired == 100 * 16384 and v.compressed == 50 * 16384
    assert v.used == (280 + 100 + 50) * 16384
    assert v.cached_files == (70 + 20) * 16384
    assert (v.swapins, v.swapouts) == (5, 6)
    assert R.VmStat(4096, {"Pages purgeable": 9, "Anonymous pages": 3}).app == 0  # never below 0
    assert (R.VmStat(4096, {}).swapins, R.VmStat(4096, {}).swapouts) == (0, 0)
    with pytest.raises(ValueError, match="not vm_stat output"):
        R.parse_vm_stat("Pages free: 10.")
    # the first line is the header: a counter there is not read
    assert R.parse_vm_stat("Pages free: 5. (page size of 4096 bytes)\nPages wired down: 7.").pages == {
        "Pages wired down": 7}


def test_memory_pressure_and_swap_usage():
    assert R.parse_memory_pressure("System-wide memory free percentage: 63%") == 63.0
    assert R.parse_memory_pressure("The system has 51539607552 (3145728 pages)\nSystem-wide memory free "
                                   "percentage:  7.5%\n") == 7.5
    assert R.parse_memory_pressure("no such line") is None
    assert R.parse_swapusage("vm.swapusage: total = 2048.00M  used = 1029.25M  free = 1018.75M  (encrypted)") == {
        "total": 2048 * MiB, "used": int(1029.25 * MiB), "free": int(1018.75 * MiB)}
    assert R.parse_swapusage("total = 1.50G used = 512K free = 0.00M") == {"total": int(1.5 * GiB), "used": 512 << 10,
                                                                          "free": 0}
    assert R.parse_swapusage("nothing") == {}


def test_pmset_therm_says_throttled_nominal_or_unknown():
    t = R.parse_pmset_therm("CPU_Scheduler_Limit = 100\nCPU_Available_CPUs = 12\nCPU_Speed_Limit = 99\n")
    assert t == R.Thermal("throttled", "CPU speed limit 99 %", "pmset -g therm")
    assert t.label() == "throttled (CPU speed limit 99 %)"
    assert R.parse_pmset_therm("CPU_Speed_Limit = 100") == R.Thermal("nominal", "CPU speed limit 100 %",
                                                                     "pmset -g therm")
    warned = "Thermal warning level: 0\nPerformance warning level: 2\nCPU_Speed_Limit = 100"
    assert R.parse_pmset_therm(warned) == R.Thermal("throttled", "warning level 2", "pmset -g therm")
    assert R.parse_pmset_therm("thermal warning level has been set to 3") == R.Thermal(
        "throttled", "warning level 3", "pmset -g therm")
    none = "Note: No thermal warning level has been recorded\nNote: No performance warning level has been recorded"
    assert R.parse_pmset_therm(none) == R.Thermal("nominal", "no warning recorded", "pmset -g therm")
    assert R.parse_pmset_therm("note: no performance warning level has been recorded") == R.UNKNOWN_THERMAL
    assert R.parse_pmset_therm("Thermal warning level: 0") == R.UNKNOWN_THERMAL  # a level 0 alone says nothing
    assert R.parse_pmset_therm("") == R.UNKNOWN_THERMAL and R.UNKNOWN_THERMAL.label() == "unknown"


def test_nvml_reasons_name_heat_and_power_only():
    assert R.nvml_reasons(0) == R.Thermal("nominal", "no thermal or power slowdown", "NVML throttle reasons")
    assert R.nvml_reasons(0x1 | 0x4 | 0x100) == R.nvml_reasons(0)  # idle, application clocks, display: not heat
    for bit, name in ((0x2, "power cap (software)"), (0x20, "thermal slowdown (software)"),
                      (0x40, "thermal slowdown (hardware)"), (0x80, "power brake (hardware)"),
                      (0x8, "hardware slowdown")):
        assert R.nvml_reasons(bit | 0x1) == R.Thermal("throttled", name, "NVML throttle reasons")
    assert R.nvml_reasons(0x2 | 0x40).detail == "power cap (software), thermal slowdown (hardware)"


def test_rail_power_and_joules_per_token():
    rails = R.rail_power({"cpu_total_mj": 20_000.0, "gpu_mj": 0.0, "dram_mj": 1_000.0}, 4.0)
    assert rails == [R.RailPower("cpu", 5.0, 20.0), R.RailPower("gpu", None, None, "frozen: the counter did not move "
                                                                                   "while the machine worked"),
                     R.RailPower("ane", None, None, "not reported on this Mac"), R.RailPower("dram", 0.25, 1.0)]
    assert [r.label() for r in rails] == ["cpu: 5.00 W", "gpu: frozen: the counter did not move while the machine "
                                          "worked", "ane: not reported on this Mac", "dram: 0.25 W"]
    idle = R.rail_power({"cpu_total_mj": 0.0, "gpu_mj": -1.0, "ane_mj": 0.0, "dram_mj": 0.0}, 2.0, busy=False)
    assert [(r.rail, r.watts, r.joules) for r in idle] == [("cpu", 0.0, 0.0), ("gpu", -0.0005, -0.001),
                                                           ("ane", 0.0, 0.0), ("dram", 0.0, 0.0)]
    assert R.rail_power({"ane_mj": 0.0}, 1.0)[2] == R.RailPower("ane", 0.0, 0.0)  # the ANE idles while others work
    assert R.rail_power({"cpu_total_mj": 500.0}, 0.0)[0] == R.RailPower("cpu", None, 0.5)  # no time: no watts

    class Window:
        cpu_total_mj, gpu_mj = 3000.0, 6000.0

    assert [r.watts for r in R.rail_power(Window(), 3.0)] == [1.0, 2.0, None, None]
    per = R.rails_joules_per_token(rails + [R.RailPower("x", None, 9.0)], 10)
    assert per == {"cpu": 2.0, "dram": 0.1}
    assert R.rails_joules_per_token(rails, 0) == {} and R.rails_joules_per_token(rails, -1) == {}
    assert R.parse_powermetrics("CPU Power: 4210 mW\nGPU Power: 1500 mW\nANE Power: 0 mW\nCombined Power (CPU + GPU "
                                "+ ANE): 5710 mW\n  DRAM Power: 9 mW") == {"cpu": 4.21, "gpu": 1.5, "ane": 0.0,
                                                                           "combined": 5.71}


def test_others_held():
    mem = R.MacMemory(48 * GiB, R.WorkingSet(36 * GiB, "x"), 20 * GiB, None, None, None, None, None, None)
    assert R.others_held(mem) == 20 * GiB and R.others_held(mem, 5 * GiB) == 15 * GiB
    assert R.others_held(mem, 30 * GiB) == 0
    assert R.others_held(R.MacMemory(1, mem.working_set, None, None, None, None, None, None, None)) is None


def test_thermal_log_per_cell():
    log = R.ThermalLog()
    assert log.describe() is None and not log.changed
    for s in ("nominal (a)", "unknown", None, "nominal (a)", "throttled (b)", "throttled (b)"):
        log.note(s)
    assert log.seen == ["nominal (a)", "throttled (b)"] and log.changed
    assert log.describe() == "nominal (a) → throttled (b)"
    log.mark()
    assert log.seen == [] and log.describe() == "throttled (b)" and not log.changed  # the cell before's last
    log.note("nominal (c)")
    log.note("nominal (d)")  # a new detail, the same state: not a change
    assert log.describe() == "nominal (c) → nominal (d)" and not log.changed
    log.mark()
    log.mark()  # a cell that saw none keeps the last state seen
    assert log.describe() == "nominal (d)" and log.before == ["nominal (d)"]


def _ceilings(**kw):
    base = dict(machine="vm", chip="Xeon", cores=2, memory_bytes=24 * GiB, swap_bytes=0,
                read_gbps={"1": 13.49, "2": 29.6}, measured_at="2026-12-06T23:36:15", seconds=13.88)
    return R.Ceilings(**(base | kw))


def test_the_probes_ceilings_as_read():
    c = _ceilings()
    assert c.attainable_gbps == 29.6 and not c.busy and c.busy_warning() is None and c.decode_tps(2) is None
    assert c.describe() == ("Xeon: 2 cores, 24.0 GiB memory, 0.0 GiB swap\nattainable memory read bandwidth: 29.6 GB/s "
                            "(1 core 13.5, 2 cores 29.6 GB/s)\nmeasured 2026-12-06T23:36:15 in 13.9 s")
    e = {"model": "gemma", "weight_bytes": 246_587_904.0, "decode_tps": {"2": 43.67, "1": 25.85, "10": 1.0},
         "prefill_tps": 613.2, "batch_steps_per_s": {"8": 18.88, "2": 37.52, "16": 9.0}, "cpu_features": ["AVX2", "REPACK"]}
    d = _ceilings(engine=e, busy_cores=0.25)
    assert d.decode_tps(2) == 43.67 and d.decode_tps(3) is None and not d.busy
    assert _ceilings(engine={"decode_tps": {1: 5.0}}).decode_tps(1) == 5.0  # an int key, as measured before JSON
    assert d.describe().splitlines()[2:] == [
        "llama.cpp decode, one stream of gemma (0.247 GB read per token): 1 thread 25.9, 2 threads 43.7, 10 threads 1.0 "
        "tok/s; B streams in one context: B=2 37.5, B=8 18.9, B=16 9.0 steps/s; prefill 613 tok/s (all threads)",
        "llama.cpp's CPU build: AVX2 REPACK",
        "measured 2026-12-06T23:36:15 in 13.9 s, other work on the machine meanwhile: 0.25 cores"]
    col = _ceilings(engine=e | {"logits_s": {"16": 0.0819, "2": 0.02911, "128": 0.5}})
    assert col.describe().splitlines()[2].endswith(
        "prefill 613 tok/s (all threads); a prompt with every token's logits (a batch step of as many columns): "
        "2 tokens 29.1, 16 tokens 81.9, 128 tokens 500.0 ms")
    busy = _ceilings(busy_cores=0.26)
    assert busy.busy
    warning = ("the probe of 2026-12-06T23:36:15 ran while other work used 0.3 of 2 cores: its rates, and the "
               "predictions made from them, may be low; measure again on a quiet machine: inference-top probe --rerun")
    assert busy.busy_warning() == warning and busy.describe().endswith("\nwarning: " + warning)
    assert _ceilings(read_gbps={"1": 5.0, "16": 50.0, "4": 20.0}).describe().splitlines()[1] == (
        "attainable memory read bandwidth: 50.0 GB/s (1 core 5.0, 4 cores 20.0, 16 cores 50.0 GB/s)")  # by cores


def test_a_probe_is_stale_when_a_checks_memory_read_moved_past_a_tenth():
    """The probe read 29.6 GB/s on its 2 cores; a check at 22.2 reads 22.2 / 29.6 - 1 = -25 %: stale, said with
    both figures; 26.7 (-9.8 %) and 32.5 (+9.8 %) are within a tenth; 32.6 (+10.1 %) is not. No figure of the
    probe's at every core, or none measured now: nothing said. The check's time and figure, once cached, are in
    describe()."""
    c = _ceilings()
    assert c.stale(22.2) == "the probe of 2026-12-06T23:36:15 read 29.6 GB/s on 2 cores, 22.2 now (-25%)"
    assert c.stale(26.7) is None and c.stale(32.5) is None
    assert "(+10%)" in (c.stale(32.6) or "")
    assert _ceilings(read_gbps={"1": 13.49}).stale(5.0) is None and c.stale(0.0) is None
    assert c.stale(-1.0) is None  # a figure no reader could give
    assert "0.5 now (-98%)" in (c.stale(0.5) or "")  # a machine crawling is stale, however slow
    checked = _ceilings(checked_at="2026-12-07T14:20:00", checked_gbps=29.1)
    assert checked.describe().endswith("measured 2026-12-06T23:36:15 in 13.9 s; checked 2026-12-07T14:20:00: "
                                       "29.1 GB/s on 2 cores")
    assert _ceilings(checked_at="2026-12-07T14:20:00").describe().endswith("in 13.9 s")  # no figure: not said


def test_edges_of_the_readings():
    assert R.working_set(48 * GiB, {"max_recommended_working_set_size": 1}).bytes == 1
    assert R.working_set(32 * GiB).source == "macOS's default rule: 67% of 32 GiB"  # 32 GiB is a small Mac
    with pytest.raises(ValueError) as e:
        R.parse_vm_stat("")
    assert str(e.value) == "not vm_stat output: no 'page size of N bytes' line"
    # a key with a colon in it: the count is after the last one
    assert R.parse_vm_stat('(page size of 4096 bytes)\n"Pages: odd": 7.').pages == {"Pages: odd": 7}
    # half a millijoule on a busy machine is a reading, not a frozen counter; DRAM frozen like CPU and GPU
    rails = R.rail_power({"cpu_total_mj": 0.5, "gpu_mj": 1.0, "dram_mj": 0.0}, 1.0)
    assert (rails[0].watts, rails[1].watts, rails[3].watts) == (0.0005, 0.001, None)
    assert rails[3].note == "frozen: the counter did not move while the machine worked"
    assert R.rails_joules_per_token([R.RailPower("cpu", 1.0, 3.0)], 1) == {"cpu": 3.0}
    log = R.ThermalLog()
    for s in ("a", "b", "c"):
        log.note(s)
    log.mark()
    assert log.before == ["c"]  # the last state of three
    assert _ceilings(read_gbps={"1": 20.0, "2": 10.0}).describe().splitlines()[1].endswith(
        "(1 core 20.0, 2 cores 10.0 GB/s)")
