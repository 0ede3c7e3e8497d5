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
        await app.workers.wait_for_complete()  # the export runs on a worker thread
        files = list(tmp_path.glob("inference-top-*.json"))
        assert len(files) == 1
        import json

        data = json.loads(files[0].read_text())
        assert data["simulated"] is True and data["k"] == 2 and data["numbers"]["requests"] > 0
        # K=2 sharing β = 100 GB/s: TPOT = 2 × 0.253 GB / 100 GB/s = 5.06 ms per token
        assert data["numbers"]["tpot_p50"] == pytest.approx(2 * 253_113_024 / 100e9, rel=0.01)
        await pilot.press("r")
        c.tick()
        assert c.snapshot().numbers.requests == 0
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


def _stepped(levels=(1, 2, 3), seconds=20.0):
    """A simulated run through K = 1, 2, 3 under the interactive SLO: each level settles into the step table."""
    import presets

    c, fleet, clock = sim_controller(k=levels[0])
    c.settings.slo = c.steps.slo = presets.slo("interactive")
    c.stats.set_slo(c.settings.slo)
    run_for(c, fleet, clock, seconds)
    for k in levels[1:]:
        c.set_k(k)
        run_for(c, fleet, clock, seconds)
    return c, fleet, clock


@pytest.mark.parametrize("size", [(120, 40), (160, 48)], ids=["120x40", "160x48"])
def test_snapshot_step_table(snap_compare, size):
    """The step table (v) at the two sizes the README and the tests use: a row a line, the wall by its name."""
    c, _, _ = _stepped()
    assert snap_compare(InferenceTop(c, live=False), press=["v"], terminal_size=size)


@pytest.mark.asyncio
@pytest.mark.parametrize("size, sideways", [((160, 48), False), ((120, 40), True)])
async def test_the_step_table_fits_its_panel_or_scrolls_sideways(size, sideways):
    """Issue 34 item 3. At 160 columns every row of the step table fits its panel on one line (its wall column
    says the wall's name; "CPU cores (2.0 of 2 busy)" split onto a second line before); at 120 columns the rows
    are still one line each and the panel scrolls sideways. The wall's figures stay on the numbers panel."""
    from tui.app import wall_name

    c, fleet, clock = _stepped()
    app = InferenceTop(c, live=False)
    async with app.run_test(size=size) as pilot:
        await pilot.press("v")
        await pilot.pause()
        box, table = app.query_one("#steps-box"), app.query_one("#steps")
        lines = str(table.render()).split("\n")
        rows = [x for x in lines if x.startswith(("  K=", "★ K="))]
        assert len(rows) == 3, lines
        assert table.size.height == len(lines)  # no line wrapped
        assert (box.max_scroll_x > 0) == sideways, (box.max_scroll_x, table.size.width, box.size.width)
        settled = [r for r in c.snapshot().steps if r.settled]
        assert [row.rsplit(" ", 1)[-1] for row in rows] == [wall_name(r.wall).rsplit(" ", 1)[-1] for r in settled]
        assert all("(" not in row.split("%)")[-1] for row in rows)  # no wall figures in the table
        numbers = str(app.query_one("#numbers").render())
        assert f"wall: {c.snapshot().numbers.ceiling}" in numbers
        c.set_k(4)  # a level that has not settled: "settling" in its row, what it waits for on the numbers panel
        run_for(c, fleet, clock, 1.0)
        app.refresh_numbers()
        await pilot.pause()
        assert str(table.render()).split("\n")[-1].endswith(" settling")
        assert "this level is settling: " in str(app.query_one("#numbers").render())


def test_a_walls_name_is_its_text_without_its_figures():
    from tui.app import wall_name

    assert [wall_name(w) for w in ("CPU cores (2.0 of 2 busy)", "memory bandwidth (91% of attainable)",
                                   "none: 30% headroom", "none reached", "compute (1.9 of 2 cores busy)",
                                   "server queue (one request at a time: 1.0 of 4 streams decode)",
                                   "not measured here (the server's machine)")] == [
        "CPU cores", "memory bandwidth", "none", "none reached", "compute", "server queue", "not measured here"]


def test_snapshot_help(snap_compare):
    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 5)
    assert snap_compare(InferenceTop(c, live=False), press=["question_mark"], terminal_size=(120, 40))


