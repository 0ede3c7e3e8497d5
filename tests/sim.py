"""A deterministic dashboard for snapshot and Pilot tests: the SIMULATED fleet on a fake clock."""
from measure.core.records import RunMeta
from measure.control.live.controller import LiveController, LiveHooks, LiveSettings
from measure.core.readings import SystemSample
from measure.sources.simulated import SimulatedFleet
import presets

NS = 1_000_000_000


class FakeClock:
    def __init__(self):
        self.now = 1_000 * NS

    def __call__(self):
        return self.now


class FixedProbe:
    """System readings that do not change, so the screen is the same on every machine."""

    def sample(self):
        return SystemSample(0, 16 * 2**30, 6 * 2**30, 10 * 2**30, 2 * 2**30, 0, 0.0, 0.0, "psi some avg10 %", 0.0,
                            50.0)


class NoProcesses:
    """No real processes behind a simulated fleet."""

    def sample(self, pids):
        return {}

    def ours(self):
        return None  # nothing measured: no other work told apart


def sim_controller(k=1, bandwidth=100.0, **kw):
    clock = FakeClock()
    meta = RunMeta(engine="llama.cpp", model="gemma-3-270m (simulated)", model_bytes=253_113_024)
    fleet = SimulatedFleet(meta, k=k, bandwidth_gbps=bandwidth, clock=clock, threaded=False)
    settings = LiveSettings(max_tokens=32, bandwidth_gbps=bandwidth, bandwidth_source="--bandwidth",
                            chip="test chip")
    c = LiveController(fleet, presets.workload("default"), settings,
                       hooks=LiveHooks(sys_probe=FixedProbe(), procs_probe=NoProcesses(), clock=clock), **kw)
    c.start(thread=False)
    return c, fleet, clock


def run_for(c, fleet, clock, seconds, step=0.25):
    for _ in range(int(seconds / step)):
        clock.now += int(step * NS)
        fleet.advance(clock.now)
        c.tick()
