"""The cost of a token: power (measured where the machine exposes it without root prompts, else given) and
money per hour (rented: a price per hour; owned: hardware cost over its lifetime, plus electricity).

    $/h   = price_per_hour                                   (rented), or
            hardware_cost ÷ lifetime_hours + W × kWh price ÷ 1000   (owned)
    $/Mtok = $/h ÷ (tok/s × 3600) × 10⁶        J/token = W ÷ tok/s
"""
from __future__ import annotations

import glob
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cost:
    price_per_hour: float | None = None
    hardware_cost: float | None = None
    lifetime_hours: float | None = None
    kwh_price: float | None = None
    watts: float | None = None  # a fixed draw when no meter reads one (--watts)

    @property
    def set(self) -> bool:
        return self.price_per_hour is not None or (self.hardware_cost is not None and self.lifetime_hours)

    def usd_per_hour(self, watts: float | None = None) -> float | None:
        w = watts if watts is not None else self.watts
        if self.price_per_hour is not None:
            return self.price_per_hour
        if self.hardware_cost is None or not self.lifetime_hours:
            return None
        energy = (w or 0.0) * (self.kwh_price or 0.0) / 1000.0
        return self.hardware_cost / self.lifetime_hours + energy

    def usd_per_mtok(self, tps: float | None, watts: float | None = None) -> float | None:
        per_h = self.usd_per_hour(watts)
        if per_h is None or not tps:
            return None
        return per_h / (tps * 3600.0) * 1e6

    def describe(self) -> str:
        if self.price_per_hour is not None:
            return f"rented at ${self.price_per_hour:g}/h"
        if self.hardware_cost is not None and self.lifetime_hours:
            return (f"owned: ${self.hardware_cost:g} over {self.lifetime_hours:g} h"
                    + (f" + electricity ${self.kwh_price:g}/kWh" if self.kwh_price else ""))
        return "no cost given (--price-per-hour, or --hardware-cost and --lifetime)"


def joules_per_token(watts: float | None, tps: float | None) -> float | None:
    return watts / tps if watts and tps else None


class PowerMeter:
    """Watts drawn, from what the machine exposes without a root prompt: Linux RAPL energy counters under
    /sys/class/powercap (package domains, where readable), NVIDIA's NVML; else the --watts figure, said as
    such; else nothing."""

    def __init__(self, fixed_watts: float | None = None, root: str = "/sys/class/powercap"):
        self.fixed = fixed_watts
        self._files = [Path(p) for p in sorted(glob.glob(f"{root}/*rapl*:[0-9]/energy_uj"))
                       if _readable(Path(p))]
        self._last: tuple[float, int] | None = None
        self.source = ("RAPL (" + ", ".join(f.parent.name for f in self._files) + ")" if self._files
                       else "NVML" if _nvml_power() is not None else
                       f"--watts {fixed_watts:g}" if fixed_watts else "none")

    def sample(self) -> float | None:
        if self._files:
            now = time.monotonic()
            total = sum(int(f.read_text()) for f in self._files)
            last, self._last = self._last, (now, total)
            if last is None or total < last[1]:  # the first reading, or a counter that wrapped
                return None
            return (total - last[1]) / 1e6 / (now - last[0])
        if self.source == "NVML":
            return _nvml_power()
        return self.fixed


def _readable(p: Path) -> bool:
    try:
        int(p.read_text())
        return True
    except (OSError, ValueError):
        return False


def _nvml_power() -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(0)) / 1000.0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVIDIA driver or no pynvml: no reading
        return None