@pytest.mark.asyncio
async def test_real_engine_plus_then_quit_leaves_no_process(model, tmp_path, monkeypatch):
    from measure.sources.fleet import Fleet
    from measure.control.live.controller import LiveController, LiveSettings
    from measure.machine.model_choice import build_spec, run_meta
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

        await until(lambda s: s.state == "steady" and s.numbers.requests >= 1)
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


def test_recorded_session_replays_to_the_same_statistics(tmp_path):
    from measure.machine.recorder import Recorder
    from measure.control.live.replay import Recording, ReplayController

    path = tmp_path / "session.jsonl"
    c, fleet, clock = sim_controller(k=1)
    from dataclasses import asdict

    c.recorder = Recorder(path, {"engine": "llama.cpp", "model": "m", "model_bytes": fleet.meta.model_bytes,
                                 "simulated": True, "settings": asdict(c.settings), "chip": "test chip",
                                 "bandwidth_gbps": 100.0}, fsync=False)
    run_for(c, fleet, clock, 6)
    c.set_k(2)
    run_for(c, fleet, clock, 6)
    c.set_k(3)
    run_for(c, fleet, clock, 6)
    live = c.snapshot()
    c.recorder.close()
    rec = Recording.load(path)
    r = ReplayController(rec)
    r.advance_to(rec.samples[-1].t_ns)
    again = r.snapshot()
    assert [m[1] for m in again.markers] == [m[1] for m in live.markers] == ["K=2", "K=3"]
    assert len(again.history) == len(live.history)
    for a, b in zip(live.history, again.history):
        assert a.agg_tps == pytest.approx(b.agg_tps) and a.tpot_p50 == b.tpot_p50 and a.bw_gbps == b.bw_gbps
    for key in ("ttft_p50", "ttft_p99", "itl_p50", "requests", "tpot_p50", "agg_tps"):
        assert getattr(again.numbers, key) == getattr(live.numbers, key), key
    assert again.k == 3 and again.simulated
    # a cut last line still replays, with a warning
    text = path.read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[:-15])
    rec2 = Recording.load(cut)
    assert rec2.warnings and "cut" in rec2.warnings[0]
    r2 = ReplayController(rec2)
    r2.advance_to(rec2.samples[-1].t_ns)
    assert r2.snapshot().numbers.requests > 0


