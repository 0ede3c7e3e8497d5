"""Residency: how much of what a decode step touches is in memory, what the rest costs, and which memory gives
out first (docs/residency.md).

Pure: parsers over the text Linux's /proc and cgroup files and macOS's vm_stat print, the records a reading
makes, the residency roofline and the rule that names the memory that gives out first. Reading the machine is
measure/machine/residency.py's; the storage's rates are measured by measure/machine/storage.py.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from measure.core.readings import parse_vm_stat
from measure.core.units import GiB, fmt_gib

PAGE = 4096
MB = 1e6


# ---- parsers (Linux) ------------------------------------------------------------------------------------
def parse_kb(text: str) -> dict[str, int]:
    """'Key:   123 kB' lines (smaps_rollup, /proc/PID/status, /proc/meminfo) → bytes by key."""
    out = {}
    for key, num in re.findall(r"^(\w[\w()]*):\s+(\d+) kB", text, re.M):
        out[key] = int(num) * 1024
    return out


def parse_counters(text: str) -> dict[str, int]:
    """'key value' or 'key: value' lines (/proc/vmstat, /proc/PID/io, a cgroup's memory.stat) → ints."""
    out = {}
    for line in text.splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def parse_smaps_of(text: str, path: str) -> tuple[int, int, int]:
    """(bytes mapped, resident, swapped) of the mappings of `path` in a /proc/PID/smaps text."""
    mapped = rss = swap = 0
    inside = False
    for line in text.splitlines():
        head = line.split(None, 5)
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:  # a mapping's first line
            inside = len(head) == 6 and head[5].strip() == path
            continue
        if inside:
            key, _, value = line.partition(":")
            kb = value.split()
            if kb and kb[0].isdigit():
                n = int(kb[0]) * 1024
                if key == "Size":
                    mapped += n
                elif key == "Rss":
                    rss += n
                elif key == "Swap":
                    swap += n
    return mapped, rss, swap


def parse_maps_of(text: str, path: str) -> int:
    """Bytes of the mappings of `path` in a /proc/PID/maps text (the kernel lists them without walking a page)."""
    total = 0
    for line in text.splitlines():
        head = line.split(None, 5)
        if len(head) == 6 and head[5].strip() == path:
            lo, _, hi = head[0].partition("-")
            total += int(hi, 16) - int(lo, 16)
    return total


def parse_majflt(stat: str) -> int:
    """A process's major faults from /proc/PID/stat (the 12th field; the command may hold spaces and ')')."""
    rest = stat[stat.rindex(")") + 2:].split()
    return int(rest[9])  # fields from the 3rd: state ppid pgrp session tty tpgid flags minflt cminflt majflt


def parse_psi(text: str) -> float | None:
    """/proc/pressure/memory (or a cgroup v2 memory.pressure): 'some avg10' in %."""
    m = re.search(r"^some .*?avg10=([\d.]+)", text, re.M)
    return float(m.group(1)) if m else None


# ---- one reading ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProcMemory:
    """One worker's memory: resident (anonymous and file-backed), swapped, the model file's pages mapped and
    resident (0 mapped: weights loaded into memory), its major faults and the bytes it caused storage to read."""

    pid: int
    rss: int
    anon: int
    swap: int
    file_rss: int
    weights_mapped: int = 0
    weights_resident: int = 0
    majflt: int = 0
    read_bytes: int = 0


@dataclass(frozen=True)
class SysMemory:
    """The machine's counters at one moment: swap-ins/outs and major faults (pages, /proc/vmstat), pressure, and
    the memory cgroup of the process (limit, usage and its page cache; None where it has none)."""

    t_ns: int
    pswpin: int = 0
    pswpout: int = 0
    pgmajfault: int = 0
    pressure: float | None = None
    pressure_source: str = "none"
    cgroup_limit: int | None = None
    cgroup_usage: int | None = None
    cgroup_cache: int | None = None
    cgroup_swap: int | None = None


@dataclass(frozen=True)
class Reading:
    """The machine and each worker at one moment; `weights_bytes`: the model file's size; `tokens`: the tokens
    generated up to then (by all workers)."""

    sys: SysMemory
    procs: tuple[ProcMemory, ...]
    weights_bytes: int
    tokens: int = 0
    mincore_resident: int | None = None  # the model file's pages in the page cache (mincore), mapped or not


@dataclass(frozen=True)
class Residency:
    """What the header, a bench cell, a step row and the gauge carry: resident bytes of the weights and of the
    anonymous memory (KV, runtime) against what is swapped, faults per token, swap-in and file read-in MB/s and
    pressure, between two readings."""

    weights_bytes: int
    weights_resident: int
    mmapped: bool
    anon_resident: int
    anon_swapped: int
    majflt_per_token: float | None
    swap_in_mbps: float
    file_read_mbps: float
    pressure: float | None
    pressure_source: str
    cgroup_limit: int | None = None
    workers: tuple[dict[str, Any], ...] = ()

    @property
    def weights_share(self) -> float:
        return self.weights_resident / self.weights_bytes if self.weights_bytes else 1.0

    def fields(self) -> dict[str, Any]:
        """The flat fields of a record header and a bench cell (bytes, MB/s, faults a token)."""
        return {"weights_resident_bytes": self.weights_resident, "weights_bytes": self.weights_bytes,
                "weights_resident_share": round(self.weights_share, 4), "weights_mmapped": self.mmapped,
                "anon_resident_bytes": self.anon_resident, "anon_swapped_bytes": self.anon_swapped,
                "major_faults_per_token": None if self.majflt_per_token is None else round(self.majflt_per_token, 2),
                "swap_in_mbps": round(self.swap_in_mbps, 3), "file_read_mbps": round(self.file_read_mbps, 3),
                "memory_pressure": self.pressure, "memory_pressure_source": self.pressure_source,
                "cgroup_limit_bytes": self.cgroup_limit, "workers": list(self.workers)}

    def gauge(self) -> str:
        """One line for the numbers panel: 'residency: weights 62 % in memory (mmap) · anon 1.2 GiB, 0.3 swapped ·
        14 major faults/token · swap-in 3.1 MB/s · read-in 40 MB/s · PSI 12 %'."""
        how = "mmap" if self.mmapped else "loaded"
        faults = "—" if self.majflt_per_token is None else f"{self.majflt_per_token:.0f}"
        psi = "" if self.pressure is None else f" · pressure {self.pressure:g} ({self.pressure_source})"
        return (f"residency: weights {self.weights_share:.0%} in memory ({how}) · anon {fmt_gib(self.anon_resident)}"
                f", {fmt_gib(self.anon_swapped)} swapped · {faults} major faults/token · swap-in "
                f"{self.swap_in_mbps:.1f} MB/s · read-in {self.file_read_mbps:.1f} MB/s{psi}")


def residency(prev: Reading, cur: Reading) -> Residency:
    """The residency between two readings: the state at `cur`, the rates over the interval. Workers that map the
    model share its page cache: the weights' resident bytes are the most any worker has mapped in (mincore's
    count where it was read); loaded weights are inside each worker's anonymous memory."""
    dt = (cur.sys.t_ns - prev.sys.t_ns) / 1e9
    before = {p.pid: p for p in prev.procs}
    mapped = any(p.weights_mapped for p in cur.procs)
    if mapped:
        resident = max((p.weights_resident for p in cur.procs), default=0)
        if cur.mincore_resident is not None:
            resident = cur.mincore_resident
    else:
        resident = cur.weights_bytes * len(cur.procs) - sum(min(p.swap, cur.weights_bytes) for p in cur.procs)
    faults = sum(max(0, p.majflt - before[p.pid].majflt) for p in cur.procs if p.pid in before)
    reads = sum(max(0, p.read_bytes - before[p.pid].read_bytes) for p in cur.procs if p.pid in before)
    tokens = cur.tokens - prev.tokens

    def rate(n: float) -> float:
        return n / dt if dt > 0 else 0.0

    return Residency(
        weights_bytes=cur.weights_bytes * (1 if mapped else max(1, len(cur.procs))), weights_resident=max(0, resident),
        mmapped=mapped, anon_resident=sum(p.anon for p in cur.procs), anon_swapped=sum(p.swap for p in cur.procs),
        majflt_per_token=faults / tokens if tokens > 0 else None,
        swap_in_mbps=rate((cur.sys.pswpin - prev.sys.pswpin) * PAGE) / MB, file_read_mbps=rate(reads) / MB,
        pressure=cur.sys.pressure, pressure_source=cur.sys.pressure_source, cgroup_limit=cur.sys.cgroup_limit,
        workers=tuple({"pid": p.pid, "rss": p.rss, "anon": p.anon, "swap": p.swap,
                       "weights_resident": p.weights_resident} for p in cur.procs))


# ---- macOS (parse only: tests/data/mac/) -----------------------------------------------------------------
@dataclass(frozen=True)
class MacVm:
    """What vm_stat says of residency: the compressor's bytes (pages stored, and the memory they occupy),
    swap-ins/outs and page-ins (a file's pages read back: an mmap'ed model evicted) in pages of `page` bytes."""

    page: int
    compressed_stored: int
    compressed_occupied: int
    swapins: int
    pageins: int
    file_backed: int


def mac_vm(text: str) -> MacVm:
    v = parse_vm_stat(text)
    return MacVm(v.page, v.bytes("Pages stored in compressor"), v.compressed, v.swapins, v.pages.get("Pageins", 0),
                 v.bytes("File-backed pages"))


def mac_rates(prev: MacVm, cur: MacVm, seconds: float) -> dict[str, float]:
    """Swap-in and page-in MB/s between two vm_stat readings `seconds` apart."""
    if seconds <= 0:
        return {"swap_in_mbps": 0.0, "page_in_mbps": 0.0}
    return {"swap_in_mbps": max(0, cur.swapins - prev.swapins) * cur.page / seconds / MB,
            "page_in_mbps": max(0, cur.pageins - prev.pageins) * cur.page / seconds / MB}


# ---- the storage's rates (machine/storage.py measures them) ----------------------------------------------
@dataclass(frozen=True)
class StorageRates:
    where: str
    method: str  # O_DIRECT, or buffered after posix_fadvise(DONTNEED)
    seq_gbps: float
    rand_4k_mbps: float
    swap_cluster_bytes: int  # 2^vm.page-cluster pages: what one swap-in reads
    swap_mbps: float  # random reads of that size
    mmap_gbps: float  # an mmap'ed file's pages faulted in from storage in order (read-around, faults included)
    mmap_fault_bytes: float  # bytes a fault (major or minor) brought in while the file was faulted in
    minor_fault_us: float  # mapping a page already in memory
    read_ahead_bytes: int
    # a sweep that pages each chunk out behind it (MADV_PAGEOUT): every page read back and reclaimed again, the
    # file's and (swap in use) anonymous pages'; None where not measured
    reread_file_mbps: float | None = None
    reread_swap_mbps: float | None = None
    # the same sweep inside a memory cgroup limited below it (the kernel's own reclaim: root only; pastwall)
    memcg_file_mbps: float | None = None
    memcg_swap_mbps: float | None = None
    swap_areas: str = ""
    measured_at: str = ""
    seconds: float = 0.0
    # how it was measured (machine/storage.py's METHOD); a cache entry without it is the first method's (1)
    method_version: int = 1

    def describe(self) -> str:
        return (f"storage {self.where}: sequential {self.seq_gbps:.2f} GB/s, random 4 KiB {self.rand_4k_mbps:.0f} MB/s,"
                f" random {self.swap_cluster_bytes // 1024} KiB (a swap-in) {self.swap_mbps:.0f} MB/s, an mmap'ed file"
                f" faulted in {self.mmap_gbps:.2f} GB/s ({self.mmap_fault_bytes / 1024:.0f} KiB a fault), a minor "
                f"fault {self.minor_fault_us:.2f} µs ({self.method}); swept paging out: file {_mbps(self.reread_file_mbps)}"
                f", swap {_mbps(self.reread_swap_mbps)}; swept in a memory cgroup: file {_mbps(self.memcg_file_mbps)}, "
                f"swap {_mbps(self.memcg_swap_mbps)}; swap: {self.swap_areas}")


def _mbps(v: float | None) -> str:
    return "not measured" if v is None else f"{v:.0f} MB/s"


# ---- the residency roofline ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResidencyStep:
    """One decode step with part of what it touches out of memory: the step as if all were resident, the
    bytes it must bring back, the time to read them and the faults' own cost. t_step = t_resident + t_io +
    t_faults where the engine's CPU threads take the faults (their compute waits on each, at every matmul's
    barrier); max(t_resident, t_io) + t_faults where the reads go on beside the kernels (`overlap`: a Mac's GPU,
    the compressor and the SSD working beside it). docs/residency.md."""

    t_resident_s: float
    nonresident_bytes: float
    t_io_s: float
    faults: float
    t_faults_s: float
    via: str  # "page cache (mmap'ed weights re-read)" | "swap (anonymous pages)" | "none"
    overlap: bool = False

    @property
    def t_step_s(self) -> float:
        if self.overlap:
            return max(self.t_resident_s, self.t_io_s) + self.t_faults_s
        return self.t_resident_s + self.t_io_s + self.t_faults_s

    @property
    def slowdown(self) -> float:
        return self.t_step_s / self.t_resident_s if self.t_resident_s else 1.0

    @property
    def binding(self) -> str:
        return "storage" if self.t_io_s > self.t_resident_s else "memory bandwidth / compute"


def nonresident_bytes(touched: float, room: float, kept: float = 1.0) -> float:
    """Bytes a step must bring back when `touched` bytes are swept in order each step and only `room` bytes of
    memory are left for them: nothing while they fit; past that, a sweep larger than the memory works against the
    kernel's LRU, which keeps only a share `kept` of the room resident from one sweep to the next (1: only the
    excess comes back; 0: everything touched does). docs/residency.md: The residency roofline."""
    if room >= touched:
        return 0.0
    return touched - max(0.0, room) * kept


# The share of the room that stays resident from one step's sweep to the next. A sweep larger than the memory
# defeats LRU: each page is the least recently used when the sweep needs room, so it is gone by the time the
# sweep comes back to it. Measured (docs/measurements.md §14): 84-100 % of what a step touched came back each step.
KEPT = 0.0
# Where the storage was not probed (a Mac: its compressor takes the pages before the SSD does) only the excess is
# assumed to come back each step, as the roofline assumed before (docs/design/unified-memory.md): the published 48 GB sweep's
# B = 32 (40.0 tok/s) is 38.8 so, and 3.0 with KEPT = 0 at the assumed 3 GB/s (docs/residency.md, the case by hand).
ASSUMED_KEPT = 1.0


def reread_rate(rates: StorageRates, mmapped: bool) -> tuple[float, str]:
    """(bytes/s, what measured it) at which pages come back past the wall: the sweep inside a memory cgroup where
    one was measured (the kernel's own reclaim at every fault); else, for a file, the sweep that pages out behind
    itself, then the file faulted in; for swap, random reads of a swap cluster. An engine's swapped page comes back
    one cluster a major fault (32 KiB a fault in every pastwall run), read by the faulting thread alone: random
    cluster reads. The swap sweep that pages out behind itself reads its pages back in the order it wrote them, so
    swap read-ahead makes it sequential: 1364-1639 MB/s here where an engine's swap-ins in a group came back at
    210-263 and random 32 KiB reads ran 324-399 (docs/measurements.md §21); it is measured and shown, not used."""
    if mmapped:
        for v, what in ((rates.memcg_file_mbps, "a sweep of an mmap'ed file in a memory cgroup"),
                        (rates.reread_file_mbps, "a sweep of an mmap'ed file paging out behind itself")):
            if v:
                return v * MB, what
        return rates.mmap_gbps * 1e9, "an mmap'ed file faulted in"
    if rates.memcg_swap_mbps:
        return rates.memcg_swap_mbps * MB, "a sweep of swapped pages in a memory cgroup"
    return rates.swap_mbps * MB, f"random {rates.swap_cluster_bytes // 1024} KiB reads (a swap cluster)"


def residency_step(t_resident_s: float, touched: float, room: float, rates: StorageRates | None,
                   mmapped: bool) -> ResidencyStep:
    """The step at `room` bytes of memory left for the `touched` bytes (weights and KV) a step reads, on a probed
    (Linux) machine whose engine threads take the faults: t_step = t_resident + t_io + t_faults, t_io = the bytes
    that come back ÷ reread_rate (pastwall's runs: the sum read within 15-31 % of measured in four runs, where the
    max read 29-43 %: docs/measurements.md §21). The faults' cost is inside the sweeps reread_rate measures (each of
    them faulted every page); a plain rate adds a minor fault a page. No rates: no I/O term."""
    miss = nonresident_bytes(touched, room, KEPT)
    if miss <= 0 or rates is None:
        return ResidencyStep(t_resident_s, max(0.0, miss), 0.0, 0.0, 0.0, "none")
    via = "page cache (mmap'ed weights re-read)" if mmapped else "swap (anonymous pages)"
    rate, what = reread_rate(rates, mmapped)
    pages = miss / PAGE
    plain = what.startswith(("an mmap'ed file faulted", "random"))
    return ResidencyStep(t_resident_s, miss, miss / rate, pages, pages * rates.minor_fault_us * 1e-6 if plain else 0.0,
                         f"{via} at {rate / MB:.0f} MB/s ({what})")


# ---- where it starts: which memory gives out first -------------------------------------------------------
@dataclass(frozen=True)
class MemoryLimits:
    """What bounds this process's memory: the physical memory and what is available now, the cgroup's limit and
    usage (v1 memory.limit_in_bytes or v2 memory.max), swap, whether the weights are mmap'ed, and on a Mac
    Metal's working set and the compressor's occupancy."""

    physical: int
    available: int
    swap_total: int = 0
    swap_free: int = 0
    cgroup_limit: int | None = None
    cgroup_usage: int | None = None
    cgroup_name: str = "cgroup memory limit"
    mmapped: bool = True
    mac_working_set: int | None = None
    mac_wired: int | None = None
    mac_compressed: int | None = None


@dataclass(frozen=True)
class GivesOut:
    memory: str  # which memory gives out first, named
    headroom: int  # bytes left before it does
    units: int | None  # requests (or tokens) of context that fit in the headroom
    unit: str
    limit: str  # the limit that sets the headroom

    def line(self) -> str:
        more = f" = {self.units:,} {self.unit}" if self.units is not None else ""
        if self.headroom <= 0:
            return f"{self.memory}: past it by {fmt_gib(-self.headroom)} ({self.limit})"
        return f"{self.memory} in {fmt_gib(self.headroom)}{more} ({self.limit})"


def gives_out(lim: MemoryLimits, held: int, per_unit: float = 0.0, unit: str = "requests") -> GivesOut:
    """Which memory gives out first for a load that holds `held` bytes now, and the headroom before it does,
    in bytes and in units of `per_unit` bytes (a request's KV, or a token's). Rules in docs/residency.md."""
    room, limit = lim.available, f"{fmt_gib(lim.available)} available of {fmt_gib(lim.physical)}"
    if lim.cgroup_limit is not None and lim.cgroup_limit < lim.physical:
        left = lim.cgroup_limit - (lim.cgroup_usage if lim.cgroup_usage is not None else held)
        if left <= room:
            room, limit = left, f"{lim.cgroup_name} {fmt_gib(lim.cgroup_limit)}"
    if lim.mac_working_set is not None:
        ws_left = lim.mac_working_set - (lim.mac_wired if lim.mac_wired is not None else held)
        if ws_left <= room:
            name = "Metal's wired working-set limit"
            return _out(name, ws_left, per_unit, unit, f"working set {fmt_gib(lim.mac_working_set)}")
        return _out("compressed memory (macOS's compressor, then swap)", room, per_unit, unit,
                    limit + (f", {fmt_gib(lim.mac_compressed)} compressed now" if lim.mac_compressed else ""))
    if lim.mmapped:
        name = "the page cache holding the mmap'ed model (weights evicted and re-read from the file: no swap)"
    elif lim.swap_free > 0:
        name = "anonymous pages (KV, loaded weights) swapped"
    else:
        name = "anonymous memory with no swap (the OOM killer)"
    if limit.startswith(lim.cgroup_name):
        name = f"{lim.cgroup_name}: {name}"
        if not lim.mmapped and lim.swap_free > 0:  # measured (benchmarks/pastwall.py, docs/measurements.md §21, §23)
            name += (", or the OOM killer: in a group a little past its limit the kernel kills a decoder whose every "
                     "page it just used (mmap'ed weights are re-read instead)")
    return _out(name, room, per_unit, unit, limit)


def _out(name: str, room: int, per_unit: float, unit: str, limit: str) -> GivesOut:
    units = int(room // per_unit) if per_unit > 0 and room > 0 else (0 if per_unit > 0 else None)
    return GivesOut(name, room, units, unit, limit)


# ---- a level's rate past the wall (plan, the step table, the sweep) ------------------------------------
@dataclass(frozen=True)
class LevelFit:
    """One level against the memory: its working set, the room, the step with its residency, the tok/s."""

    label: str
    working_set: float
    room: float
    step: ResidencyStep
    tps: float

    @property
    def fits(self) -> bool:
        return self.working_set <= self.room


@dataclass(frozen=True)
class LevelMemory:
    """What a level holds: each engine's weights and runtime, each sequence's KV and what it holds beside it, and
    whether the weights are mmap'ed (their pages re-read from the file) or loaded (swapped)."""

    weights: float
    overhead: float
    per_seq: float
    mmapped: bool = True


def level_fit(label: str, kb: tuple[int, int], t_resident: float, touched: float, mem: LevelMemory, room: float,
              rates: StorageRates | None, assumed_bps: float | None = None) -> LevelFit:
    """One level (`kb`: K engines of B sequences; `t_resident` its step, `touched` the bytes all its engines read)
    against `room` bytes: the part of its working set a step does not touch is given up first, the rest is the
    residency roofline's (residency_step). No storage rates: `assumed_bps` (a Mac's assumed swap-in), else none."""
    k, b = kb
    ws = k * (mem.weights + mem.overhead) + k * b * mem.per_seq
    left = room - (ws - touched)
    if rates is None and assumed_bps:  # a Mac (not probed): only the excess, as the published sweep bears out
        miss = nonresident_bytes(touched, left, ASSUMED_KEPT)
        step = ResidencyStep(t_resident, max(0.0, miss), max(0.0, miss) / assumed_bps, 0.0, 0.0,
                             f"swap at {assumed_bps / 1e9:g} GB/s (assumed)" if miss > 0 else "none", overlap=True)
    else:
        step = residency_step(t_resident, touched, left, rates, mem.mmapped)
    return LevelFit(label, ws, room, step, k * b / step.t_step_s)


def format_fits(levels: Sequence[LevelFit]) -> list[str]:
    """plan's residency lines: the first level past the wall with its predicted tok/s, each level after it."""
    first = first_past(levels)
    if first is None:
        return [f"residency: every level fits the {fmt_gib(int(levels[0].room))} of memory" if levels else ""]
    i = list(levels).index(first)
    before = levels[i - 1].tps if i > 0 and levels[i - 1].fits else None
    out = [f"residency: the first level past the wall is {past_wall_note(first, before)}"]
    out += [f"  then {past_wall_note(lv)}" for lv in levels[i + 1:] if not lv.fits]
    return out


def first_past(levels: Sequence[LevelFit]) -> LevelFit | None:
    """The first level whose working set no longer fits."""
    return next((lv for lv in levels if not lv.fits), None)


def past_wall_note(lv: LevelFit, before_tps: float | None = None) -> str:
    """'B=32: working set 38.3 GiB > room 36.0 GiB: predicted 12.1 tok/s (storage-bound: 2.3 GiB re-read a step
    via swap), 0.15 × the level before'."""
    s = lv.step
    ratio = f", {lv.tps / before_tps:.2f} × the level before" if before_tps else ""
    return (f"{lv.label}: working set {fmt_gib(int(lv.working_set))} > room {fmt_gib(int(max(0.0, lv.room)))}: "
            f"predicted {lv.tps:.1f} tok/s ({s.binding}-bound: {s.nonresident_bytes / GiB:.2f} GiB brought back a "
            f"step via {s.via}){ratio}")


def budget_skip(predicted_tps: float, tokens: int, budget_s: float) -> str | None:
    """A bench level predicted to take longer than its time budget: the reason to skip it, else None."""
    if predicted_tps <= 0:
        return None
    t = tokens / predicted_tps
    if t <= budget_s:
        return None
    return (f"predicted {predicted_tps:.2f} tok/s past the memory wall: {tokens} tokens would take {t:.0f} s, over "
            f"the level's budget of {budget_s:.0f} s; skipped")


def to_storage(d: Mapping[str, Any] | None) -> StorageRates | None:
    if not d:
        return None
    try:
        return StorageRates(**d)
    except TypeError:
        return None


__all__ = ["GivesOut", "LevelFit", "LevelMemory", "format_fits", "level_fit", "MemoryLimits", "ProcMemory", "Reading", "Residency", "ResidencyStep",
           "StorageRates", "SysMemory", "budget_skip", "first_past", "gives_out", "mac_rates", "mac_vm",
           "nonresident_bytes", "parse_counters", "parse_kb", "parse_maps_of", "parse_majflt", "parse_psi", "parse_smaps_of",
           "past_wall_note", "residency", "residency_step"]
