"""The live tune (tune --live, docs/design/tune.md; measure/control/tune/live.TuneControl, tui/tune_app.py): its keys
on the search itself, over null-engine fleets measured for real: s stops the run going on (its row: skipped,
its records so far kept), p holds the next run and the pause is not the budget's, q stops the search (the rows
left: not tried, the answer made of what was measured); and the screen: a row per candidate as it settles,
the front drawn, s and q from the keyboard."""
import threading
import time

import pytest

from measure.control.tune import Tune, TuneControl, TuneIO, candidates, cell_measure
from measure.control.tune.search import Carried
from test_tune import PLANTED, null_opener, settings


def _when(what, then, limit_s: float = 60.0):
    """A thread that does `then()` once `what()` holds."""
    def run():
        end = time.monotonic() + limit_s
        while not what() and time.monotonic() < end:
            time.sleep(0.01)
        then()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def _tune(tmp_path, control, **kw):
    s = settings(max_tokens=24, **kw)
    cands = [c for c in candidates(["llama"], cores=2, users=2) if c.default_knobs][:3]
    assert PLANTED in cands
    return Tune(s, cands, cell_measure(null_opener([]), s, tmp_path, {}, lambda m: None, control=control),
                say=lambda m: None, carried=Carried(control=control)), s


def test_skip_stops_the_run_going_on_and_its_row_says_so(tmp_path):
    control = TuneControl()
    tune, s = _tune(tmp_path, control)
    target = next(r for r in tune.rows.values() if r.candidate != PLANTED).candidate.key
    _when(lambda: control.running == target, control.skip)
    tune.search()
    row = tune.rows[target]
    (t,) = [t for t in row.trials if t.status == "skipped"]
    assert row.status == "skipped" and "skipped (s) after" in t.reason and t.seconds < 20
    lines = (tmp_path / t.records).read_text().splitlines()
    assert len(lines) - 1 < t.requests  # its records so far kept (the header, then fewer than asked)
    assert tune.winner is not None and tune.winner.candidate == PLANTED  # the others still measured


def test_pause_holds_the_next_run_and_is_not_the_budgets(tmp_path):
    control = TuneControl()
    control.pause()
    tune, _ = _tune(tmp_path, control)
    t0 = time.monotonic()
    _when(lambda: time.monotonic() - t0 > 1.0, lambda: control.pause(False))
    left_before = tune.left()
    tune.search()
    assert tune.paused_s >= 0.9  # the first run waited for p
    assert tune.left() > left_before - (time.monotonic() - t0) + 0.9  # …and the wait is given back to the budget


def test_stop_ends_the_search_with_what_was_measured(tmp_path):
    control = TuneControl()
    tune, _ = _tune(tmp_path, control)
    _when(lambda: any(r.last for r in tune.rows.values()), control.stop)
    tune.search()
    res = tune.result("null.gguf", 512)
    assert res.stopped == "stopped"
    measured = [c for c in res.candidates if any(t.status == "ok" for t in c.trials)]
    assert measured and res.winner is not None
    assert any(c.status == "not tried" and "stopped (q)" in c.reason for c in res.candidates), \
        [(c.key, c.status, c.reason) for c in res.candidates]


@pytest.mark.asyncio
async def test_the_screen_shows_each_candidate_as_it_settles_and_takes_s_and_q(tmp_path):
    from tui.panels import render_tune_rows
    from tui.tune_app import TuneApp

    started = threading.Event()

    def start(io: TuneIO) -> dict:
        tune, s = _tune(tmp_path, io.control)
        tune.on_change = io.on_change
        tune.say = io.say
        started.set()
        tune.search()
        return tune.result("null.gguf", 512)

    app = TuneApp(start, lambda res: f"winner {res['winner']['key'] if res['winner'] else None}")
    async with app.run_test(size=(160, 40)) as pilot:
        end = time.monotonic() + 60
        while not (app.view and app.control.running) and time.monotonic() < end:
            await pilot.pause(0.05)
        running = app.control.running
        assert running, "a candidate is being measured"
        await pilot.press("s")
        while not app.done and time.monotonic() < end:
            await pilot.pause(0.1)
        assert app.done and app.error is None and app.result is not None
        text = render_tune_rows(app.view).plain
        assert PLANTED.key in text and "skipped" in text
        assert any(t.status == "skipped" for c in app.result.candidates if c.key == running
                   for t in c.trials), app.result.candidates
        assert app.query_one("#front").plain, "the front is drawn"
        await pilot.press("q")
    assert app.return_code in (0, None)