@pytest.mark.asyncio
async def test_replay_app_keys(tmp_path):
    from dataclasses import asdict

    from measure.machine.recorder import Recorder
    from measure.control.live.replay import Recording, ReplayController
    from tui.app import ReplayApp

    path = tmp_path / "s.jsonl"
    c, fleet, clock = sim_controller(k=1)
    c.recorder = Recorder(path, {"engine": "llama.cpp", "model": "m", "model_bytes": fleet.meta.model_bytes,
                                 "simulated": True, "settings": asdict(c.settings)}, fsync=False)
    run_for(c, fleet, clock, 30)
    c.set_k(2)
    run_for(c, fleet, clock, 30)
    c.recorder.close()
    r = ReplayController(Recording.load(path))
    r.start(thread=False)
    app = ReplayApp(r, live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("p")
        assert r.replay_paused
        await pilot.press("right")
        await pilot.press("right")
        await pilot.press("right")
        assert r.snapshot().t >= 29 and r.snapshot().k == 1
        await pilot.press("right", "right", "right", "right")
        assert r.snapshot().k == 2 and [m[1] for m in r.snapshot().markers] == ["K=2"]
        await pilot.press("left", "left", "left", "left", "left")
        assert r.snapshot().k == 1 and r.snapshot().markers == ()
        await pilot.press("greater_than_sign")
        assert r.speed == 2.0
        app.refresh_numbers()
        assert "REPLAY ×2 paused" in header_text(app)
        await pilot.press("plus")  # no engine: K keys do nothing in a replay
        assert r.snapshot().k == 1
        await pilot.press("q")


def test_report_renders_every_chart_from_a_recording(tmp_path):
    """A small recorded (simulated) session, cut at its last line: every chart is written, with a warning,
    and the Markdown names the cells. (A bench output is reported in test_cli.)"""
    import subprocess
    import sys
    from dataclasses import asdict

    from measure.machine.recorder import Recorder

    path = tmp_path / "s.jsonl"
    c, fleet, clock = sim_controller(k=1)
    c.recorder = Recorder(path, {"engine": "llama.cpp", "model": "m", "model_bytes": fleet.meta.model_bytes,
                                 "simulated": True, "settings": asdict(c.settings), "bandwidth_gbps": 100.0}, fsync=False)
    run_for(c, fleet, clock, 8)
    c.set_k(2)
    run_for(c, fleet, clock, 8)
    c.recorder.close()
    path.write_text(path.read_text()[:-10])  # cut: the report warns and goes on
    out = tmp_path / "rep"
    p = subprocess.run([sys.executable, "-m", "tui.cli", "report", str(path), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "last line is cut" in p.stderr
    names = {f.name for f in out.iterdir()}
    assert {"throughput_vs_k.png", "throughput_vs_b.png", "tpot_vs_k.png", "bandwidth_vs_k.png",
            "ttft_vs_concurrency.png", "memory_per_cell.png", "timeline.png", "report.md"} <= names
    md = (out / "report.md").read_text()
    assert "| 1 | 1 |" in md and "| 2 | 1 |" in md and "simulated: True" in md
    bad = subprocess.run([sys.executable, "-m", "tui.cli", "report", str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "not found" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.asyncio
async def test_export_writes_a_png(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 5)
    c.set_k(2)
    run_for(c, fleet, clock, 5)
    path = c.export()
    assert path.exists() and path.with_suffix(".png").exists()


# ---- issue 23 item 6: the dashboard's own CPU -------------------------------------------------------------------
# ---- issue 34 item 1: the charts are plotext's --------------------------------------------------------------------
def _plain(rows):
    return ["".join(s for s, _ in row) for row in rows]


def _cells(rows):
    """Each cell of a chart's rows as (character, colour or None)."""
    return [[(ch, color) for s, color in row for ch in s] for row in rows]


def test_a_chart_is_plotexts_figure_cell_for_cell():
    """draw() hands the dashboard plotext's own figure under the chart's title: the characters plt.build() prints,
    each in the colour plotext gives it (read from plotext's cell matrix, not decoded again from the ANSI text it
    would print)."""
    import plotext as plt
    from rich.color import Color
    from rich.text import Text

    from tui.charts import draw

    xs = [float(x) for x in range(80)]
    rows = draw(60, 14, "t [u]", [("tok/s", xs, [5.0 + x % 7 for x in xs], "cyan", "line"),
                                  ("pred", [0.0, 79.0], [10.0, 10.0], "red", "dash")],
                hlines=[(12.0, "spec 12", "yellow")], markers=[(40.0, "K=2")], x_range=(0.0, 79.0))
    printed = Text.from_ansi(plt.build()).split("\n")  # the same figure as plotext prints it, under our title
    assert len(rows) == 14 and [len(p) for p in _plain(rows)] == [60] * 14 and _plain(rows)[0].strip() == "t [u]"
    assert _plain(rows)[1:] == [line.plain for line in printed][:13]
    for line, cells in zip(printed, _cells(rows)[1:]):
        for i, (_, color) in enumerate(cells):  # plotext prints a colour as its number in the 256-colour palette
            styles = [sp.style for sp in line.spans if sp.start <= i < sp.end]
            printed_color = styles[-1].color.number if styles and styles[-1].color else None
            assert printed_color == (Color.parse(color).number if color else None), (i, line.plain)
    assert {c for row in _cells(rows) for _, c in row} >= {"cyan", "red", "yellow", "magenta"}


def test_a_gap_in_a_series_breaks_its_line():
    """No value over x 30–49 (None): plotext would join 5 at x 29 to 20 at x 50 across the gap; the chart draws
    the two runs apart, so no dot of the series lies over the gap."""
    from tui.charts import draw

    xs = [float(x) for x in range(80)]
    ys = [None if 30 <= x < 50 else (5.0 if x < 30 else 20.0) for x in range(80)]
    rows = draw(60, 14, "t [u]", [("", xs, ys, "cyan", "line")], x_range=(0.0, 79.0))
    plain = _plain(rows)
    left = plain[3].index("┤") + 1  # the plot's first column, after the y labels and the axis
    cols = 60 - left - 1
    gap = range(left + round(33 / 79 * (cols - 1)), left + round(46 / 79 * (cols - 1)))  # well inside the gap
    cells = _cells(rows)
    assert not [(r, c) for r in range(2, 12) for c in gap if cells[r][c][1] == "cyan"]
    assert [(r, c) for r in range(2, 12) for c in range(left, gap[0]) if cells[r][c][1] == "cyan"]
    assert [(r, c) for r in range(2, 12) for c in range(gap[-1] + 1, 59) if cells[r][c][1] == "cyan"]


def test_a_chart_has_its_title_legend_lines_markers_and_y_axis():
    """The title on top; the legend names the series that have data (p90 has none); the hline's label at its
    right end, the marker a magenta │ with its label; the dashed series as red ─; the y axis from 0 to 1.15 × the
    largest value or hline shown."""
    from tui.charts import draw

    xs = [float(x) for x in range(80)]
    rows = draw(70, 14, "aggregate [tok/s]", [("tok/s", xs, [40.0] * 80, "cyan", "line"),
                                              ("predicted", [0.0, 79.0], [30.0, 30.0], "red", "dash"),
                                              ("p90", xs, [None] * 80, "yellow", "line")],
                hlines=[(60.0, "spec 60", "yellow"), (None, "", "red")], markers=[(50.0, "K=2"), (500.0, "x")],
                x_range=(0.0, 79.0))
    plain = _plain(rows)
    text = "\n".join(plain)
    assert plain[0].strip() == "aggregate [tok/s]"
    assert "tok/s" in plain[2] and "predicted" in text and "p90" not in text
    assert "spec 60" in text and "K=2" in text and " x " not in text
    cells = _cells(rows)
    assert any(ch == "│" and c == "magenta" for row in cells[2:-2] for ch, c in row)
    assert sum(ch == "─" and c == "red" for row in cells[2:-2] for ch, c in row) >= 10
    top = float(plain[2].split("┤")[0])
    bottom = float(plain[-3].split("┤")[0])
    assert top == pytest.approx(1.15 * 60.0, rel=0.01) and bottom == 0.0


def test_a_series_reaches_plotext_as_two_points_a_cell_with_its_extremes(monkeypatch):
    """A 180 s span at 2 Hz is 360 points for a plot of ≈ 45 cells: plotext is handed at most two a cell, each
    cell's lowest and highest in x order (a one-sample spike stays on the chart), so its cost does not grow with
    the sample rate."""
    import random

    import tui.charts as charts

    rnd = random.Random(3)
    xs = [i * 0.5 for i in range(360)]
    ys = [20 + rnd.uniform(-1, 1) for _ in xs]
    ys[101] = 60.0  # a spike
    handed = []
    real = charts.plt.plot
    monkeypatch.setattr(charts.plt, "plot", lambda x, y, **kw: handed.append((list(x), list(y))) or real(x, y, **kw))
    charts.draw(90, 12, "t", [("a", xs, ys, "cyan", "line")], x_range=(0.0, 180.0))
    (hx, hy), = handed
    assert len(hx) <= 2 * 45 and hx == sorted(hx) and max(hy) == 60.0 and min(hy) == min(ys)
    for c in range(45):  # every cell keeps its lowest and highest
        cell = [y for x, y in zip(xs, ys) if int(x * 45 / 180) == c]
        kept = [y for x, y in zip(hx, hy) if int(x * 45 / 180) == c]
        assert min(cell) in kept and max(cell) in kept


def test_a_chart_without_data_says_so():
    from tui.charts import draw

    plain = _plain(draw(46, 12, "t [u]", [("a", [0.0], [None], "cyan", "line")], x_range=(0.0, 10.0)))
    assert any("waiting for data…" in p for p in plain)
    assert float(plain[2].split("┤")[0]) == 1.0


@pytest.mark.asyncio
async def test_the_pareto_chart_is_drawn_when_a_level_settles_not_every_sample():
    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 15)
    c.set_k(2)
    run_for(c, fleet, clock, 15)
    app = InferenceTop(c, live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("v")
        await pilot.pause()
        app.refresh_charts()
        pareto = app.query_one("#chart-pareto")
        before = pareto.builds
        assert before >= 1
        for _ in range(4):  # new samples, the same settled levels
            run_for(c, fleet, clock, 0.5)
            app.refresh_charts()
        assert pareto.builds == before


def _window_calls(n_per_stream):
    """Python calls (and C calls) made by one LiveStats.window over two streams of n tokens each, 4 s long, in a
    5 s window, and the window."""
    import sys

    from measure.control.live.stats import LiveStats

    st = LiveStats(5.0)
    st.load_started(0)
    for rid in (1, 2):
        ts = [1_000_000_000 + int(i * 4e9 / (n_per_stream - 1)) for i in range(n_per_stream)]
        for i in range(0, n_per_stream, 10):
            st.add_tokens(rid - 1, rid, ts[i:i + 10])
    count = [0]

    def prof(frame, event, arg):
        count[0] += 1

    sys.setprofile(prof)
    try:
        w = st.window(5_500_000_000)
    finally:
        sys.setprofile(None)
    return count[0], w


def test_a_ticks_window_work_does_not_grow_with_the_tokens_in_it():
    """Two streams of 10 or of 1000 tokens in the window: a tick trims each stream at its ends and reads its TPOT
    from its first and last token, the same calls either way. Flattening every token into one list and regrouping
    it every tick made the work grow with the token rate (a fast server: thousands of tokens in 5 s)."""
    calls_10, w10 = _window_calls(10)
    calls_1000, w1000 = _window_calls(1000)
    assert calls_1000 == calls_10
    assert w10.tpots == pytest.approx([4.0 / 9] * 2) and w1000.tpots == pytest.approx([4.0 / 999] * 2)
    assert w1000.agg_tps == pytest.approx(2000 / 5.0, rel=1e-6) and w1000.per_worker_tps == {0: 200.0, 1: 200.0}


def test_the_window_keeps_tokens_by_time_late_or_out_of_order():
    """A stream's tokens arriving late and out of order count by their times: the window [1, 6] s at t = 6 s
    holds 1.1–1.4 s (TPOT (1.4 − 1.1) ÷ 3 = 100 ms); 0.5 s has left it and 7 s is not in it yet."""
    from measure.control.live.stats import LiveStats

    s = 1_000_000_000
    st = LiveStats(5.0)
    st.load_started(0)
    st.add_tokens(0, 1, [int(1.3 * s), int(1.4 * s)])
    st.add_tokens(0, 1, [int(1.2 * s), int(0.5 * s), int(1.1 * s)])
    st.add_tokens(0, 1, [7 * s])
    st.add_tokens(1, 2, [int(5.0 * s)])  # one token: no TPOT, but it counts in tok/s
    w = st.window(6 * s)
    assert w.tpots == pytest.approx([0.1])
    assert w.tpot_by_worker == {0: pytest.approx(0.1)}
    assert w.agg_tps == pytest.approx(5 / 5.0, rel=1e-6) and w.per_worker_tps == {0: 0.8, 1: 0.2}
    assert w.steps_per_s == {0: 0.8, 1: 0.2}


@pytest.mark.asyncio
async def test_the_live_dashboard_keeps_its_startup_objects_out_of_the_collectors_passes():
    """The cyclic collector walked every object made at startup (modules, Textual, the widget tree) on each full
    pass; once the screen is up they are frozen (gc.freeze), so its passes only walk what the run makes."""
    import gc

    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 2)
    app = InferenceTop(c, live=True)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(0.2)
            assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()


@pytest.mark.asyncio
async def test_the_live_dashboard_redraws_its_numbers_once_a_second_with_its_charts():
    """Live, the numbers and the charts are redrawn together once a second (charts at --refresh 1): one
    repaint of the screen a second, not the numbers at 2 Hz between the charts' second."""
    import gc

    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 2)
    app = InferenceTop(c, live=True)
    drawn, counting = [], [False]
    real = app.refresh_numbers

    def numbers():
        if counting[0]:
            run_for(c, fleet, clock, 0.5)  # a new snapshot every time: every call draws
            drawn.append(round(time.monotonic(), 1))
        real()

    app.refresh_numbers = numbers  # before the timers are set
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(0.3)
            counting[0] = True
            await pilot.pause(3.2)
    finally:
        gc.unfreeze()
    assert 2 <= len(drawn) <= 4  # 6 or 7 at 2 Hz


@pytest.mark.asyncio
async def test_charts_at_half_a_hertz_go_out_in_every_other_numbers_repaint_and_after_a_key_in_the_next():
    """--refresh 0.5 (the default): the charts are redrawn in every other 1 Hz repaint of the numbers, never in
    a repaint of their own; a key that steps K has them redrawn in the next repaint (its marker)."""
    import gc

    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 2)
    app = InferenceTop(c, refresh_hz=0.5, live=True)
    calls: list[str] = []
    counting = [False]
    real_numbers, real_charts = app.refresh_numbers, app.refresh_charts

    def numbers():
        if counting[0]:
            run_for(c, fleet, clock, 0.5)  # a new snapshot every time: every call draws
            calls.append("numbers")
        real_numbers()

    def charts():
        if counting[0]:
            calls.append("charts")
        real_charts()

    app.refresh_numbers, app.refresh_charts = numbers, charts  # before the timers are set
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(0.3)
            counting[0] = True
            await pilot.pause(4.2)
            seen = list(calls)
            calls.clear()
            await pilot.press("plus")
            await pilot.pause(1.1)
            after_key = list(calls)
    finally:
        gc.unfreeze()
    assert 4 <= seen.count("numbers") <= 5 and seen.count("charts") == 2, seen
    for i, what in enumerate(seen):  # each chart redraw right after a numbers repaint, in the same callback
        if what == "charts":
            assert i > 0 and seen[i - 1] == "numbers", seen
    assert "charts" in after_key, after_key  # the key's repaint, then the charts in the next 1 Hz one


@pytest.mark.asyncio
async def test_a_panel_draws_again_only_the_lines_that_changed():
    """The numbers panel changes a few of its lines a second: those lines are laid out again (Textual's Content:
    wrapped, styled, cut into strips), the others' strips are kept; the screen shows the same either way."""
    from rich.text import Text
    from textual.content import Content

    lines_laid_out = []
    real = Content.from_rich_text.__func__

    def counting(cls, text, console=None):
        if text.plain.startswith(("line ", "LINE ")):  # this panel's lines; other widgets may redraw meanwhile
            lines_laid_out.append(text.plain.count("\n") + 1)
        return real(cls, text, console)

    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 2)
    app = InferenceTop(c, live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        panel = app.query_one("#numbers")
        text = Text("\n".join(f"line {i} " + "x" * (i * 9) for i in range(12)), "bold")  # lines 7+ wrap
        panel.set_text(text)
        await pilot.pause()
        first = [s.text for s in panel.render_lines(panel.content_region.reset_offset)]
        Content.from_rich_text = classmethod(counting)
        try:
            changed = text.copy()
            changed.plain = changed.plain.replace("line 3", "LINE 3")
            panel.set_text(changed)
            await pilot.pause()
            after = [s.text for s in panel.render_lines(panel.content_region.reset_offset)]
        finally:
            Content.from_rich_text = classmethod(real)
    assert sum(lines_laid_out) == 1
    assert [line.replace("LINE 3", "line 3") for line in after] == first and any("LINE 3" in x for x in after)
    assert any(x.strip("│ ").startswith("x") for x in first)  # a wrapped line's second part



@pytest.mark.asyncio
async def test_textual_paints_again_only_the_rows_that_changed():
    """A panel with one line changed, a chart with one row changed: Textual is asked for those rows only (the
    widget refreshes their regions, not itself whole), and the screen then shows the new row among the old."""
    from rich.text import Text

    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 2)
    app = InferenceTop(c, live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        app.refresh_numbers = app.refresh_charts = lambda *a, **k: None  # only this test's changes
        panel, chart = app.query_one("#numbers"), app.query_one("#chart-tps")
        text = Text("\n".join(f"line {i}" for i in range(12)))
        panel.set_text(text)
        series = [("tok/s", [0.0, 10.0, 20.0], [1.0, 5.0, 9.0], "green", "line")]
        chart.plot(1, series, x_range=(0.0, 20.0))
        await pilot.pause()
        asked: dict[str, list[int]] = {"panel": [], "chart": []}
        for name, w in (("panel", panel), ("chart", chart)):
            real = w.render_line
            w.render_line = lambda y, real=real, name=name: asked[name].append(y) or real(y)
        panel.set_text(Text(text.plain.replace("line 3", "LINE 3")))
        before = chart.plain
        chart.plot(2, series, hlines=[(9.0, "top", "red")], x_range=(0.0, 20.0))  # one row gains a line
        changed_rows = [y for y, (a, b) in enumerate(zip(before, chart.plain)) if a != b]
        await pilot.pause()
        shown = [s.text for s in panel.render_lines(panel.content_region.reset_offset)]
    assert asked["panel"] == [3], asked
    assert 0 < len(changed_rows) < len(before) and sorted(set(asked["chart"])) == changed_rows, (asked, changed_rows)
    i = next(i for i, x in enumerate(shown) if "LINE 3" in x)  # (the first row is the panel's border)
    assert "line 2" in shown[i - 1] and "line 4" in shown[i + 1] and not any("line 3" in x for x in shown)
