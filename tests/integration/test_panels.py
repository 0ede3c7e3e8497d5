"""The dashboard's panels as pure functions (tui/panels.py) on one hand-made snapshot, compared to golden text
under tests/data/panels/ (checked by eye once: every figure below is in it, formatted as the panel formats it),
without an App; and `e`: the export runs on a worker while the screen keeps refreshing."""
import asyncio
import threading
import time
from pathlib import Path

import pytest

from measure.control.live.snapshot import HistoryPoint, LogLine, Numbers, RunInfo, Snapshot, WorkerRow
from measure.control.live.steps import StepRow
from measure.core.readings import SystemSample
from presets import slo
from tui.panels import (CHART_BW, CHART_PARETO, View, chart_text, pareto_chart, render_clients, render_gauges,
                        render_header, render_log, render_numbers, render_step_table, render_workers, series_charts)

DATA = Path(__file__).parents[1] / "data" / "panels"
GiB = 2**30

INFO = RunInfo(engine="llama.cpp", model="gemma-3-270m", weight_bytes=253_113_024, chip="test chip",
               bandwidth_gbps=100.0, bandwidth_source="--bandwidth", simulated=True, attainable_gbps=80.0)
NUMBERS = Numbers(level="K=2", agg_tps=350.0, streams=2, concurrency=1.9, tpot_p50=0.005, tpot_p90=0.006,
                  predicted_tpot=0.00506, predicted_tps=395.0, predicted_by="K·W/β", mbu=0.63, bw_gbps=50.6,
                  bw_formula="K × W ÷ TPOT p50 = 2 × 0.253 GB ÷ 5.00 ms", ttft_p50=0.012, ttft_p99=0.040,
                  ttft_engine_p50=0.010, ttft_engine_p99=0.030, itl_p50=0.005, requests=42, errors=1,
                  server_view={"running": 2.0, "waiting": 0.0, "kv_cache_usage": 0.25}, workers_cpu_percent=150.0,
                  footprint=None, budget=None, wall=None, ceiling="memory bandwidth (63% of attainable)",
                  goodput_rps=3.5, goodput_tps=300.0, slo_attainment=0.9)
WORKERS = (WorkerRow(0, 1234, "serving", 4, 300 * 2**20, 95.0, 175.0, 21, 0.012),
           WorkerRow(1, None, "warming", None, None, None, 0.0, 0, None))
STEPS = (StepRow("K=1", "instances", 1, 1, True, "settled", 1.0, 198.0, 198.0, 0.00505, 0.011, 0.020, 30, 3.0,
                 190.0, 0.96, 6 * GiB, 50.6, 197.6, "memory bandwidth (63% of attainable)", best=True),
         StepRow("K=2", "instances", 2, 1, False, "waiting for 8 requests (3 so far)", 1.9, 350.0, 175.4, 0.0057,
                 0.012, None, 3, None, None, None, 6 * GiB, 88.8, 395.0, ""))
SNAP = Snapshot(version=7, t=42.0, state="steady", mode="instances", k=2, b=1, users="2", paused=False,
                simulated=True, workers=WORKERS, numbers=NUMBERS,
                system=SystemSample(0, 16 * GiB, 6 * GiB, 10 * GiB, 2 * GiB, 512 * 2**20, 1.5e6, 0.0,
                                    "psi some avg10 %", 0.12, 50.0),
                rss_sum=600 * 2**20, history=tuple(HistoryPoint(float(t), 10.0 * t, 0.005, 0.006, 0.00506, 50.0,
                                                                6 * GiB, 0, 400.0) for t in range(0, 43, 6)),
                markers=((30.0, "K=2"),), log=(), steps=STEPS)
VIEW = View(INFO, title="", banner="", slo=slo("interactive"), memory_budget_source="", steps_view=True)


def golden(name: str, text: str) -> None:
    assert text == (DATA / name).read_text(), f"{name} differs from its golden text"


def test_header():
    golden("header.txt", render_header(SNAP, VIEW).plain)
    t = render_header(SNAP, VIEW)
    assert any(str(sp.style) == "bold green" and t.plain[sp.start:sp.end] == " steady " for sp in t.spans)


def test_a_banner_comes_first_and_a_title_replaces_the_model():
    from dataclasses import replace

    text = render_header(SNAP, replace(VIEW, banner="REPLAY ×2 10/60 s", title="my model")).plain
    assert text.startswith(" REPLAY ×2 10/60 s   SIMULATED  llama.cpp · my model 0.253 GB")


def test_gauges():
    golden("gauges.txt", render_gauges(SNAP, VIEW).plain)


