"""The storage's read rates (`inference-top probe`, beside the memory bandwidth): what a decode step pays for the
bytes that are not in memory (docs/residency.md). Linux only; elsewhere None (a Mac's swap is not probed).

On the model's file system, a file of PROBE_BYTES is written, synced and dropped from the page cache
(posix_fadvise DONTNEED), then read four ways, each from storage and never from the page cache:
- sequential large reads (O_DIRECT, 4 MiB): what a file read in order gets;
- random 4 KiB reads (O_DIRECT): one page at a time, the worst case;
- random reads of swap's cluster (2^vm.page-cluster pages, O_DIRECT): what a swap-in brings at once;
- the file mmap'ed and its pages touched in order, as a decode step touches an mmap'ed model's weights: page
  faults with the kernel's read-around (the device's read_ahead_kb), fault overhead included;
and the same pages touched once more while cached: a minor fault's cost (mapping a page already in memory).
Where O_DIRECT is refused (tmpfs, some file systems) the reads are buffered after DONTNEED, and `method` says so.
"""
from __future__ import annotations

import json
import mmap
import os
import random
import resource
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from measure.core.residency import StorageRates

PROBE_BYTES = 256 << 20
SEQ_BLOCK = 4 << 20
RANDOM_S = 0.4  # each random test reads for this long (or RANDOM_MAX reads)
RANDOM_MAX = 4000
PAGE = mmap.PAGESIZE


def _sysfs_int(path: Path, default: int) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return default


def device_of(path: Path) -> tuple[str, int]:
    """(the block device's name, its read_ahead_kb) for the file system holding `path` ('?', 128 where unknown)."""
    try:
        dev = os.stat(path).st_dev
        sysdir = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
        name = sysdir.resolve().name
        queue = sysdir / "queue" if (sysdir / "queue").exists() else sysdir / ".." / "queue"
        return name, _sysfs_int(queue / "read_ahead_kb", 128)
    except OSError:
        return "?", 128


def swap_places(text: str | None = None) -> list[str]:
    """The swap areas in use (/proc/swaps' first column)."""
    try:
        text = Path("/proc/swaps").read_text() if text is None else text
    except OSError:
        return []
    return [line.split()[0] for line in text.splitlines()[1:] if line.split()]


def _aligned(n: int) -> mmap.mmap:
    return mmap.mmap(-1, n)  # anonymous mappings are page-aligned: O_DIRECT's buffer


def _private(n: int) -> mmap.mmap:
    """Private anonymous memory, as an engine's malloc'ed buffers are. Python's mmap(-1, n) is MAP_SHARED: shmem,
    whose swap-in gives up the swap slot, so every eviction writes the page out again; an engine's clean pages
    keep their slots and are dropped without a write. Swept in a memory group (docs/measurements.md §21): shared
    wrote 1 × the region back each sweep and read 120–137 MB/s; private wrote nothing and read 223–263 MB/s,
    where llama.cpp's loaded weights came back at 244–259 MB/s."""
    return mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _drop(fd: int) -> None:
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _open_direct(path: Path) -> tuple[int, str]:
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0)), "O_DIRECT"
    except OSError:
        fd = os.open(path, os.O_RDONLY)
        return fd, "buffered after posix_fadvise(DONTNEED)"


