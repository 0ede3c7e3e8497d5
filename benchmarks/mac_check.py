"""Check every Mac reading of inference-top against the system's own, in one command (docs/design/unified-memory.md).

    python benchmarks/mac_check.py            # memory, working set, swap, pressure, heat, and the budget
    python benchmarks/mac_check.py --power 10 # + 10 s of zeus-apple-silicon energy per rail (pip install
                                              #   zeus-apple-silicon), with mlx busy on the GPU if mlx imports
    sudo python benchmarks/mac_check.py --power 10 --sudo  # + powermetrics' own watts beside ours

Each line prints what inference-top reads (and from where) beside what the system says itself: vm_stat's raw
counters and memory_pressure's free percentage (Activity Monitor's Memory tab is made of the same counters:
Memory Used = App Memory + Wired + Compressed), sysctl's raw values, pmset's raw lines and, with --sudo,
powermetrics. A reading the Mac did not give is printed as such, never as 0.

`--fixtures DIR` replays saved tool outputs instead of running the tools (DIR/sysctl.txt, vm_stat.txt,
memory_pressure.txt, pmset.txt, mlx.json, zeus.json, powermetrics.txt): what the tests do on Linux; the output
then says so on its first line.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from measure.machine import host  # noqa: E402
from measure.core.guard import mac_budget  # noqa: E402

GiB = 1 << 30
FILES = {"sysctl": "sysctl.txt", "vm_stat": "vm_stat.txt", "memory_pressure": "memory_pressure.txt",
         "pmset": "pmset.txt", "powermetrics": "powermetrics.txt"}


class Fixtures:
    """A `run` that answers each tool from DIR (None where its file is absent, as a Mac without the tool)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def __call__(self, cmd: list[str]) -> str | None:
        name = FILES.get(Path(cmd[1] if cmd[0] == "sudo" else cmd[0]).name)
        p = self.folder / name if name else None
        return p.read_text() if p and p.exists() else None

    def json(self, name: str) -> dict[str, Any] | None:
        p = self.folder / name
        return json.loads(p.read_text()) if p.exists() else None


def gib(v: int | float | None) -> str:
    return "not given" if v is None else f"{v / GiB:.2f} GiB"


def raw_line(text: str | None, *keys: str) -> str:
    if not text:
        return "(the tool gave nothing)"
    lines = [ln.strip() for ln in text.splitlines() if any(k in ln for k in keys)]
    return "; ".join(lines) if lines else "(no such line)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--power", type=float, default=0.0, metavar="S", help="read energy per rail over S seconds")
    ap.add_argument("--sudo", action="store_true", help="also run powermetrics (needs root) for its watts")
    ap.add_argument("--fixtures", type=Path, help="replay saved tool outputs from this folder (tests)")
    a = ap.parse_args(argv)
    fx = Fixtures(a.fixtures) if a.fixtures else None
    if fx is None and platform.system() != "Darwin":
        print(f"mac_check: this is {platform.system()}, not macOS: run it on the Mac (or --fixtures DIR)",
              file=sys.stderr)
        return 2
    run = fx or host.run_tool
    print("replaying fixtures from " + str(a.fixtures) + " (not this machine)" if fx else
          f"macOS {platform.mac_ver()[0]} on {platform.machine()}")

    mlx_info = (lambda: fx.json("mlx.json")) if fx else host.mlx_device_info
    mem = host.read_mac_memory(run, mlx_info)
    sysctl_text = run(["sysctl", "hw.memsize", "iogpu.wired_limit_mb", "vm.swapusage",
                       "kern.memorystatus_vm_pressure_level"])
    vm_text = run(["vm_stat"])
    mp_text = run(["memory_pressure", "-Q"])
    info = mlx_info()
    print(f"{'reading':<26} {'inference-top':<44} the system's own")
    rows = [
        ("RAM", gib(mem.total), raw_line(sysctl_text, "hw.memsize")),
        ("GPU working set", f"{gib(mem.working_set.bytes)} ({mem.working_set.source})",
         (f"mlx max_recommended_working_set_size = {info['max_recommended_working_set_size']}; " if info else
          "mlx not importable; ") + raw_line(sysctl_text, "iogpu.wired_limit_mb")),
        ("Memory Used", f"{gib(mem.used)} = App {gib(mem.app)} + Wired {gib(mem.wired)} + Compressed "
         f"{gib(mem.compressed)}", raw_line(vm_text, "page size", "Anonymous", "purgeable", "wired", "occupied")),
        ("free percentage", "—" if mem.free_percent is None else f"{mem.free_percent:.0f} %",
         raw_line(mp_text, "free percentage")),
        ("swap used", gib(mem.swap_used), raw_line(sysctl_text, "vm.swapusage")),
        ("pressure level (1/2/4)", str(mem.pressure_level), raw_line(sysctl_text, "pressure_level")),
    ]
    therm_text = run(["pmset", "-g", "therm"])
    t = host.parse_pmset_therm(therm_text) if therm_text else host.UNKNOWN_THERMAL
    rows.append(("thermal state", t.label(), raw_line(therm_text, "Speed_Limit", "warning level")))
    budget, why = mac_budget(mem.total, mem)
    rows.append(("memory budget", f"{gib(budget)}", why))
    for name, ours, theirs in rows:
        print(f"{name:<26} {ours:<44} {theirs}")
    for n in mem.notes:
        print(f"note: {n}")

    if a.power:
        rails: list[host.RailPower] = []
        if fx:
            w = fx.json("zeus.json")
            rails = host.rail_power(w, float(w.get("seconds", a.power))) if w else []
            if not w:
                print("power: zeus.json absent: no energy window")
        else:
            win = host.EnergyWindow("mac_check")
            if win.begin():
                _busy(a.power)
                rails = win.end(busy=True)
            else:
                print(f"power: {win.error}")
        pm = host.parse_powermetrics(run(["sudo", "powermetrics", "--samplers", "cpu_power,gpu_power", "-n", "1",
                                          "-i", "1000"]) or "") if a.sudo else {}
        for r in rails:
            theirs = f"powermetrics {pm[r.rail]:.2f} W" if r.rail in pm else (
                "powermetrics: run with sudo and --sudo" if not a.sudo else "powermetrics: no such rail")
            print(f"{'power ' + r.rail:<26} {r.label():<44} {theirs}")
    return 0


def _busy(seconds: float) -> None:
    """Keep the GPU working for the energy window (mlx matmuls where mlx imports; else the CPU sleeps)."""
    end = time.monotonic() + seconds
    try:
        import mlx.core as mx

        a = mx.random.normal((2048, 2048))
        while time.monotonic() < end:
            mx.eval(a @ a)
    except ImportError:
        time.sleep(seconds)


if __name__ == "__main__":
    raise SystemExit(main())
