"""The cost of a token: power (measured where the machine exposes it without root prompts, by machine/power.py;
else given) and money per hour (rented: a price per hour; owned: hardware cost over its lifetime, plus electricity).

    $/h   = price_per_hour                                   (rented), or
            hardware_cost ÷ lifetime_hours + W × kWh price ÷ 1000   (owned)
    $/Mtok = $/h ÷ (tok/s × 3600) × 10⁶        J/token = W ÷ tok/s
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    price_per_hour: float | None = None
    hardware_cost: float | None = None
    lifetime_hours: float | None = None
    kwh_price: float | None = None
    watts: float | None = None  # a fixed draw when no meter reads one (--watts)

    @property
    def set(self) -> bool:
        return self.price_per_hour is not None or (self.hardware_cost is not None and bool(self.lifetime_hours))

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
