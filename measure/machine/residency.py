"""Residency read live (docs/residency.md): per worker /proc/PID/status (resident, anonymous resident and swapped),
/proc/PID/smaps for the model file's mapping (its pages resident; /proc/PID/maps, its size only, far from the wall), /proc/PID/stat's major faults and
/proc/PID/io's read_bytes; the machine's /proc/vmstat (pswpin, pgmajfault), PSI /proc/pressure/memory, and the
process's own memory cgroup (v1 memory.limit_in_bytes, usage and memory.stat; v2 memory.max and memory.current);
mincore over the model file for its pages in the page cache whether mapped or not. Linux; elsewhere the
readers return None (a Mac's vm_stat is parsed by core/residency.mac_vm from what `vm_stat` prints)."""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from measure.core.residency import (MemoryLimits, ProcMemory, Reading, SysMemory, parse_counters, parse_kb,
                                    parse_maps_of, parse_majflt, parse_psi, parse_smaps_of)
from measure.core.units import NS

if TYPE_CHECKING:
    from measure.core.roofline import Prediction
    from measure.core.sizing import ChipPredictions

NO_LIMIT = 1 << 62


def _read(p: str | Path) -> str | None:
    try:
        return Path(p).read_text()
    except OSError:
        return None


def proc_memory(pid: int, model_path: str | None = None, detail: bool = True) -> ProcMemory | None:
    """One process's residency; None where it is gone or cannot be read. Resident, anonymous and swapped from
    /proc/PID/status (the kernel's counters: no page walk); the model file's pages resident in this process's
    mapping from /proc/PID/smaps (a walk of every page table: kernel time) where `detail`, else only its mapped bytes
    from /proc/PID/maps (weights_resident 0: ResidencyProbe.read puts mincore's count there)."""
    status = _read(f"/proc/{pid}/status")
    stat = _read(f"/proc/{pid}/stat")
    if status is None or stat is None:
        return None
    kb = parse_kb(status)
    mapped = res = 0
    if model_path:
        where = str(Path(model_path).resolve())
        if detail:
            smaps = _read(f"/proc/{pid}/smaps")
            if smaps is not None:
                mapped, res, _ = parse_smaps_of(smaps, where)
        else:
            mapped = parse_maps_of(_read(f"/proc/{pid}/maps") or "", where)
    io = parse_counters(_read(f"/proc/{pid}/io") or "")
    rss, anon = kb.get("VmRSS", 0), kb.get("RssAnon", 0)
    return ProcMemory(pid, rss, anon, kb.get("VmSwap", 0), rss - anon, mapped, res, parse_majflt(stat),
                      io.get("read_bytes", 0))


def own_cgroup(pid: int | str = "self", cg_root: str = "/sys/fs/cgroup") -> tuple[Path | None, str]:
    """The memory cgroup folder of `pid` and its version ('v1' | 'v2'), or (None, '')."""
    text = _read(f"/proc/{pid}/cgroup") or ""
    root = Path(cg_root)
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        rel = parts[2].lstrip("/")
        if "memory" in parts[1].split(","):
            d = root / "memory" / rel
            if d.is_dir():
                return d, "v1"
        elif parts[1] == "":
            for d in (root / rel, root / "unified" / rel):
                if (d / "memory.current").exists():
                    return d, "v2"
    return None, ""


def _limit(v: str | None) -> int | None:
    if v is None or not v.strip() or v.strip() == "max":
        return None
    n = int(v.split()[0])
    return n if 0 < n < NO_LIMIT else None


def sys_memory(pid: int | str = "self") -> SysMemory:
    """The machine's counters now, and the memory cgroup of `pid` (a worker's, where it was put in one)."""
    vm = parse_counters(_read("/proc/vmstat") or "")
    psi_text = _read("/proc/pressure/memory")
    psi = parse_psi(psi_text) if psi_text else None
    d, version = own_cgroup(pid)
    limit = usage = cache = swap = None
    src = "psi some avg10 %" if psi is not None else "none"
    if d is not None and version == "v1":
        limit, usage = _limit(_read(d / "memory.limit_in_bytes")), _limit(_read(d / "memory.usage_in_bytes"))
        st = parse_counters(_read(d / "memory.stat") or "")
        cache, swap = st.get("total_cache", st.get("cache")), st.get("total_swap", st.get("swap"))
        if psi is None:  # no PSI: the v1 group's pressure_level cannot be polled (an eventfd): none read
            src = "none"
    elif d is not None:
        limit, usage = _limit(_read(d / "memory.max")), _limit(_read(d / "memory.current"))
        st = parse_counters(_read(d / "memory.stat") or "")
        cache, swap = st.get("file"), _limit(_read(d / "memory.swap.current"))
        own = _read(d / "memory.pressure")
        if own:
            psi, src = parse_psi(own), "cgroup v2 memory.pressure some avg10 %"
    return SysMemory(time.perf_counter_ns(), vm.get("pswpin", 0), vm.get("pswpout", 0), vm.get("pgmajfault", 0),
                     psi, src, limit, usage, cache, swap)


_LIBC: ctypes.CDLL | None = None
_LOW_BIT = bytes(i & 1 for i in range(256))


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        _LIBC = lib
    return _LIBC


