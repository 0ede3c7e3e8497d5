"""The cores other work keeps busy over a bench cell, and the cell's words for them, on hand-worked readings
(docs/design/wall.md "Threads beside other work")."""
from __future__ import annotations

from types import SimpleNamespace

from measure.control.bench import sweep
from measure.control.bench.cell import CellMachine
from measure.machine import probes


def test_other_work_is_the_machines_busy_cpu_less_our_own_tree(monkeypatch):
    # the machine busy 100.0 → 103.0 core-seconds over 2 s (1.5 cores), our own tree at 50 % of a core: 1.0 core
    busy, clock = iter([100.0, 103.0]), iter([10.0, 12.0])
    ours = iter([None, 50.0])
    monkeypatch.setattr(probes, "busy_cpu_seconds", lambda: next(busy))
    monkeypatch.setattr(probes.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(probes.ProcessProbe, "ours", lambda self: next(ours))
    w = probes.OtherWork()
    w.start()
    assert w.cores_busy() == 1.0
    # our tree busier than the machine read (a reading's edges): never below 0; our tree unreadable: no figure
    busy, clock, ours = iter([0.0, 1.0]), iter([0.0, 1.0]), iter([None, 150.0])
    w.start()
    assert w.cores_busy() == 0.0
    busy, clock, ours = iter([0.0, 1.0]), iter([0.0, 1.0]), iter([None, None])
    w.start()
    assert w.cores_busy() is None


def _cell_machine(monkeypatch, others, local=True, pids=(1234,), k=1, threads=2, cores=2):
    monkeypatch.setattr(sweep, "physical_cores", lambda: cores)
    runner = SimpleNamespace(others=SimpleNamespace(cores_busy=lambda: others), local=local, _pids=lambda: list(pids))
    return sweep.CellRunner._other_work(runner, CellMachine(), k, threads)


def test_a_cells_other_work_from_a_quarter_of_the_cores_with_the_threads_to_keep(monkeypatch):
    # 2 cores: 0.5 (a quarter) is named; 1.5 free rounds to 2, which 2 threads fit
    m = _cell_machine(monkeypatch, 0.5)
    assert (m.other_work_cores, m.other_work) == (0.5, "0.5 of 2 cores")
    m = _cell_machine(monkeypatch, 0.496)  # recorded as 0.5: named, as the figure written says
    assert (m.other_work_cores, m.other_work) == (0.5, "0.5 of 2 cores")
    m = _cell_machine(monkeypatch, 0.494)  # recorded as 0.49: under a quarter, the figure only
    assert (m.other_work_cores, m.other_work) == (0.49, None)
    m = _cell_machine(monkeypatch, 1.004)  # recorded as 1.0, and the words from it
    assert (m.other_work_cores, m.other_work) == (1.0, "1.0 of 2 cores; 2 engine threads for 1.0 free cores wait on "
                                                       "each other at every step: try --threads 1")
    # 8 cores, K = 2 engines of 4 threads, 3 cores of other work: 5 free, 2 threads each
    m = _cell_machine(monkeypatch, 3.0, k=2, threads=4, cores=8)
    assert m.other_work == "3.0 of 8 cores; 8 engine threads for 5.0 free cores wait on each other at every step: " \
                           "try --threads 2"
    # over HTTP, or a replay with no workers of its own: nothing recorded
    assert _cell_machine(monkeypatch, 1.0, local=False) == CellMachine()
    assert _cell_machine(monkeypatch, 1.0, pids=(None,)) == CellMachine()
    assert _cell_machine(monkeypatch, None) == CellMachine()
