"""What a machine says, as data (docs/design/shape.md, docs/design/unified-memory.md): the pure half of measure/machine's readers.

The parsers are pure functions over the text the tools print (`vm_stat`, `memory_pressure`, `sysctl`,
`pmset -g therm`, `powermetrics`), so tests drive every Mac path on Linux with fixtures of what real Macs print
(tests/data/mac/); the records a reading makes (a SystemSample, a MacMemory, a Thermal state, the probe's
Ceilings) and the arithmetic over them (the GPU working set, what other processes hold, J/token per rail).
Reading the machine itself (running the tools, psutil, /sys, NVML, the probe's processes) is measure/machine's:
machine/host.py, machine/probes.py, machine/ceilings.py.
"""
from __future__ import annotations

import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from measure.core.units import fmt_gib

GiB = 1 << 30
MiB = 1 << 20


def is_mac() -> bool:
    return platform.system() == "Darwin"


# ---- unified memory: what the GPU may wire ---------------------------------------------------------------
# macOS's default for Metal's recommendedMaxWorkingSetSize, from what llama.cpp's ggml_metal_init logs on
# real Macs (docs/design/unified-memory.md cites each): 16 GiB → 10922.67 MiB and 32 GiB → 21845.34 MiB (2/3 of RAM);
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


# NVML's clocks-event (throttle) reasons that mean heat or power, not an idle GPU or an application setting
NVML_HOT = {0x2: "power cap (software)", 0x20: "thermal slowdown (software)", 0x40: "thermal slowdown (hardware)",
            0x80: "power brake (hardware)", 0x8: "hardware slowdown"}


def nvml_reasons(mask: int) -> Thermal:
    hot = [name for bit, name in NVML_HOT.items() if mask & bit]
    if hot:
        return Thermal("throttled", ", ".join(hot), "NVML throttle reasons")
    return Thermal("nominal", "no thermal or power slowdown", "NVML throttle reasons")


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


def rails_joules_per_token(rails: list[RailPower], tokens: int) -> dict[str, float]:
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


def others_held(mem: MacMemory, ours: int = 0) -> int | None:
    """What the OS and the other processes hold: Memory Used less what our own engines hold (`ours`)."""
    if mem.used is None:
        return None
    return max(0, mem.used - ours)


def other_work_cores(machine_busy: float, ours: float) -> float:
    """Cores other work keeps busy: the machine's busy cores less inference-top's own processes' (the probe: this
    process and its reaped workers; the dashboard: this process and every process below it), never below 0."""
    return max(0.0, machine_busy - ours)


def crowded(threads: float, engines: int, cores: int, others: float) -> str:
    """What to do where other work leaves the engines fewer cores than their threads (docs/design/wall.md, "Threads
    beside other work": the dashboard's cores wall and a bench cell's note): an engine's threads meet at a barrier
    after every matmul, so one of them without a core holds up the others, spinning. Beside a busy process holding 1
    of 2 cores the embedded model ran 13.5 tok/s on 2 threads and 24.8 on 1; beside half a core 2 threads were still
    faster (35.2 against 25.7): the free cores are rounded to the nearest, and the threads an engine is told to keep
    are those shared out over the `engines`, at least one. Empty where the threads fit, where each engine has one
    thread already, or where `engines` is not known."""
    free = int(cores - others + 0.5)
    if engines < 1 or threads <= max(free, engines):
        return ""
    return (f"; {threads:.0f} engine threads for {max(0.0, cores - others):.1f} free cores wait on each other at "
            f"every step: try --threads {max(1, free // engines)}")


# ---- the system sampled (machine/probes.py's SystemProbe) ---------------------------------------------
@dataclass
class SystemSample:
    t_ns: int
    mem_total: int
    mem_used: int
    mem_available: int
    swap_total: int
    swap_used: int
    swap_in_bps: float  # bytes/s since the previous sample
    swap_out_bps: float
    pressure_source: str
    pressure: float | None
    cpu_percent: float  # whole machine, % of all cores
    thermal: str | None = None  # host.Thermal.label(): nominal | throttled (what says so) | unknown


