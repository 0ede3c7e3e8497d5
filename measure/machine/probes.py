"""System probes: memory, swap, pressure, CPU (psutil; sysctl on macOS; PSI on Linux; NVML if present)."""
from __future__ import annotations

import platform
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import psutil

from measure.core.guard import detect_wall
from measure.core.readings import SystemSample, ThermalLog, other_work_cores
from measure.machine.host import ThermalReader
from presets import Chip, match_chip

if TYPE_CHECKING:
    import ctypes


def total_memory_bytes() -> int:
    return psutil.virtual_memory().total


NO_LIMIT = 1 << 62  # cgroup v1 writes "no limit" as 9223372036854771712


def memory_limits(proc_cgroup: str = "/proc/self/cgroup", cg_root: str = "/sys/fs/cgroup") -> list[tuple[str, int]]:
    """Every limit on the memory this process (and the workers it spawns) may use: physical memory, the
    cgroup v2 memory.max and memory.high of its group, cgroup v1's memory.limit_in_bytes, RLIMIT_AS and
    RLIMIT_DATA. Unset limits are left out."""
    out = [("physical memory", total_memory_bytes())]
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        lines = []
    root = Path(cg_root)
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2
            for name in ("memory.max", "memory.high"):
                for base in (root / rel, root / "unified" / rel):
                    v = _limit(base / name)
                    if v:
                        out.append((f"cgroup v2 {name}", v))
                        break
        elif "memory" in controllers.split(","):  # cgroup v1
            for base in (root / "memory" / rel, root / "memory"):
                v = _limit(base / "memory.limit_in_bytes")
                if v:
                    out.append(("cgroup v1 memory.limit_in_bytes", v))
                    break
    try:
        import resource

        for name in ("RLIMIT_AS", "RLIMIT_DATA"):
            soft, _ = resource.getrlimit(getattr(resource, name))
            if soft not in (resource.RLIM_INFINITY, -1) and soft < NO_LIMIT:
                out.append((name, int(soft)))
    except (ImportError, ValueError, OSError):
        pass
    return out


def _limit(p: Path) -> int | None:
    try:
        text = p.read_text().strip()
    except OSError:
        return None
    if not text or text == "max":
        return None
    try:
        v = int(text)
    except ValueError:
        return None
    return v if 0 < v < NO_LIMIT else None


def oom_kills(pid: int | str = "self", cg_root: str = "/sys/fs/cgroup") -> int | None:
    """The kernel OOM killer's count for the memory cgroup of `pid` (v2 memory.events, v1 memory.oom_control),
    or None where it cannot be read."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    root = Path(cg_root)
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        rel = parts[2].lstrip("/")
        files = ([root / rel / "memory.events", root / "unified" / rel / "memory.events"] if parts[1] == ""
                 else [root / "memory" / rel / "memory.oom_control"] if "memory" in parts[1].split(",") else [])
        for f in files:
            try:
                for row in f.read_text().splitlines():
                    key, _, value = row.partition(" ")
                    if key == "oom_kill":
                        return int(value)
            except (OSError, ValueError):
                continue
    return None


def effective_memory(limits: list[tuple[str, int]] | None = None) -> tuple[int, str]:
    """(bytes, the limit that sets them): the smallest of memory_limits()."""
    name, v = min(limits or memory_limits(), key=lambda x: x[1])
    return v, name


def machine_key(within: bool = True) -> str:
    """The cache's key for this machine: host, chip, cores, memory, and the tightest limit on memory where it is
    below the physical (a container, a memory cgroup): a probe measured inside one (its bandwidth readers' buffers
    made to fit, its storage sweeps under the limit) is that container's, never the whole machine's. `within`
    False: the machine's key outside any limit."""
    import socket

    name, _ = detect_chip()
    total = psutil.virtual_memory().total
    limit, limit_name = effective_memory()
    lim = f"|{limit_name} {limit}" if within and limit < total else ""
    return f"{socket.gethostname()}|{name}|{psutil.cpu_count(logical=False)}|{total}{lim}"


def physical_cores() -> int:
    return psutil.cpu_count(logical=False) or psutil.cpu_count() or 1


def auto_threads(k: int) -> int:
    """Physical cores ÷ K, at least 1, so K workers never oversubscribe the CPU."""
    return max(1, physical_cores() // max(1, k))


def _sysctl(name: str) -> str | None:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=2)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _nvml_name() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
            return name.decode() if isinstance(name, bytes) else name
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def detect_chip() -> tuple[str, Chip | None]:
    """(the name the OS reports, the matching preset or None). Never guesses a bandwidth."""
    if platform.system() == "Darwin":
        name = _sysctl("machdep.cpu.brand_string") or "Apple (unknown)"
        return name, match_chip(name)
    gpu = _nvml_name()
    if gpu:
        return gpu, match_chip(gpu)
    return _cpu_model(), None


def memory_pressure() -> tuple[str, float | None]:
    """(source, value): Linux PSI 'some avg10' %, or macOS kern.memorystatus_vm_pressure_level (1/2/4)."""
    psi = Path("/proc/pressure/memory")
    if psi.exists():
        try:
            first = psi.read_text().splitlines()[0]
            fields = dict(kv.split("=") for kv in first.split()[1:])
            return "psi some avg10 %", float(fields["avg10"])
        except (OSError, ValueError, KeyError, IndexError):
            return "psi", None
    if platform.system() == "Darwin":
        v = _sysctl("kern.memorystatus_vm_pressure_level")
        return "macOS pressure level", float(v) if v else None
    return "none", None


