"""probes.ProcessProbe.ours: the CPU of inference-top's own processes (this one and every process below it), from
their CPU times between two calls, on fake processes and a fake clock (no machine read)."""
from __future__ import annotations

from types import SimpleNamespace

import psutil
import pytest

from measure.machine import probes


class FakeProc:
    def __init__(self, pid: int, cpu: float, kids: list[FakeProc] | None = None, gone: bool = False):
        self.pid, self.cpu, self.kids, self.gone = pid, cpu, kids or [], gone

    def cpu_times(self) -> SimpleNamespace:
        if self.gone:
            raise psutil.NoSuchProcess(self.pid)
        return SimpleNamespace(user=self.cpu * 0.75, system=self.cpu * 0.25)

    def children(self, recursive: bool = False) -> list[FakeProc]:
        return self.kids


def test_ours_from_cpu_times(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 102.0, 104.0, 104.0])
    monkeypatch.setattr(probes.time, "monotonic", lambda: next(clock))
    me, worker = FakeProc(1, 10.0), FakeProc(2, 3.0)
    me.kids = [worker]
    monkeypatch.setattr(probes.psutil, "Process", lambda pid=None: me)
    probe = probes.ProcessProbe()
    assert probe.ours() is None  # the first call: a baseline
    # 2 s later: this process +0.5 CPU-s, the worker +1.5: 2.0 CPU-s in 2 s = 100 % of one core
    me.cpu, worker.cpu = 10.5, 4.5
    assert probe.ours() == pytest.approx(100.0)
    # a worker new since the last call counts whole (0.6 CPU-s since it started), one gone is not read:
    # (0.2 + 0.6) ÷ 2 s = 40 %
    me.cpu = 10.7
    me.kids = [FakeProc(2, 9.0, gone=True), FakeProc(3, 0.6)]
    assert probe.ours() == pytest.approx(40.0)
    assert probe.ours() is None  # no time passed: nothing to divide by