def mincore_resident(path: str | Path) -> int | None:
    """Bytes of the file `path` in the page cache now: mincore over a fresh read-only mapping (mapping a file
    faults nothing in). None where it cannot be read."""
    try:
        lib = _libc()
        fd = os.open(path, os.O_RDONLY)
    except (OSError, AttributeError):
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        addr = lib.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * pages)()
            if lib.mincore(addr, size, vec) != 0:
                return None
            return bytes(vec).translate(_LOW_BIT).count(1) * mmap.PAGESIZE  # bit 0: resident; others undefined
        finally:
            lib.munmap(addr, size)
    finally:
        os.close(fd)


class ResidencyProbe:
    """Readings of a set of workers and the machine, for core/residency.residency between consecutive ones."""

    def __init__(self, model_path: str | None, weights_bytes: int, mincore: bool = True):
        self.model_path, self.weights_bytes, self.mincore = model_path, weights_bytes, mincore

    def read(self, pids: Iterable[int | None], tokens: int = 0, detail: bool = True) -> Reading:
        """The workers and the machine now; `detail` False (far from the wall, with mincore): each worker's mapping
        of the model from /proc/PID/maps, its resident pages taken as mincore's count, no smaps walk."""
        detail = detail or not self.mincore
        procs = tuple(p for p in (proc_memory(pid, self.model_path, detail) for pid in pids if pid) if p is not None)
        first = next((p.pid for p in procs), "self")
        mc = mincore_resident(self.model_path) if self.mincore and self.model_path else None
        if not detail and mc is not None:
            procs = tuple(replace(p, weights_resident=min(p.weights_mapped, mc)) for p in procs)
        return Reading(sys_memory(first), procs, self.weights_bytes, tokens, mc)


def limits(pid: int | str = "self", mmapped: bool = True) -> MemoryLimits:
    """What bounds the memory of `pid`: physical and available memory, swap, its cgroup's limit and usage."""
    vm, sw = psutil.virtual_memory(), psutil.swap_memory()
    s = sys_memory(pid)
    d, version = own_cgroup(pid)
    name = "cgroup v1 memory.limit_in_bytes" if version == "v1" else "cgroup v2 memory.max"
    return MemoryLimits(vm.total, vm.available, sw.total, sw.free, s.cgroup_limit, s.cgroup_usage, name, mmapped)


__all__ = ["NS", "ResidencyProbe", "limits", "mincore_resident", "own_cgroup", "proc_memory", "sys_memory"]


def plan_lines(rows: Sequence[Prediction], result: Mapping[str, Any], chip: str | None, context: int) -> list[str]:
    """plan's residency lines (docs/residency.md: Seen as it happens): each predicted level against plan's budget,
    the first past it marked with its predicted tok/s. The storage rates are this machine's (`--chip this`, the
    probe's cache); on unified memory a Mac's assumed swap-in rate (roofline.ASSUMED_SWAP_GBPS); elsewhere none
    is known and no line is printed."""
    from measure.core.residency import LevelMemory, format_fits, level_fit
    from measure.core.roofline import ASSUMED_SWAP_GBPS
    from measure.machine import storage
    from measure.machine.probes import machine_key

    rates = storage.cached_rates(machine_key()) if chip == "this" else None
    if rates is None and not result.get("unified"):
        return []
    row = next((r for r in result["rows"] if r["context"] == context), None) or result["rows"][0]
    mem = LevelMemory(result["weights"], result["overhead"], row["kv_per_request"] + row["engine_per_request"],
                      mmapped=not result.get("unified"))  # mlx loads its weights; llama.cpp maps them
    fits = [level_fit(f"{p.mode} K={p.k} B={p.b}", (p.k, p.b), p.tpot_s * (1 - p.shares.get("swap", 0.0)),
                      p.bytes_per_s * p.tpot_s, mem, result["budget"], rates, ASSUMED_SWAP_GBPS * 1e9)
            for p in rows if p.mode == "batch"]
    return format_fits(fits)


def predictions_text(predictions: ChipPredictions, result: Mapping[str, Any], chip: str | None, prompt: int,
                     output: int, context: int) -> str:
    """plan's roofline table (roofline.format_predictions) and under it its residency lines (plan_lines)."""
    from measure.core.roofline import format_predictions

    table = format_predictions(predictions.work, predictions.machine, predictions.rows, prompt, output)
    return "\n".join([table, *plan_lines(predictions.rows, result, chip, context)])


def header_fields(mmapped: bool, per_request: float = 0.0) -> dict[str, Any]:
    """A record header's residency at the start (docs/residency.md): which memory gives out first and the headroom,
    the cgroup limit, swap, pressure, the machine's major faults and swap-ins so far, and the storage's rates
    where the probe measured them."""
    from dataclasses import asdict

    from measure.core.residency import gives_out
    from measure.machine import storage
    from measure.machine.probes import machine_key

    lim = limits("self", mmapped)
    s = sys_memory()
    out = gives_out(lim, 0, per_request)
    rates = storage.cached_rates(machine_key())
    return {"gives_out_first": out.memory, "headroom_bytes": out.headroom, "headroom_requests": out.units,
            "limit": out.limit, "cgroup_limit_bytes": lim.cgroup_limit, "swap_total_bytes": lim.swap_total,
            "swap_free_bytes": lim.swap_free, "weights_mmapped": mmapped, "memory_pressure": s.pressure,
            "memory_pressure_source": s.pressure_source, "pswpin": s.pswpin, "pgmajfault": s.pgmajfault,
            "storage": asdict(rates) if rates else None}
