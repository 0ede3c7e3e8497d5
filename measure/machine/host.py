"""What the user's own machine says about memory, heat and power (docs/design/unified-memory.md).

Apple Silicon (macOS): unified memory, of which the GPU may wire only Metal's recommended working set —
mlx's `device_info()["max_recommended_working_set_size"]` where mlx imports, else `sysctl iogpu.wired_limit_mb`
where it is set, else the default rule (`default_working_set`); `vm_stat` (Activity Monitor's App Memory,
Wired, Compressed and swap-ins), `memory_pressure` (its free percentage), `sysctl vm.swapusage`, and
`pmset -g therm` (the CPU speed limit macOS imposes when hot). Power per rail (CPU, GPU, ANE, DRAM) from
zeus-apple-silicon's IOReport energy windows where it imports; a rail whose counter did not move while the
machine worked is flagged frozen, never shown as 0 W (the private counters break between macOS releases).
Linux: the thermal zones in /sys/class/thermal and cpufreq's current ÷ maximum clock; NVIDIA: NVML's clock
throttle reasons. Every reading is optional: None (with why) where the machine does not give it.

This module reads the machine (runs the tools, psutil, /sys, NVML, zeus); the parsers over what the tools
print and the records they make are pure, in core/readings.py (re-exported here), so tests drive every Mac
path on Linux with fixtures of what real Macs print (tests/data/mac/).
"""
from __future__ import annotations

import platform
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from measure.core.guard import DEFAULT_BUDGET_FRACTION, mac_budget
from measure.core.readings import (GiB, LARGE_SHARE, MiB, NVML_HOT, RAILS, SMALL_MAC_BYTES, SMALL_SHARE,
                                   UNKNOWN_THERMAL, MacMemory, RailPower, Thermal, VmStat, WorkingSet,
                                   default_working_set, is_mac, rails_joules_per_token, nvml_reasons, others_held,
                                   parse_memory_pressure, parse_pmset_therm, parse_powermetrics, parse_swapusage,
                                   parse_sysctl, parse_vm_stat, rail_power, working_set)
from measure.core.units import fmt_gib

Run = Callable[[list[str]], str | None]  # a command's stdout, None where it cannot run


def run_tool(cmd: list[str], timeout: float = 3.0) -> str | None:
    """A tool's stdout, or None where it is missing, fails or hangs."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 and out.stdout.strip() else None


def mlx_device_info() -> dict[str, Any] | None:
    """mlx's Metal device info, where mlx imports on this machine (never installs or downloads anything)."""
    try:
        import mlx.core as mx
    except Exception:  # not installed, or not a Mac: the next source is read
        return None
    try:
        fn = getattr(mx, "device_info", None) or mx.metal.device_info
        info = fn()
        return dict(info) if isinstance(info, Mapping) else None
    except Exception:
        return None