class ThermalLog:
    """The thermal states seen since `mark()`, in order, repeats dropped: a cell's "nominal → throttled". A cell
    changed state only where it saw two: the state the cell before it saw last is not one of its own (a machine
    that turned hot between two cells ran the second in one state); it describes a cell that saw none."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.before: list[str] = []  # the last state seen before mark()

    def mark(self) -> None:
        self.before = self.seen[-1:] or self.before
        self.seen = []

    def note(self, label: str | None) -> None:
        if label and label != "unknown" and (not self.seen or self.seen[-1] != label):  # unknown: no reading
            self.seen.append(label)

    @property
    def changed(self) -> bool:
        return len({s.split(" (")[0] for s in self.seen}) > 1

    def describe(self) -> str | None:
        seen = self.seen or self.before
        return " → ".join(seen) if seen else None


# ---- the probe's ceilings (machine/ceilings.py measures them) -------------------------------------------
PROBE_VERSION = 9  # 9: batch_steps_per_s the median of 3 runs each, the batches in turn (one run of B = 8 read 10–15 % slow on an EPYC VM); 8: logits_s (a prompt with every row's logits at 2, 3, 4, 8 … 128 tokens: a batch column's price at the width it is added at, where 7 timed it at 64 → 128 only); 7: column_tps (a prompt's further tokens with every row's logits: a batch column past the probe's largest batch, docs/design/kernels.md "The CPU"); 6: the engine's cpu_features (its batch path: presets/kernels.toml [cpu]); 5: weight_bytes = bytes a token reads, a batch of distinct prompts (docs/design/model-reads.md); 4: busy_cores (3's entries say nothing of how busy the machine was: measured again)
BUSY_LIMIT = 0.25  # cores: other work on the machine during a probe above this marks it busy (its rates low)
STALE_SHARE = 0.10  # a cached probe whose memory read at every core differs from a check's by more is not this
# machine's any more: this VM's read 31.4 GB/s (decode 50.5 tok/s) at 08:27 and 19.8-23.7 (35.4-36.3) at 14:17-14:18,
# with no steal or other work to see; six checks within a minute spread 23.3-24.4 (docs/measurements.md §29)


@dataclass
class Ceilings:
    machine: str
    chip: str
    cores: int
    memory_bytes: int
    swap_bytes: int
    read_gbps: dict[str, float]  # processes → GB/s (JSON keys are strings)
    engine: dict[str, Any] = field(default_factory=dict)  # model, weight_bytes, decode_tps {threads: tok/s},
    # prefill_tps, batch_steps_per_s {B: steps/s}, logits_s {tokens: s}, cpu_features
    measured_at: str = ""
    seconds: float = 0.0
    busy_cores: float | None = None  # other work on the machine during the probe, in cores (others_cores)
    version: int = PROBE_VERSION
    checked_at: str = ""  # the last quiet check that found the machine as the probe measured it (ceilings.get)
    checked_gbps: float | None = None  # the memory read at every core that check measured

    @property
    def busy(self) -> bool:
        """Measured while other work used more than BUSY_LIMIT cores: its rates, and what is predicted from
        them, may be low."""
        return self.busy_cores is not None and self.busy_cores > BUSY_LIMIT

    def busy_warning(self) -> str | None:
        if not self.busy:
            return None
        return (f"the probe of {self.measured_at} ran while other work used {self.busy_cores:.1f} of {self.cores} "
                "cores: its rates, and the predictions made from them, may be low; measure again on a quiet "
                "machine: inference-top probe --rerun")

    @property
    def attainable_gbps(self) -> float:
        return max(self.read_gbps.values())

    def decode_tps(self, threads: int) -> float | None:
        d = self.engine.get("decode_tps") or {}
        return d.get(str(threads)) or d.get(threads)

    def stale(self, now_gbps: float) -> str | None:
        """Why this probe is not the machine's now, from a check's memory read at every core (`now_gbps`, read
        on a quiet machine): more than STALE_SHARE from the probe's own figure; None where it is within, or where
        either figure is missing."""
        then = self.read_gbps.get(str(self.cores))
        if not then or now_gbps <= 0:
            return None
        change = now_gbps / then - 1
        if abs(change) <= STALE_SHARE:
            return None
        return (f"the probe of {self.measured_at} read {then:.1f} GB/s on {self.cores} cores, {now_gbps:.1f} now "
                f"({change:+.0%})")

    def describe(self) -> str:
        bw = ", ".join(f"{k} core{'s' if int(k) > 1 else ''} {v:.1f}" for k, v in sorted(self.read_gbps.items(), key=lambda kv: int(kv[0])))
        out = [f"{self.chip}: {self.cores} cores, {fmt_gib(self.memory_bytes)} memory, "
               f"{fmt_gib(self.swap_bytes)} swap",
               f"attainable memory read bandwidth: {self.attainable_gbps:.1f} GB/s ({bw} GB/s)"]
        e = self.engine
        if e.get("decode_tps"):
            rates = ", ".join(f"{k} thread{'s' if int(k) > 1 else ''} {v:.1f}" for k, v in
                              sorted(e["decode_tps"].items(), key=lambda kv: int(kv[0])))
            batch = ", ".join(f"B={k} {v:.1f}" for k, v in sorted((e.get("batch_steps_per_s") or {}).items(),
                                                                   key=lambda kv: int(kv[0])))
            batch = f"{batch} steps/s" if batch else "not kept (they paged)"
            out.append(f"llama.cpp decode, one stream of {e['model']} ({e['weight_bytes'] / 1e9:.3f} GB read per "
                       f"token): {rates} tok/s; B streams in one context: {batch}; prefill "
                       f"{e['prefill_tps']:.0f} tok/s (all threads)"
                       + ("; a prompt with every token's logits (a batch step of as many columns): "
                          + ", ".join(f"{k} tokens {v * 1e3:.1f}" for k, v in sorted(e["logits_s"].items(),
                                                                                key=lambda kv: int(kv[0])))
                          + " ms" if e.get("logits_s") else ""))
        if e.get("cpu_features"):  # which matmul code a batch step runs (presets/kernels.toml [cpu])
            out.append(f"llama.cpp's CPU build: {' '.join(e['cpu_features'])}")
        out.append(f"measured {self.measured_at} in {self.seconds:.1f} s"
                   + (f", other work on the machine meanwhile: {self.busy_cores:.2f} cores"
                      if self.busy_cores is not None else "")
                   + (f"; checked {self.checked_at}: {self.checked_gbps:.1f} GB/s on {self.cores} cores"
                      if self.checked_at and self.checked_gbps is not None else ""))
        if self.busy:
            out.append(f"warning: {self.busy_warning()}")
        return "\n".join(out)