def test_numbers():
    golden("numbers.txt", render_numbers(SNAP, VIEW).plain)


def test_workers_and_clients():
    rows = [{"label": "this client", "up": True, "error": None, "tps": 350.0, "requests": 42, "errors": 1},
            {"label": "http://peer:9100", "up": False, "error": "connection refused", "tps": None,
             "requests": None, "errors": None}]
    total = {"tps": 350.0, "requests": 42, "errors": 1, "clients": 1, "down": 1}
    golden("workers.txt", render_clients(render_workers(SNAP), rows, total).plain)


def test_log_lines_after_the_last_seen():
    log = (LogLine(1, 0.5, "info", "serving default"), LogLine(2, 12.25, "warn", "K=3 refused"),
           LogLine(3, 13.0, "error", "worker 1 died"))
    got = render_log(log, 1)
    assert [(seq, line.plain, err) for seq, line, err in got] == [
        (2, "   12.2s warn  K=3 refused", None), (3, "   13.0s error worker 1 died", "worker 1 died")]
    assert str(got[1][1].style) == "red" and render_log(log, 3) == []


def test_step_table():
    golden("steps.txt", render_step_table(SNAP.steps, VIEW.slo).plain)


def test_charts():
    tps, tpot, bw = series_charts(SNAP, INFO)
    assert tps.key == 7 and tps.x_range == (0.0, 42.0) and tps.markers == ((30.0, "K=2"),)
    assert [p for p in tps.series[0][2]] == [0.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 420.0]
    assert tpot.series[0][2][0] == 5.0 and bw.hlines[0][:2] == (100.0, "spec 100 GB/s")
    golden("chart_bw.txt", "\n".join(chart_text(CHART_BW, bw, 60, 12)) + "\n")
    pareto = pareto_chart(SNAP.steps)  # the settled level only
    assert pareto.key == ((198.0,), (198.0,)) and pareto.x_range == pytest.approx((0.0, 217.8))
    golden("chart_pareto.txt", "\n".join(chart_text(CHART_PARETO, pareto, 60, 12)) + "\n")


# ---- `e` on a worker ----------------------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_a_slow_export_runs_on_a_worker_while_the_screen_refreshes(tmp_path, monkeypatch):
    """The export sleeps 3 s; meanwhile the dashboard's own 1 Hz refresh keeps repainting the header (its clock
    moves: the simulated fleet is advanced here), and the export then finishes with its notification."""
    from sim import run_for, sim_controller
    from tui.app import InferenceTop

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(InferenceTop, "_freeze_startup", staticmethod(lambda: None))
    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 5)
    real_export = c.export
    span: dict[str, object] = {}

    def slow_export(path=None):
        span["thread"] = threading.current_thread()
        span["start"] = time.monotonic()
        time.sleep(3.0)
        out = real_export(path)
        span["end"] = time.monotonic()
        return out

    monkeypatch.setattr(c, "export", slow_export)
    app = InferenceTop(c, refresh_hz=1.0, live=True)
    painted: list[tuple[float, str]] = []  # (when, the header's text) at each repaint of its first line
    async with app.run_test(size=(160, 48)) as pilot:
        header = app.query_one("#header")
        paint = header.render_line

        def spy(y):
            if y == 1:
                painted.append((time.monotonic(), header._text.plain))
            return paint(y)

        header.render_line = spy
        await pilot.press("e")
        t0 = time.monotonic()
        while "end" not in span and time.monotonic() - t0 < 10:
            run_for(c, fleet, clock, 0.5)  # the run goes on: the header's t= moves
            await asyncio.sleep(0.25)
        await app.workers.wait_for_complete()
        await pilot.pause()
        notes = [n.message for n in app._notifications]
        await pilot.press("q")
    assert span["thread"] is not threading.main_thread()
    during = {text for t, text in painted if span["start"] < t < span["end"]}
    assert len(during) >= 2, f"the header was repainted with {len(during)} texts while the export ran"
    assert len(list(tmp_path.glob("inference-top-*.json"))) == 1
    assert any(n.startswith("exported to ") for n in notes)


@pytest.mark.asyncio
async def test_a_failed_export_says_so_and_stays_up(tmp_path, monkeypatch):
    from sim import run_for, sim_controller
    from tui.app import STICKY, InferenceTop

    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 2)

    def failing(path=None):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(c, "export", failing)
    app = InferenceTop(c, live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("e")
        await app.workers.wait_for_complete()
        await pilot.pause()
        notes = [(n.message, n.timeout) for n in app._notifications]
        assert app.is_running
        await pilot.press("q")
    assert ("export failed: [Errno 13] Permission denied", STICKY) in notes
