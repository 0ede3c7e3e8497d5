"""The controller the dashboard drives is declared (measure/control/live/protocol.Controller): both controllers
have every member of it, and the app calls nothing on its controller that is not declared there (a replay
`e` once crashed the app: ReplayController had no export). `make lint` checks the same statically (mypy)."""
import ast
import inspect
from dataclasses import asdict
from pathlib import Path

import pytest

from measure.control.live.protocol import Controller
from sim import run_for, sim_controller

APP = Path(__file__).resolve().parents[2] / "tui" / "app.py"
REPLAY_ONLY = {"speed", "set_speed", "seek"}  # ReplayApp's own keys, on ReplayController alone


def protocol_members(proto) -> set[str]:
    return {n for n in vars(proto) if not n.startswith("_")} | set(getattr(proto, "__annotations__", {}))


def called_on_controller(cls_name: str | None = None) -> set[str]:
    """Every `self.c.NAME` in tui/app.py (in one class of it, where named)."""
    tree = ast.parse(APP.read_text())
    if cls_name:
        tree = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    return {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)
            and n.value.attr == "c" and isinstance(n.value.value, ast.Name) and n.value.value.id == "self"}


def recorded_replay(tmp_path):
    from measure.control.live.replay import Recording, ReplayController
    from measure.machine.recorder import Recorder

    path = tmp_path / "session.jsonl"
    c, fleet, clock = sim_controller(k=1)
    c.recorder = Recorder(path, {"engine": "llama.cpp", "model": fleet.meta.model, "simulated": True,
                                 "settings": asdict(c.settings)}, fsync=False)
    run_for(c, fleet, clock, 5)
    c.recorder.close()
    r = ReplayController(Recording.load(path))
    r.start(thread=False)
    return c, r


def check_has(obj, names: set[str]) -> list[str]:
    """The members of `names` obj lacks, or has as a method where the protocol has a property (or back)."""
    wrong = []
    for name in sorted(names):
        if not hasattr(obj, name):
            wrong.append(f"{name}: missing")
            continue
        declared = inspect.getattr_static(Controller, name, None)
        if inspect.isfunction(declared) and not callable(getattr(obj, name)):
            wrong.append(f"{name}: not a method")
    return wrong


def test_the_protocol_declares_what_the_app_calls():
    declared = protocol_members(Controller)
    assert {"snapshot", "export", "toggle_pause", "settings", "close"} <= declared
    assert called_on_controller() - REPLAY_ONLY <= declared, "tui/app.py calls a controller member not declared"
    assert declared <= called_on_controller() | {"close"}, "the protocol declares members the app does not use"
    # the replay-only keys are used only where the controller is a ReplayController
    assert called_on_controller("InferenceTop") & REPLAY_ONLY == set()


def test_both_controllers_have_every_declared_member(tmp_path):
    live, replay = recorded_replay(tmp_path)
    declared = protocol_members(Controller)
    assert check_has(live, declared) == []
    assert check_has(replay, declared) == []
    assert check_has(replay, called_on_controller("ReplayApp")) == []
    assert not hasattr(live, "s") and not hasattr(replay, "s")  # `.settings`, one name
    replay.close()
    live.close()


def test_a_replay_refuses_the_live_keys_and_shows_the_recorded_level(tmp_path):
    live, replay = recorded_replay(tmp_path)
    assert (replay.k, replay.b, replay.mode) == (1, 1, "instances")
    for refusal in (replay.set_k(2), replay.set_b(2), replay.toggle_mode()):
        assert refusal and "replay runs no engine" in refusal
    assert (replay.k, replay.b, replay.mode) == (1, 1, "instances")
    assert replay.caps.simulated and replay.settings is replay.live.settings
    replay.reset_stats()  # request figures count from this moment of the recording
    replay.close()
    live.close()


@pytest.mark.parametrize("name", ["export", "set_k", "totals"])
def test_a_controller_lacking_a_declared_member_is_caught(tmp_path, name):
    """The check above can fail: a ReplayController subclass with one member taken away."""
    from measure.control.live.replay import ReplayController

    _, replay = recorded_replay(tmp_path)
    def gone(self):
        raise AttributeError(name)

    cut = type("Cut", (ReplayController,), {name: property(gone)})
    replay.__class__ = cut
    assert check_has(replay, protocol_members(Controller)) == [f"{name}: missing"]
    replay.close()
