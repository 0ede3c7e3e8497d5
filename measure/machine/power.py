"""Power drawn by this machine (docs/design/shape.md): the meter behind core/cost.py's J/token and $/Mtok — Linux
RAPL's energy counters under /sys/class/powercap and NVIDIA's NVML (a polling thread where the driver has no
energy counter), else the --watts figure."""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class PowerMeter:
    """Watts drawn over an interval, from what the machine exposes without a root prompt, every source summed:
    Linux RAPL's top-level package zones under /sys/class/powercap (where readable; their sub-zones are inside
    them, and intel-rapl-mmio repeats the packages, so it is read only where the MSR zones are absent), and
    NVIDIA GPUs through NVML (every GPU's total-energy counter where the driver has one, else its power read
    every `poll_s` and integrated); else the --watts figure, said as such; else nothing.

    sample() returns the mean watts since the previous sample() (None at the first): energy ÷ time, so a cell
    bracketed by two samples gets its own mean draw, not a reading taken after it. `nvml`: the pynvml module
    (None: import it; False: no NVML); `clock`: seconds, monotonic."""

    def __init__(self, fixed_watts: float | None = None, root: str = "/sys/class/powercap", nvml: Any = None,
                 clock: Callable[[], float] = time.monotonic, poll_s: float = 0.1):
        self.fixed = fixed_watts
        self._clock = clock
        self._rapl = [_RaplZone(p) for p in rapl_packages(root)]
        self._gpu = _NvmlEnergy.open(nvml, clock, poll_s) if nvml is not False else None
        self._last: tuple[float, float] | None = None  # (time, joules)
        parts = []
        if self._rapl:
            parts.append("RAPL (" + ", ".join(z.name for z in self._rapl) + ")")
        if self._gpu is not None:
            parts.append(self._gpu.describe())
        self.source = (" + ".join(parts) if parts else f"--watts {fixed_watts:g}" if fixed_watts else "none")

    def sample(self) -> float | None:
        if not self._rapl and self._gpu is None:
            return self.fixed
        now = self._clock()
        joules = sum(z.joules() for z in self._rapl) + (self._gpu.joules() if self._gpu is not None else 0.0)
        last, self._last = self._last, (now, joules)
        if last is None or now <= last[0]:
            return None
        return (joules - last[1]) / (now - last[0])

    def close(self) -> None:
        if self._gpu is not None:
            self._gpu.close()


_RAPL_TOP = re.compile(r"intel-rapl(-mmio)?:\d+")


def rapl_packages(root: str = "/sys/class/powercap") -> list[Path]:
    """The energy_uj files of RAPL's top-level package zones that can be read: intel-rapl:N named package-*
    (not their core/uncore/dram sub-zones intel-rapl:N:M, nor psys, which holds the packages), or, where no
    such zone reads, intel-rapl-mmio:N (the same packages through MMIO: never both)."""
    found: dict[bool, list[Path]] = {False: [], True: []}
    for d in sorted(Path(root).glob("*rapl*")):
        m = _RAPL_TOP.fullmatch(d.name)
        if not m or not _readable(d / "energy_uj"):
            continue
        try:
            label = (d / "name").read_text().strip()
        except OSError:
            label = "package"  # no name to go by: a top-level zone is a package
        if label.startswith("package"):
            found[bool(m.group(1))].append(d / "energy_uj")
    return found[False] or found[True]


class _RaplZone:
    """One RAPL energy counter as cumulative joules since it was opened (a wrap adds its range back)."""

    def __init__(self, path: Path):
        self.path, self.name = path, path.parent.name
        try:
            self.range: int | None = int((path.parent / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            self.range = None
        self.raw = int(path.read_text())
        self.total_uj = 0

    def joules(self) -> float:
        raw = int(self.path.read_text())
        d = raw - self.raw
        if d < 0:  # the counter wrapped (every few minutes to hours, by the package's draw)
            d = d + self.range + 1 if self.range else 0
        self.raw, self.total_uj = raw, self.total_uj + d
        return self.total_uj / 1e6


class _NvmlEnergy:
    """Every NVIDIA GPU's energy as cumulative joules: the driver's total-energy counter (mJ, Volta and later)
    where every GPU has one, else a daemon thread reading each GPU's power every poll_s and integrating it
    (trapezoids; a reading at the call closes the last one)."""

    @classmethod
    def open(cls, nvml: Any, clock: Callable[[], float], poll_s: float) -> _NvmlEnergy | None:
        try:
            if nvml is None:
                import pynvml

                nvml = pynvml
            nvml.nvmlInit()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            if not handles:
                nvml.nvmlShutdown()
                return None
            return cls(nvml, handles, clock, poll_s)
        except Exception:  # noqa: BLE001 - no NVIDIA driver or no pynvml: no reading
            return None

    def __init__(self, nvml: Any, handles: list[Any], clock: Callable[[], float], poll_s: float):
        self.nvml, self.handles, self.clock = nvml, handles, clock
        try:
            self._base = [nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles]
            self.counter = True
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported on GPUs before Volta
            self.counter = False
            self._lock = threading.Lock()
            self._stop = threading.Event()
            self._t, self._w = clock(), self._watts()
            self._j = 0.0
            self._thread = threading.Thread(target=self._poll, args=(poll_s,), name="nvml-power", daemon=True)
            self._thread.start()

    def describe(self) -> str:
        n = len(self.handles)
        return f"NVML ({n} GPU{'s' if n > 1 else ''}, {'energy counter' if self.counter else 'sampled power'})"

    def _watts(self) -> float:
        mw: float = sum(self.nvml.nvmlDeviceGetPowerUsage(h) for h in self.handles)
        return mw / 1e3

    def _step(self) -> float:
        """Integrate up to now (under the lock); the joules so far."""
        now, w = self.clock(), self._watts()
        self._j += (w + self._w) / 2 * (now - self._t)
        self._t, self._w = now, w
        return self._j

    def _poll(self, poll_s: float) -> None:
        while not self._stop.wait(poll_s):
            try:
                with self._lock:
                    self._step()
            except Exception:  # noqa: BLE001 - a failed reading: the next one spans the gap
                pass

    def joules(self) -> float:
        if self.counter:
            mj: float = sum(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) - b
                            for h, b in zip(self.handles, self._base))
            return mj / 1e3
        with self._lock:
            return self._step()

    def close(self) -> None:
        if not self.counter:
            self._stop.set()


def _readable(p: Path) -> bool:
    try:
        int(p.read_text())
        return True
    except (OSError, ValueError):
        return False
