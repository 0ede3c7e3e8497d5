"""What the user's own machine says about memory, heat and power (docs/design.md §21).

Apple Silicon (macOS): unified memory, of which the GPU may wire only Metal's recommended working set —
mlx's `device_info()["max_recommended_working_set_size"]` where mlx imports, else `sysctl iogpu.wired_limit_mb`
where it is set, else the default rule (`default_working_set`); `vm_stat` (Activity Monitor's App Memory,
Wired, Compressed and swap-ins), `memory_pressure` (its free percentage), `sysctl vm.swapusage`, and
`pmset -g therm` (the CPU speed limit macOS imposes when hot). Power per rail (CPU, GPU, ANE, DRAM) from
zeus-apple-silicon's IOReport energy windows where it imports; a rail whose counter did not move while the
machine worked is flagged frozen, never shown as 0 W (the private counters break between macOS releases).
Linux: the thermal zones in /sys/class/thermal and cpufreq's current ÷ maximum clock; NVIDIA: NVML's clock
throttle reasons. Every reading is optional: None (with why) where the machine does not give it.

The parsers are pure functions over the text the tools print, so tests drive every Mac path on Linux with
fixtures of what real Macs print (tests/data/mac/).
"""
from __future__ import annotations

import platform
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GiB = 1 << 30
MiB = 1 << 20

Run = Callable[[list[str]], str | None]  # a command's stdout, None where it cannot run


def run_tool(cmd: list[str], timeout: float = 3.0) -> str | None:
    """A tool's stdout, or None where it is missing, fails or hangs."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 and out.stdout.strip() else None


def is_mac() -> bool:
    return platform.system() == "Darwin"


# ---- unified memory: what the GPU may wire ---------------------------------------------------------------
# macOS's default for Metal's recommendedMaxWorkingSetSize, from what llama.cpp's ggml_metal_init logs on
# real Macs (docs/design.md §21 cites each): 16 GiB → 10922.67 MiB and 32 GiB → 21845.34 MiB (2/3 of RAM);
# 48 GiB → 38654.71 MB = 36 GiB, 64 GiB → 49152 MiB, 96 GiB → 73728 MiB (3/4 of RAM). macOS 26 on 128 GiB
# reports 107.52 GiB (84 %), so the rule moves between releases: it is the fallback, never preferred to
# what the machine itself says.
SMALL_MAC_BYTES = 32 * GiB  # at or below: 2/3 of RAM; above: 3/4
SMALL_SHARE = 2 / 3
LARGE_SHARE = 3 / 4


def default_working_set(total: int) -> int:
    """macOS's default GPU working set for `total` bytes of unified memory (the rule above)."""
    return int(total * (SMALL_SHARE if total <= SMALL_MAC_BYTES else LARGE_SHARE))