def linux_thermal(root: str = "/sys") -> Thermal:
    """The hottest thermal zone against its first passive/hot trip point, and cpufreq's current ÷ maximum
    clock on the slowest core: throttled where a zone is at or over its trip, or a core runs below 80 % of
    its maximum while ≥ 1 zone is within 5 °C of its trip (clocks alone fall at idle)."""
    base = Path(root)
    hottest: tuple[float, float | None, str] | None = None
    for zone in sorted(base.glob("class/thermal/thermal_zone*")):
        try:
            temp = int((zone / "temp").read_text()) / 1000
        except (OSError, ValueError):
            continue
        kind = _read(zone / "type") or zone.name
        trip = None
        for tt in sorted(zone.glob("trip_point_*_type")):
            if _read(tt) in ("passive", "hot", "critical"):
                try:
                    trip = int((zone / tt.name.replace("_type", "_temp")).read_text()) / 1000
                    break
                except (OSError, ValueError):
                    continue
        margin = (trip - temp) if trip else None
        if hottest is None or (margin is not None and (hottest[1] is None or margin < hottest[1])) or (
                margin is None and hottest[1] is None and temp > hottest[0]):
            hottest = (temp, margin, kind)
    ratios = []
    for cpu in base.glob("devices/system/cpu/cpu[0-9]*/cpufreq"):
        try:
            ratios.append(int((cpu / "scaling_cur_freq").read_text()) / int((cpu / "cpuinfo_max_freq").read_text()))
        except (OSError, ValueError, ZeroDivisionError):
            continue
    if hottest is None and not ratios:
        return UNKNOWN_THERMAL
    parts = []
    state = "nominal"
    if hottest:
        temp, margin, kind = hottest
        parts.append(f"{kind} {temp:.0f} °C" + (f", {margin:.0f} °C below its trip" if margin is not None else ""))
        if margin is not None and margin <= 0:
            state = "throttled"
        hot = margin is not None and margin <= 5
    else:
        hot = False
    if ratios:
        parts.append(f"slowest core at {min(ratios):.0%} of its maximum clock")
        if hot and min(ratios) < 0.8:
            state = "throttled"
    return Thermal(state, ", ".join(parts), "/sys/class/thermal + cpufreq")


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def nvml_thermal() -> Thermal | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            return nvml_reasons(int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no GPU or driver: the next source is read
        return None


class ThermalReader:
    """The thermal state, read at most every `every_s` seconds (pmset starts a process): Mac → pmset;
    NVIDIA → NVML; Linux → /sys. `run` and `system` are injected by tests."""

    def __init__(self, every_s: float = 2.0, run: Run | None = None, system: Callable[[], str] | None = None,
                 sys_root: str = "/sys", gpu: bool = True):
        """`gpu`: the engine measured runs on the GPU; a CPU engine's state is the CPU's, never NVML's."""
        self.every_s, self.sys_root, self.gpu = every_s, sys_root, gpu
        self.run: Run = run or run_tool
        self.system: Callable[[], str] = system or platform.system
        self._last: tuple[float, Thermal] | None = None

    def read(self) -> Thermal:
        now = time.monotonic()
        if self._last and now - self._last[0] < self.every_s:
            return self._last[1]
        t = self._read()
        self._last = (now, t)
        return t

    def _read(self) -> Thermal:
        if self.system() == "Darwin":
            text = self.run(["pmset", "-g", "therm"])
            return parse_pmset_therm(text) if text else UNKNOWN_THERMAL
        return (nvml_thermal() if self.gpu else None) or linux_thermal(self.sys_root)


@dataclass
class EnergyWindow:
    """zeus-apple-silicon's energy window around a piece of work, where it imports (macOS only)."""

    label: str = "inference-top"
    _monitor: Any = None
    _t0: float = 0.0
    error: str = ""
    rails: list[RailPower] = field(default_factory=list)

    def begin(self) -> bool:
        try:
            from zeus_apple_silicon import AppleEnergyMonitor  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            self.error = "zeus-apple-silicon is not installed (pip install zeus-apple-silicon, macOS only)"
            return False
        try:
            self._monitor = AppleEnergyMonitor()
            self._monitor.begin_window(self.label)
        except Exception as exc:  # IOReport unavailable on this release
            self.error = f"zeus-apple-silicon could not open IOReport: {exc}"
            return False
        self._t0 = time.monotonic()
        return True

    def end(self, busy: bool = True) -> list[RailPower]:
        if self._monitor is None:
            return []
        metrics = self._monitor.end_window(self.label)
        self.rails = rail_power(metrics, time.monotonic() - self._t0, busy)
        return self.rails


def read_mac_memory(run: Run | None = None, mlx_info: Callable[[], Mapping[str, Any] | None] | None = None
                    ) -> MacMemory:
    """Every memory reading a Mac gives without sudo; each None where its tool did not answer."""
    run = run or run_tool
    mlx_info = mlx_info or mlx_device_info
    notes = []
    sc = parse_sysctl(run(["sysctl", "hw.memsize", "iogpu.wired_limit_mb", "vm.swapusage",
                           "kern.memorystatus_vm_pressure_level"]) or "")
    try:
        total = int(sc["hw.memsize"])
    except (KeyError, ValueError):
        import psutil

        total = psutil.virtual_memory().total
        notes.append("sysctl hw.memsize unreadable: psutil's total")
    ws = working_set(total, mlx_info(), sc.get("iogpu.wired_limit_mb"))
    vm_text = run(["vm_stat"])
    vm = None
    if vm_text:
        try:
            vm = parse_vm_stat(vm_text)
        except ValueError as exc:
            notes.append(str(exc))
    mp = run(["memory_pressure", "-Q"])
    swap = parse_swapusage(sc.get("vm.swapusage", ""))
    try:
        level = int(sc["kern.memorystatus_vm_pressure_level"])
    except (KeyError, ValueError):
        level = None
    return MacMemory(total, ws, vm.used if vm else None, vm.app if vm else None, vm.wired if vm else None,
                     vm.compressed if vm else None, parse_memory_pressure(mp) if mp else None,
                     swap.get("used"), level, tuple(notes))



def default_budget(total: int, limit_name: str, gpu_share: float = 1.0) -> tuple[int, str]:
    """The budget when none is given: on a Mac, the unified-memory rule read from the machine (Metal's working set
    bounding the part the GPU wires, `gpu_share`); elsewhere DEFAULT_BUDGET_FRACTION of the tightest memory limit."""
    if is_mac() and limit_name == "physical memory":
        return mac_budget(total, read_mac_memory(), gpu_share)
    return int(DEFAULT_BUDGET_FRACTION * total), f"{DEFAULT_BUDGET_FRACTION:.0%} of {fmt_gib(total)} ({limit_name})"


__all__ = [
    "GiB", "MiB", "is_mac", "SMALL_MAC_BYTES", "SMALL_SHARE", "LARGE_SHARE", "default_working_set",
    "parse_sysctl", "WorkingSet", "working_set", "VmStat", "parse_vm_stat", "parse_memory_pressure",
    "parse_swapusage", "Thermal", "UNKNOWN_THERMAL", "parse_pmset_therm", "NVML_HOT", "nvml_reasons", "RAILS",
    "RailPower", "rail_power", "parse_powermetrics", "rails_joules_per_token", "MacMemory", "others_held", "Run",
    "run_tool", "mlx_device_info", "linux_thermal", "nvml_thermal", "ThermalReader", "EnergyWindow",
    "read_mac_memory", "default_budget",
]
