"""The replay dashboard's keys: every key it binds works on a ReplayController (the app calls nothing the replay
lacks), and `e` exports what the replay shows at that moment, in the live export's format."""
import json
from dataclasses import asdict

import pytest

from sim import run_for, sim_controller


def recorded_session(tmp_path):
    """A SIMULATED session recorded for 30 s at K=1 then 30 s at K=2, its live export at the end, and the file."""
    from measure.machine.recorder import Recorder

    path = tmp_path / "session.jsonl"
    c, fleet, clock = sim_controller(k=1)
    c.recorder = Recorder(path, {"engine": "llama.cpp", "model": fleet.meta.model, "model_bytes": fleet.meta.model_bytes,
                                 "simulated": True, "settings": asdict(c.settings), "chip": "test chip",
                                 "bandwidth_gbps": 100.0}, fsync=False)
    run_for(c, fleet, clock, 30)
    c.set_k(2)
    run_for(c, fleet, clock, 30)
    live = json.loads(c.export(tmp_path / "live.json").read_text())
    c.recorder.close()
    return path, live


def replay(path):
    from measure.control.live.replay import Recording, ReplayController

    r = ReplayController(Recording.load(path))
    r.start(thread=False)  # the replay clock moves only when a key seeks
    return r


def exported(tmp_path) -> list:
    return sorted(tmp_path.glob("inference-top-*.json"))


@pytest.mark.asyncio
async def test_e_in_a_replay_exports_the_moment_shown(tmp_path, monkeypatch):
    from tui.app import ReplayApp

    path, live = recorded_session(tmp_path)
    monkeypatch.chdir(tmp_path)
    r = replay(path)
    app = ReplayApp(r, live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("p", "right", "right")  # paused at ≈ 20 s: K=1 (K=2 from 30 s)
        shown = r.snapshot()
        assert shown.k == 1
        await pilot.press("e")
        await app.workers.wait_for_complete()  # the export runs on a worker thread
        assert app.is_running
        files = exported(tmp_path)
        assert len(files) == 1, "e wrote no export"
        data = json.loads(files[0].read_text())
        await pilot.press("q")
    assert set(data) == set(live)  # the live export's format
    assert data["k"] == 1 and data["simulated"] is True and data["model"] == live["model"]
    # what the replay shows at ≈ 20 s, not the end of the recording (K=2, 60 s)
    assert data["numbers"] == json.loads(json.dumps(asdict(shown.numbers), default=str))
    assert len(data["history"]) == len(shown.history) < len(live["history"])
    assert 0 < data["summary_since_reset"]["completed"] < live["summary_since_reset"]["completed"]
    assert data["markers"] == [] and live["markers"] != []


@pytest.mark.asyncio
async def test_every_key_the_replay_binds_works(tmp_path, monkeypatch):
    """Walk ReplayApp.BINDINGS and press every key (q last): the app is still running after each, so every
    method an action calls on the controller exists on ReplayController."""
    from tui.app import HelpScreen, ReplayApp

    path, _ = recorded_session(tmp_path)
    monkeypatch.chdir(tmp_path)
    r = replay(path)
    app = ReplayApp(r, live=False)
    keys = [k.strip() for b in ReplayApp.BINDINGS for k in b.key.split(",")]
    assert {"e", "p", "v", "right", "left", "question_mark", "q"} <= set(keys)
    pressed = []
    async with app.run_test(size=(160, 48)) as pilot:
        for key in keys:
            if key == "q":
                continue
            await pilot.press(key)
            await pilot.pause()
            pressed.append(key)
            assert app.is_running, f"the replay stopped at key {key!r} (pressed {pressed})"
            if isinstance(app.screen, HelpScreen):
                await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
        await pilot.press("q")
    assert app.return_code in (0, None)
    assert len(exported(tmp_path)) == 1  # e, once


def test_a_replay_cannot_run_a_finite_load_and_says_so(tmp_path):
    """A recording replays what happened: it says by capability that it runs no finite load, and a sweep cell or a
    --find level asked of it gets one clear error (its run_requests once returned [] without a word)."""
    from measure.control.live.replay import Recording
    from measure.control.bench.sweep import CellRunner, SweepConfig
    from measure.sources.base import SourceError
    from measure.sources.replay import ReplaySource

    path, _ = recorded_session(tmp_path)
    src = ReplaySource(Recording.load(path))
    assert src.capabilities().finite_loads is False
    with pytest.raises(SourceError, match="cannot run a finite load"):
        CellRunner(src, SweepConfig(), print)
    _, fleet, _ = sim_controller(k=1)  # the simulated fleet serves the dashboard only
    assert fleet.capabilities().finite_loads is False
    with pytest.raises(SourceError, match="cannot run a finite load"):
        CellRunner(fleet, SweepConfig(), print)
