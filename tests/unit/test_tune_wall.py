"""A tune candidate that runs into the memory wall is a row with that reason, and what was started for it (its
server, its source) is stopped: `except CellStopped as stop` once unbound the opener's stop(), so the cleanup
raised UnboundLocalError and a llama-server was left running."""
import presets
from measure.control.tune import Candidate, Settings, cell_measure
from measure.sources.base import CellStopped


class FakeRunner:
    """sweep.CellRunner's part measure calls: the start works, the load meets the wall."""

    def __init__(self, src, cfg, say):
        pass

    def start(self, *a):
        pass

    def load(self, workload, arrivals, stop=None):
        raise CellStopped("swap grew by 2 GiB", [])


class Source:
    closed = False

    def close(self):
        self.closed = True


def test_a_candidate_at_the_memory_wall_is_a_row_and_its_server_is_stopped(tmp_path, monkeypatch):
    import measure.control.bench.sweep as sweep

    monkeypatch.setattr(sweep, "CellRunner", FakeRunner)
    src, stopped = Source(), []
    s = Settings(engines=["llama"], users=2, requests=4, max_tokens=8, ctx=512, budget_s=60.0,
                 slo=presets.slo("interactive"), workload=presets.workload("synthetic:8"))
    measure = cell_measure(lambda c, on_record: (src, "instances", lambda: stopped.append(c)), s, tmp_path, {},
                           lambda m: None)
    c = Candidate("llama", "instances", 1, 1, 1)
    t = measure(c, 4, 30.0)
    assert t.status == "wall" and t.reason == "memory wall: swap grew by 2 GiB"
    assert src.closed and stopped == [c]