def parse_sysctl(text: str) -> dict[str, str]:
    """`sysctl name …` output ("name: value" lines) as a dict."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class WorkingSet:
    bytes: int
    source: str  # where the figure came from, in words


def working_set(total: int, mlx_info: Mapping[str, Any] | None = None, wired_limit_mb: str | None = None) -> WorkingSet:
    """The GPU's working set on unified memory: mlx's device info, else iogpu.wired_limit_mb (0: unset),
    else the default rule."""
    if mlx_info:
        v = mlx_info.get("max_recommended_working_set_size")
        if isinstance(v, (int, float)) and v > 0:
            return WorkingSet(int(v), "Metal's recommended working set (mlx device_info)")
    try:
        mb = int(wired_limit_mb) if wired_limit_mb is not None else 0
    except ValueError:
        mb = 0
    if mb > 0:
        return WorkingSet(min(total, mb * MiB), f"sysctl iogpu.wired_limit_mb = {mb}")
    share = SMALL_SHARE if total <= SMALL_MAC_BYTES else LARGE_SHARE
    return WorkingSet(default_working_set(total), f"macOS's default rule: {share:.0%} of {total / GiB:.0f} GiB")


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


# ---- vm_stat, memory_pressure, swap --------------------------------------------------------------------
@dataclass(frozen=True)
class VmStat:
    page: int
    pages: dict[str, int]

    def bytes(self, key: str) -> int:
        return self.pages.get(key, 0) * self.page

    @property
    def app(self) -> int:
        """Activity Monitor's App Memory: anonymous pages less the purgeable ones."""
        return max(0, self.bytes("Anonymous pages") - self.bytes("Pages purgeable"))

    @property
    def wired(self) -> int:
        return self.bytes("Pages wired down")

    @property
    def compressed(self) -> int:
        """Activity Monitor's Compressed: the pages the compressor occupies."""
        return self.bytes("Pages occupied by compressor")

    @property
    def used(self) -> int:
        """Activity Monitor's Memory Used = App Memory + Wired + Compressed."""
        return self.app + self.wired + self.compressed

    @property
    def cached_files(self) -> int:
        return self.bytes("File-backed pages") + self.bytes("Pages purgeable")

    @property
    def swapins(self) -> int:
        return self.pages.get("Swapins", 0)

    @property
    def swapouts(self) -> int:
        return self.pages.get("Swapouts", 0)


def parse_vm_stat(text: str) -> VmStat:
    """`vm_stat` output: its page size (16384 on Apple Silicon) and every counter, in pages."""
    m = re.search(r"page size of (\d+) bytes", text)
    if not m:
        raise ValueError("not vm_stat output: no 'page size of N bytes' line")
    pages = {}
    for line in text.splitlines()[1:]:
        key, sep, value = line.rpartition(":")
        value = value.strip().rstrip(".")
        if sep and value.isdigit():
            pages[key.strip().strip('"')] = int(value)
    return VmStat(int(m.group(1)), pages)


def parse_memory_pressure(text: str) -> float | None:
    """`memory_pressure` (or `memory_pressure -Q`): the system-wide free percentage."""
    m = re.search(r"System-wide memory free percentage:\s*(\d+(?:\.\d+)?)%", text)
    return float(m.group(1)) if m else None


_SIZE = {"K": 1 << 10, "M": MiB, "G": GiB}


def parse_swapusage(text: str) -> dict[str, int]:
    """`sysctl vm.swapusage`: total, used, free in bytes ("total = 2048.00M  used = 1029.25M …")."""
    out = {}
    for key, num, unit in re.findall(r"(total|used|free)\s*=\s*([\d.]+)([KMG])", text):
        out[key] = int(float(num) * _SIZE[unit])
    return out


# ---- heat -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Thermal:
    """The machine's thermal state now: `state` is nominal | throttled | unknown; `detail` what says so."""

    state: str
    detail: str
    source: str

    def label(self) -> str:
        return f"{self.state} ({self.detail})" if self.detail else self.state


UNKNOWN_THERMAL = Thermal("unknown", "", "none")


def parse_pmset_therm(text: str) -> Thermal:
    """`pmset -g therm`: "CPU_Speed_Limit = N" below 100 or a recorded warning level above 0 is throttling;
    the "No thermal warning level has been recorded" notes are a machine that has not been held back."""
    limits = {k: int(v) for k, v in re.findall(r"(CPU_\w+)\s*=\s*(\d+)", text)}
    levels = [int(v) for v in re.findall(r"(?:thermal|performance) warning level\D{0,20}(\d+)", text, re.I)]
    speed = limits.get("CPU_Speed_Limit")
    if speed is not None and speed < 100:
        return Thermal("throttled", f"CPU speed limit {speed} %", "pmset -g therm")
    if any(levels):
        return Thermal("throttled", f"warning level {max(levels)}", "pmset -g therm")
    if speed is not None or re.search(r"No (?:thermal|performance) warning level has been recorded", text):
        return Thermal("nominal", "CPU speed limit 100 %" if speed is not None else "no warning recorded",
                       "pmset -g therm")
    return UNKNOWN_THERMAL


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