class SystemProbe:
    """Samples the machine; swap rates are differences between consecutive samples; the thermal state
    (host.ThermalReader: pmset on a Mac, NVML, /sys/class/thermal) rides in every sample."""

    def __init__(self, thermal: ThermalReader | None = None) -> None:
    
        self._last: tuple[int, int, int] | None = None
        self.thermal = thermal or ThermalReader()
        psutil.cpu_percent(None)

    def sample(self) -> SystemSample:
        now = time.perf_counter_ns()
        vm = psutil.virtual_memory()
        sw = psutil.swap_memory()
        sin = sout = 0.0
        if self._last:
            dt = (now - self._last[0]) / 1e9
            if dt > 0:
                sin = max(0.0, (sw.sin - self._last[1]) / dt)
                sout = max(0.0, (sw.sout - self._last[2]) / dt)
        self._last = (now, sw.sin, sw.sout)
        src, pressure = memory_pressure()
        heat = self.thermal.read().label()
        return SystemSample(now, vm.total, vm.total - vm.available, vm.available, sw.total, sw.used,
                            sin, sout, src, pressure, psutil.cpu_percent(None), heat)


def busy_cpu_seconds() -> float:
    """The whole machine's busy CPU seconds since boot, hypervisor steal included (all cores together)."""
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + sum(getattr(t, f, 0.0) for f in ("irq", "softirq", "steal")))


class OtherWork:
    """The cores other work keeps busy over an interval (a bench cell): the machine's busy CPU less inference-top's
    own processes' (this one and every process below it: ProcessProbe.ours), from `start` to `cores_busy`."""

    def __init__(self) -> None:
        self._ours = ProcessProbe()
        self._t0 = 0.0
        self._busy0 = 0.0

    def start(self) -> None:
        self._ours.ours()
        self._t0, self._busy0 = time.monotonic(), busy_cpu_seconds()

    def cores_busy(self) -> float | None:
        """Other work's cores since `start` (None where our own processes could not be read)."""
        ours, dt = self._ours.ours(), time.monotonic() - self._t0
        if ours is None or dt <= 0:
            return None
        return other_work_cores((busy_cpu_seconds() - self._busy0) / dt, ours / 100.0)


class ProcessProbe:
    """RSS and CPU % (of one core) for a set of pids, keeping psutil handles between samples; `ours`: the CPU %
    of this process and every process below it (workers, client processes) together."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}
        self._tree: dict[int, float] = {}  # ours(): each process's CPU seconds at the last call
        self._tree_at: float | None = None

    def ours(self) -> float | None:
        """CPU % (of one core) of inference-top's own processes since the last call (None the first time): what
        the machine's CPU holds that is not other work's (readings.other_work_cores). From their CPU times, a process
        new since the last call counted whole (it started within the interval, give or take its start-up): a
        worker that has just started is ours, never other work."""
        now = time.monotonic()
        try:
            me = psutil.Process()
            tree = [me, *me.children(recursive=True)]
        except psutil.Error:
            return None
        times: dict[int, float] = {}
        for p in tree:
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            times[p.pid] = t.user + t.system
        last, self._tree = self._tree, times
        if self._tree_at is None:
            self._tree_at = now
            return None
        dt, self._tree_at = now - self._tree_at, now
        if dt <= 0:
            return None
        return 100.0 * sum(t - last.get(pid, 0.0) for pid, t in times.items()) / dt

    def sample(self, pids: Iterable[int | None]) -> dict[int, tuple[int, float]]:
        out = {}
        for pid in pids:
            if pid is None:
                continue
            p = self._procs.get(pid)
            try:
                if p is None:
                    p = self._procs[pid] = psutil.Process(pid)
                    p.cpu_percent(None)
                out[pid] = (p.memory_info().rss, p.cpu_percent(None))
            except psutil.Error:
                self._procs.pop(pid, None)
        for gone in set(self._procs) - set(pids):
            self._procs.pop(gone, None)
        return out


_LIBC: ctypes.CDLL | Literal[False] | None = None  # glibc once looked up; False: none here


def release_free_memory() -> bool:
    """Hand the C heap's free pages back to the OS (glibc's malloc_trim): a long-running process that churns
    small objects in several threads otherwise keeps RSS at its high-water mark. False where there is no glibc."""
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if not _LIBC:
        return False
    _LIBC.malloc_trim(0)
    return True


class WallCheck:
    """A finite load's `should_stop`: the memory wall between consecutive system samples (sweep and knee);
    each sample's thermal state goes to `heat` (the cell's states, docs/design/unified-memory.md)."""

    def __init__(self, probe: SystemProbe, heat: ThermalLog | None = None):
        self.probe, self.heat = probe, heat
        self.prev = self._sample()

    def _sample(self) -> SystemSample:
        s = self.probe.sample()
        if self.heat is not None:
            self.heat.note(s.thermal)
        return s

    def __call__(self) -> str | None:
        cur = self._sample()
        why = detect_wall(self.prev, cur, None, None, 0.0)
        self.prev = cur
        return why