def _write_file(path: Path) -> None:
    block = os.urandom(SEQ_BLOCK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(PROBE_BYTES // SEQ_BLOCK):
            os.write(fd, block)
        _drop(fd)
    finally:
        os.close(fd)


def _sequential(path: Path) -> tuple[float, str]:
    fd, method = _open_direct(path)
    buf = _aligned(SEQ_BLOCK)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        t0, n = time.perf_counter(), 0
        while True:
            got = os.preadv(fd, [buf], n)
            if got <= 0:
                break
            n += got
        return n / (time.perf_counter() - t0) / 1e9, method
    finally:
        buf.close()
        os.close(fd)


def _random(path: Path, size: int, seed: int) -> float:
    """Bytes/s of random reads of `size` bytes (aligned) over the file, from storage."""
    fd, _ = _open_direct(path)
    buf = _aligned(size)
    rng = random.Random(seed)
    slots = PROBE_BYTES // size
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        t0, n = time.perf_counter(), 0
        while n < RANDOM_MAX and time.perf_counter() - t0 < RANDOM_S:
            os.preadv(fd, [buf], rng.randrange(slots) * size)
            n += 1
        return n * size / (time.perf_counter() - t0)
    finally:
        buf.close()
        os.close(fd)


def _touch(m: mmap.mmap) -> float:
    """Seconds to touch one byte of every page of `m`, in order."""
    t0 = time.perf_counter()
    for off in range(0, len(m), PAGE):
        m[off]
    return time.perf_counter() - t0


def _mmap_faults(path: Path) -> tuple[float, float, float]:
    """(bytes/s of an mmap'ed file's pages faulted in from storage in order, bytes a fault brought (major or
    minor: the kernel's read-around reads ahead of the faults),
    seconds a minor fault: the same pages touched again in a fresh mapping, all in the page cache)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        m = mmap.mmap(fd, PROBE_BYTES, prot=mmap.PROT_READ)
        f0 = resource.getrusage(resource.RUSAGE_SELF)
        cold = _touch(m)
        f1 = resource.getrusage(resource.RUSAGE_SELF)  # read-around makes most of them minor: the pages arrive
        faults = max(1, f1.ru_majflt - f0.ru_majflt + f1.ru_minflt - f0.ru_minflt)  # while the first waits
        m.close()
        m = mmap.mmap(fd, PROBE_BYTES, prot=mmap.PROT_READ)  # a fresh mapping: every page a minor fault
        warm = _touch(m)
        m.close()
        m = mmap.mmap(fd, PROBE_BYTES, prot=mmap.PROT_READ)
        _touch(m)
        mapped = _touch(m)  # the loop's own cost, every page already mapped
        m.close()
    finally:
        os.close(fd)
    pages = PROBE_BYTES // PAGE
    return PROBE_BYTES / cold, PROBE_BYTES / faults, max(0.0, warm - mapped) / pages


MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)  # Linux 5.4+: reclaim these pages now (file: drop; anon: swap out)
SWEEP_CHUNK = 8 << 20


def _sweep_paging_out(m: mmap.mmap) -> float:
    """Bytes/s of a sweep that touches every page in order and pages each chunk out behind it: a step past the
    wall in miniature (every page read back, and reclaimed again)."""
    t0 = time.perf_counter()
    for c in range(0, len(m), SWEEP_CHUNK):
        for off in range(c, min(len(m), c + SWEEP_CHUNK), PAGE):
            m[off]
        m.madvise(MADV_PAGEOUT, c, min(SWEEP_CHUNK, len(m) - c))
    return len(m) / (time.perf_counter() - t0)


def _reread_file(path: Path) -> float | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        m = mmap.mmap(fd, PROBE_BYTES, prot=mmap.PROT_READ)
        try:
            return _sweep_paging_out(m)
        except OSError:  # no MADV_PAGEOUT here
            return None
        finally:
            m.close()
    finally:
        os.close(fd)


def _reread_swap() -> float | None:
    """Bytes/s of anonymous pages swapped back in by a sweep (their second sweep: the first swaps them out); None
    without swap in use."""
    if not swap_places():
        return None
    m = _private(PROBE_BYTES)
    try:
        block = os.urandom(SEQ_BLOCK)
        for c in range(0, PROBE_BYTES, SEQ_BLOCK):
            m[c:c + SEQ_BLOCK] = block
        m.madvise(MADV_PAGEOUT)
        return _sweep_paging_out(m)
    except OSError:
        return None
    finally:
        m.close()


def probe_storage(where: Path) -> StorageRates:
    """Measure the read rates of the file system holding `where` (a folder); the swap's cluster size from
    vm.page-cluster. Leaves nothing behind."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / f".storage-probe-{os.getpid()}"
    t0 = time.perf_counter()
    dev, ra_kb = device_of(where)
    cluster = PAGE << _sysfs_int(Path("/proc/sys/vm/page-cluster"), 3)
    try:
        _write_file(path)
        seq, method = _sequential(path)
        r4k = _random(path, PAGE, 1)
        rcl = _random(path, cluster, 2)
        mm, per_fault, minor = _mmap_faults(path)
        reread = _reread_file(path)
    finally:
        path.unlink(missing_ok=True)
    swaps = swap_places()
    swap_reread = _reread_swap()
    return StorageRates(where=f"{where} (device {dev}, read_ahead_kb {ra_kb})", method=method, seq_gbps=seq,
                        rand_4k_mbps=r4k / 1e6, swap_cluster_bytes=cluster, swap_mbps=rcl / 1e6,
                        mmap_gbps=mm / 1e9, mmap_fault_bytes=per_fault, minor_fault_us=minor * 1e6,
                        read_ahead_bytes=ra_kb * 1024, reread_file_mbps=reread / 1e6 if reread else None,
                        reread_swap_mbps=swap_reread / 1e6 if swap_reread else None,
                        swap_areas=", ".join(swaps) if swaps else "none in use (the rate is the model's file system's)",
                        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"), seconds=time.perf_counter() - t0,
                        method_version=METHOD)


# The probe's method: 2 since its anonymous sweeps map private memory and its group sits at 0.625 of the sweep
# (docs/measurements.md §21); a cached entry measured another way is measured again.
METHOD = 2


def _cache() -> Path:
    return Path(os.environ.get("INFERENCE_TOP_CACHE", Path.home() / ".cache" / "inference-top")) / "storage.json"


def cached_rates(key: str) -> StorageRates | None:
    """The storage rates cached for this machine (`key`: ceilings.machine_key), or None."""
    try:
        d = json.loads(_cache().read_text()).get(key)
        r = StorageRates(**d) if d else None
        return r if r is not None and r.method_version == METHOD else None
    except (OSError, ValueError, TypeError):
        return None


def save(key: str, rates: StorageRates) -> None:
    put_entry(_cache(), key, asdict(rates))


def put_entry(p: Path, key: str, value: dict[str, Any]) -> None:
    """`value` under `key` in the JSON table at `p` (a cache: probe.json, storage.json), the rest kept; written
    whole to a temporary file and moved over it, so a reader never sees half a table. A cache that cannot be
    written is not an error (the next run measures again)."""
    try:
        table = json.loads(p.read_text()) if p.exists() else {}
    except (OSError, ValueError):
        table = {}
    table[key] = value
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(table, indent=1))
        tmp.replace(p)
    except OSError:
        pass


def measured_rates(key: str, where: Path, rerun: bool = False) -> StorageRates | None:
    """The cached rates, measured first if there are none (or when asked); None where they cannot be measured
    (not Linux, a file system that refuses the test file). As root with cgroup v1's memory controller, the sweeps
    inside a memory group too (memcg_rates): past a cgroup's limit the dashboard predicted 11.8 tok/s from the
    sweep paging out behind itself (2914 MB/s) where 4.4–5.4 came; pastwall's mmap limits within 25 % on the
    group's 1549 MB/s."""
    r = None if rerun else cached_rates(key)
    if r is not None:
        return r
    if not hasattr(os, "posix_fadvise"):
        return None
    try:
        r = memcg_rates(probe_storage(where), where)  # the kernel's own reclaim too, where a group can be made
    except OSError:
        return None
    save(key, r)
    return r


# The group's limit: 0.625 of the sweep, a step well past the wall as pastwall's limits (0.6-0.7 of a working set)
# and a dashboard in a group a little below its model are. A file's sweep reads faster the more room it has
# (docs/measurements.md §21: 1570-1630 MB/s at 0.25 of the sweep, 1890 at 0.5, 2050-2070 at 0.75; read_ahead_kb
# 8192 brings 0.5 MiB a fault, and a tight group drops read-ahead pages before they are used); swapped pages
# (32 KiB a fault) read the same at 0.25 and 0.7.
MEMCG_LIMIT = PROBE_BYTES * 5 // 8
MEMCG_CHILD = r"""
import mmap, os, sys, time
size, page = int(sys.argv[2]), mmap.PAGESIZE
if sys.argv[1] == "-":  # private, as an engine's buffers (_private says why)
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    block = os.urandom(1 << 20)
    for c in range(0, size, 1 << 20):
        m[c:c + (1 << 20)] = block
else:
    fd = os.open(sys.argv[1], os.O_RDONLY)
    m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
times = []
for _ in range(5):
    t0 = time.perf_counter()
    for off in range(0, size, page):
        m[off]
    times.append(time.perf_counter() - t0)
print(4 * size / sum(times[1:]))  # the first sweep fills the group; the next four thrash
"""


# Tries of one sweep in the group: the kernel's OOM killer ends some anonymous sweeps in a cgroup v1 group though
# their pages are clean swap cache, as it ends some loaded engines there (docs/measurements.md §21); a sweep that
# ends early is run again, and with none measured the prediction falls back to the plain rates.
MEMCG_TRIES = 3


def _memcg_sweep(group: Path, target: str, tries: int = MEMCG_TRIES) -> float | None:
    import subprocess
    import sys

    procs = str(group / "cgroup.procs")

    def enter() -> None:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    for _ in range(tries):
        try:
            out = subprocess.run([sys.executable, "-c", MEMCG_CHILD, target, str(PROBE_BYTES)], capture_output=True,
                                 text=True, timeout=120, preexec_fn=enter)
            if out.returncode == 0:
                return float(out.stdout.strip())
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    return None


def memcg_rates(rates: StorageRates, where: Path, cg_root: Path = Path("/sys/fs/cgroup/memory")) -> StorageRates:
    """`rates` with the sweeps measured inside a cgroup v1 memory group limited to MEMCG_LIMIT (below the sweep):
    the kernel's own reclaim at every fault, as past a real limit. Root only; the group and the file are removed.
    Unchanged where no group can be made."""
    from dataclasses import replace

    group = cg_root / f"inference-top-storage-{os.getpid()}"
    path = where / f".storage-probe-{os.getpid()}"
    try:
        group.mkdir()
    except OSError:
        return rates
    try:
        (group / "memory.limit_in_bytes").write_text(str(MEMCG_LIMIT))
        _write_file(path)
        f = _memcg_sweep(group, str(path))
        a = _memcg_sweep(group, "-") if swap_places() else None
    finally:
        path.unlink(missing_ok=True)
        remove_group(group)
    return replace(rates, memcg_file_mbps=f / 1e6 if f else None, memcg_swap_mbps=a / 1e6 if a else None)


def remove_group(group: Path, tries: int = 50) -> None:
    """A memory cgroup removed once the kernel lets go of it (rmdir answers EBUSY for a moment after its last
    process ends): `tries` tries 0.1 s apart; one already gone is done."""
    for _ in range(tries):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