# NVML's clocks-event (throttle) reasons that mean heat or power, not an idle GPU or an application setting
NVML_HOT = {0x2: "power cap (software)", 0x20: "thermal slowdown (software)", 0x40: "thermal slowdown (hardware)",
            0x80: "power brake (hardware)", 0x8: "hardware slowdown"}


def nvml_reasons(mask: int) -> Thermal:
    hot = [name for bit, name in NVML_HOT.items() if mask & bit]
    if hot:
        return Thermal("throttled", ", ".join(hot), "NVML throttle reasons")
    return Thermal("nominal", "no thermal or power slowdown", "NVML throttle reasons")


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
                 sys_root: str = "/sys"):
        self.every_s, self.sys_root = every_s, sys_root
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
        return nvml_thermal() or linux_thermal(self.sys_root)


# ---- power per rail (zeus-apple-silicon) ---------------------------------------------------------------
RAILS = ("cpu_total_mj", "gpu_mj", "ane_mj", "dram_mj")


@dataclass(frozen=True)
class RailPower:
    rail: str
    watts: float | None  # None: unreadable or frozen
    joules: float | None
    note: str = ""  # "frozen: …", "not reported"

    def label(self) -> str:
        if self.watts is None:
            return f"{self.rail}: {self.note}"
        return f"{self.rail}: {self.watts:.2f} W"


def rail_power(window: Mapping[str, Any] | Any, seconds: float, busy: bool = True) -> list[RailPower]:
    """Each rail's mean power over an energy window (zeus AppleEnergyMetrics or a dict of *_mj). A rail that
    reports no counter is 'not reported'; one that stayed at exactly 0 mJ while the machine worked (`busy`)
    is a frozen counter (seen on some macOS releases for the CPU rail), flagged, never 0 W."""
    out = []
    for key in RAILS:
        v = window.get(key) if isinstance(window, Mapping) else getattr(window, key, None)
        name = key.removesuffix("_mj").removesuffix("_total")
        if v is None:
            out.append(RailPower(name, None, None, "not reported on this Mac"))
        elif v <= 0 and busy and name in ("cpu", "gpu", "dram"):
            out.append(RailPower(name, None, None, "frozen: the counter did not move while the machine worked"))
        else:
            out.append(RailPower(name, v / 1e3 / seconds if seconds > 0 else None, v / 1e3))
    return out


def parse_powermetrics(text: str) -> dict[str, float]:
    """`sudo powermetrics --samplers cpu_power,gpu_power -n 1`: watts per rail ("CPU Power: 4210 mW")."""
    out = {}
    for name, mw in re.findall(r"^(CPU|GPU|ANE|Combined) Power[^:]*:\s*([\d.]+)\s*mW", text, re.M):
        out[name.lower()] = float(mw) / 1e3
    return out


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


def joules_per_token(rails: list[RailPower], tokens: int) -> dict[str, float]:
    """J/token per readable rail (frozen and unreported rails left out, not counted as 0)."""
    if tokens <= 0:
        return {}
    return {r.rail: r.joules / tokens for r in rails if r.joules is not None and r.watts is not None}


# ---- one reading of a Mac -------------------------------------------------------------------------------
@dataclass(frozen=True)
class MacMemory:
    total: int
    working_set: WorkingSet
    used: int | None  # Activity Monitor's Memory Used (vm_stat)
    app: int | None
    wired: int | None
    compressed: int | None
    free_percent: float | None  # memory_pressure's system-wide free percentage
    swap_used: int | None
    pressure_level: int | None  # kern.memorystatus_vm_pressure_level: 1 normal, 2 warn, 4 critical
    notes: tuple[str, ...] = ()


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


def others_held(mem: MacMemory, ours: int = 0) -> int | None:
    """What the OS and the other processes hold: Memory Used less what our own engines hold (`ours`)."""
    if mem.used is None:
        return None
    return max(0, mem.used - ours)
