"""The dashboard: keys through Pilot on a SIMULATED fleet (deterministic), one run on the real engine."""
import asyncio
import time

import pytest

from sim import run_for, sim_controller
from tui.app import InferenceTop


def header_text(app) -> str:
    return str(app.query_one("#header").render())


@pytest.mark.asyncio
async def test_keys_change_k_pause_and_header():
    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 8)
    app = InferenceTop(c, live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        app.refresh_numbers()
        assert "K=1" in header_text(app) and "SIMULATED" in header_text(app) and "steady" in header_text(app)
        await pilot.press("plus")
        await pilot.press("plus")
        assert fleet.target_k == 3 and c.k == 3
        run_for(c, fleet, clock, 4)
        app.refresh_numbers()
        assert "K=3" in header_text(app)
        assert sum(w.state == "serving" for w in fleet.workers()) == 3
        assert [m[1] for m in c.snapshot().markers] == ["K=2", "K=3"]
        await pilot.press("minus")
        assert fleet.target_k == 2
        await pilot.press("minus")
        await pilot.press("minus")  # K cannot go below 1: refused, the app stays up
        assert fleet.target_k == 1
        assert any("below 1" in str(n.message) for n in app._notifications)
        await pilot.press("right_square_bracket")  # B in instances mode: refused, says to press m
        assert c.b == 1 and any("press m" in str(n.message) for n in app._notifications)
        await pilot.press("m")
        for _ in range(3):
            await pilot.press("right_square_bracket")
        assert c.mode == "batch" and fleet.mode == "batch" and fleet.b == 4
        run_for(c, fleet, clock, 4)
        app.refresh_numbers()
        assert "mode batch" in header_text(app) and "B=4" in header_text(app)
        assert fleet.workers()[0].active == 4  # four sequences in one engine
        await pilot.press("plus")  # in batch mode +/- change B
        await pilot.press("left_square_bracket")
        await pilot.press("minus")
        assert fleet.b == 3 and fleet.target_k == 1
        await pilot.press("m")
        assert c.mode == "instances"
        await pilot.press("p")
        run_for(c, fleet, clock, 1)
        app.refresh_numbers()
        assert "paused" in header_text(app) and c.paused
        await pilot.press("p")
        assert not c.paused
        await pilot.press("q")
    assert app.return_code == 0 or app.return_code is None


@pytest.mark.asyncio
async def test_export_and_reset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c, fleet, clock = sim_controller(k=2)
    run_for(c, fleet, clock, 10)
    app = InferenceTop(c, live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("e")
        files = list(tmp_path.glob("inference-top-*.json"))
        assert len(files) == 1
        import json

        data = json.loads(files[0].read_text())
        assert data["simulated"] is True and data["k"] == 2 and data["numbers"]["requests"] > 0
        # K=2 sharing β = 100 GB/s: TPOT = 2 × 0.253 GB / 100 GB/s = 5.06 ms per token
        assert data["numbers"]["tpot_p50"] == pytest.approx(2 * 253_113_024 / 100e9, rel=0.01)
        await pilot.press("r")
        c.tick()
        assert c.snapshot().numbers["requests"] == 0
        await pilot.press("question_mark")
        assert app.screen.__class__.__name__ == "HelpScreen"
        await pilot.press("escape")
        await pilot.press("q")


def test_snapshot_steady_k2(snap_compare):
    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 20)
    c.set_k(2)
    run_for(c, fleet, clock, 20)
    assert snap_compare(InferenceTop(c, live=False), terminal_size=(160, 48))


def test_snapshot_help(snap_compare):
    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 5)
    assert snap_compare(InferenceTop(c, live=False), press=["question_mark"], terminal_size=(120, 40))


@pytest.mark.asyncio
async def test_real_engine_plus_then_quit_leaves_no_process(model, tmp_path, monkeypatch):
    from bench.fleet import Fleet
    from bench.live import LiveController, LiveSettings
    from bench.session import build_spec, run_meta
    from conftest import descendants
    import presets

    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path))
    spec = build_spec("llama", model, 1, 512, 1)
    fleet = Fleet(spec, run_meta("llama", model), k=1, threads=1)
    c = LiveController(fleet, presets.workload("default"), LiveSettings(max_tokens=16))
    c.start()
    app = InferenceTop(c, refresh_hz=1.0)
    async with app.run_test(size=(160, 48)) as pilot:
        async def until(pred, timeout=90):
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                s = c.snapshot()
                if s and pred(s):
                    return s
                await asyncio.sleep(0.2)
            raise AssertionError("timed out")

        await until(lambda s: s.state == "steady" and s.numbers["requests"] >= 1)
        await pilot.press("plus")
        s = await until(lambda s: s.k == 2 and sum(w.state in ("serving", "idle") for w in s.workers) == 2
                        and s.state == "steady")
        await asyncio.sleep(0.6)
        assert "K=2" in header_text(app)
        assert all(w.pid for w in s.workers)
        await pilot.press("q")
    t0 = time.monotonic()
    while descendants() and time.monotonic() - t0 < 3:
        await asyncio.sleep(0.1)
    assert descendants() == []
