"""Issue 59: the dashboard at every size. At 80×24, 100×30, 120×40 and 160×48 (golden snapshots of the running
app on the SIMULATED fleet) the headline chart (the bandwidth product against the spec and attainable lines) has
plot points, the wall line and the prediction's error are on screen, every chart shown has ≥ 8 rows of plot (the
others are views behind `v`), no line of the numbers panel is wider than its panel; a resize there and back loses
nothing; the text fitting (tui/fit.py) and the arrangement (tui/layout.py) as pure functions; the live tune's
screen at 80×24."""
import re
from dataclasses import replace

import pytest
from rich.cells import cell_len
from rich.text import Text

from sim import run_for, sim_controller
from tui.app import InferenceTop
from tui.charts import Chart
from tui.fit import fit_lines, fit_parts, wrap
from tui.layout import CHART_FRAME, CHARTS, PLOT_ROWS, Needs, arrange
from tui.panels import LOG_INDENT

SIZES = [(80, 24), (100, 30), (120, 40), (160, 48)]
IDS = [f"{w}x{h}" for w, h in SIZES]
FIGURE = re.compile(r"[≈+−-]?\d[\d.,]*\s?(?:%|ms|tok/s|GB/s|GB|W|req/s|s)?")
LEGEND = "⢕⢕"  # plotext's legend marker for a braille series (not a plotted point)


def braille_points(rows: list[str]) -> int:
    """Braille cells (plotted points) in a chart's rows, its legend's marker left out."""
    return sum(1 for row in rows for ch in row.replace(LEGEND, "") if 0x2800 < ord(ch) <= 0x28FF)


def plot_rows(chart: Chart) -> list[str]:
    """The rows inside plotext's frame (between its ┌ and └ rows)."""
    rows = chart.plain
    top = next(i for i, r in enumerate(rows) if "┌" in r)
    bottom = next(i for i, r in enumerate(rows) if "└" in r)
    return rows[top + 1:bottom]


def on_screen(widget) -> bool:
    """Shown: the widget and every container above it displayed (its region on the screen not empty)."""
    return widget.region.area > 0


def shown_lines(widget) -> list[str]:
    """The text a widget shows on screen now (its content region's rows)."""
    return [s.text for s in widget.render_lines(widget.region.reset_offset)]


def screen_text(app) -> list[str]:
    """The whole screen as text, a row a line (Textual's compositor: what the terminal is sent)."""
    return [s.text for s in app.screen._compositor.render_strips()]


def steady(k=2):
    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 20)
    c.set_k(k)
    run_for(c, fleet, clock, 20)
    return c, fleet, clock


def check_headline(app, size) -> None:
    """The headline chart with plot points and its spec line, the wall and the prediction's error on screen,
    each chart shown with ≥ PLOT_ROWS rows of plot, every numbers line within its panel."""
    w, h = size
    chart = app.query_one("#chart-bw", Chart)
    assert on_screen(chart) and chart.region.right <= w and chart.region.bottom <= h - 3, chart.region
    assert braille_points(plot_rows(chart)) > 0, chart.plain
    assert "spec 100 GB/s" in "\n".join(chart.plain)
    for wid in CHARTS:
        other = app.query_one(f"#{wid}", Chart)
        if on_screen(other):
            assert len(plot_rows(other)) >= PLOT_ROWS, (wid, other.size)
    numbers = app.query_one("#numbers")
    assert on_screen(numbers) and numbers.region.bottom <= h - 3
    shown = "\n".join(shown_lines(numbers))
    assert "wall: " in shown and "(err " in shown and "bandwidth product" in shown, shown
    text = numbers.render()
    assert all(cell_len(line) <= numbers.content_size.width for line in text.plain.split("\n")), text.plain
    assert "K=2" in str(app.query_one("#header").render())


@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_snapshot_at_each_size(snap_compare, size):
    c, _, _ = steady()
    app = InferenceTop(c, live=False)

    async def look(pilot):
        await pilot.pause()
        app.refresh_charts()
        await pilot.pause()
        check_headline(app, size)

    assert snap_compare(app, terminal_size=size, run_before=look)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_v_goes_through_every_view_and_each_chart_is_drawn_in_one(size):
    """What does not fit beside the headline is a view behind v: going round, every chart is drawn (with plot
    points, ≥ PLOT_ROWS rows), the step table, the gauges and the workers are each shown in some view; the
    wall stays on screen in every view that has the numbers panel; the last v is back to the first view."""
    c, _, _ = steady()
    app = InferenceTop(c, live=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        views = app.arrangement.views
        seen = set()
        for _ in views:
            app.refresh_charts()
            await pilot.pause()
            for wid in CHARTS:
                chart = app.query_one(f"#{wid}", Chart)
                if on_screen(chart):
                    seen.add(wid)
                    assert braille_points(plot_rows(chart)) > 0 and len(plot_rows(chart)) >= PLOT_ROWS, wid
            for wid in ("gauges", "workers", "steps-box"):
                if on_screen(app.query_one(f"#{wid}")):
                    seen.add(wid)
            if on_screen(app.query_one("#numbers")):
                assert any(x.lstrip("│ ").startswith("wall: ") for x in shown_lines(app.query_one("#numbers")))
            await pilot.press("v")
        assert seen == {*CHARTS, "gauges", "workers", "steps-box"}, seen
        assert app.view_name == "main"


@pytest.mark.asyncio
async def test_a_resize_to_80x24_and_back_loses_no_reading_and_leaves_no_artefact():
    """160×48 → 80×24 → 160×48 while the load runs: at 80×24 the headline holds; back at 160×48 the screen is
    the one a dashboard started at 160×48 shows for the same snapshot (nothing of the small layout left), and
    the figures on it are the controller's."""
    c, fleet, clock = steady()
    app = InferenceTop(c, live=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.refresh_charts()
        await pilot.pause()
        await pilot.resize_terminal(80, 24)
        run_for(c, fleet, clock, 2)  # the load goes on meanwhile
        app.refresh_numbers()
        app.refresh_charts()
        await pilot.pause()
        check_headline(app, (80, 24))
        last = c.snapshot().log[-1].text
        assert last in "".join(shown_lines(app.query_one("#log"))), "the log shows its last line at its new height"
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        app.refresh_numbers()
        app.refresh_charts()
        await pilot.pause()
        after = screen_text(app)
        n = c.snapshot().numbers
    fresh = InferenceTop(c, live=False)
    async with fresh.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        fresh.refresh_charts()
        await pilot.pause()
        expected = screen_text(fresh)
    assert after == expected
    assert any(f"aggregate {n.agg_tps:.1f} tok/s" in row for row in after)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_many_endpoints_do_not_push_the_wall_off_screen(size):
    """Twelve endpoints' rows (the snapshot of a SIMULATED fleet given twelve endpoint rows: the layout's test,
    not the HTTP source's) take the workers panel's room or its own view, never the numbers panel's."""
    from measure.control.live.snapshot import WorkerRow

    c, _, _ = steady()
    snap = c.snapshot()
    rows = tuple(WorkerRow(i, None, "serving", None, None, None, 20.0, 10, 0.05, label=f"ep{i}", active=1, streams=1,
                           server={"running": 1.0, "waiting": 0.0}, bw_gbps=40.0, bandwidth_gbps=100.0)
                 for i in range(12))
    c.snapshot = lambda: replace(snap, mode="http", workers=rows)
    app = InferenceTop(c, live=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.refresh_charts()
        await pilot.pause()
        check_headline(app, size)
        while not on_screen(app.query_one("#workers")):
            await pilot.press("v")
        await pilot.pause()
        workers = app.query_one("#workers")
        assert any("ep0" in x for x in shown_lines(workers))
        assert all(cell_len(x) <= workers.content_size.width for x in str(workers.render()).split("\n"))
        if on_screen(app.query_one("#numbers")):
            assert any(x.lstrip("│ ").startswith("wall: ") for x in shown_lines(app.query_one("#numbers")))


# ---- the text fitted to its panel (tui/fit.py) ----------------------------------------------------------------
NUMBERS_LINES = ["aggregate 40.6 tok/s · achieved concurrency 2.0 (asked 2)",
                 "TPOT p50 49.2 ms · p90 51.0 ms · predicted 46.4 ms (err −6%)",
                 "predicted 43.1 tok/s (err +6%) · roofline (attainable 19.0 GB/s, 2 threads)",
                 "bandwidth product 11.8 GB/s · MBU 62% of attainable",
                 "TTFT p50 120.0 ms · p99 ≈310.0 ms (queue-incl.)"]


@pytest.mark.parametrize("width", [24, 30, 38, 46, 60])
def test_a_wrapped_line_keeps_every_figure_whole(width):
    for line in NUMBERS_LINES:
        parts = wrap(Text(line), width)
        assert all(cell_len(p.plain) <= width for p in parts), [p.plain for p in parts]
        joined = " ".join(p.plain.strip() for p in parts)
        assert FIGURE.findall(joined.replace(" · ", " ")) == FIGURE.findall(line.replace(" · ", " ")), joined
        for p, after in zip(parts, parts[1:] + [None]):  # a number keeps its unit on its line (a parenthesis is none)
            assert not re.search(r"\d$", p.plain) or after is None or p.plain.endswith(("p50", "p90", "p99")) \
                or after.plain.lstrip().startswith("("), p.plain


def test_a_figure_before_a_parenthesis_may_end_a_line():
    # at 28 cells the concurrency's line had only "achieved" to break after, and its ")" went on a line alone
    assert [p.plain for p in wrap(Text("  achieved concurrency 1.0 (asked 1)"), 28)] == [
        "  achieved concurrency 1.0", "  (asked 1)"]
    assert [p.plain for p in wrap(Text("TTFT p50 120.0 ms (queue-incl.)"), 20)] == ["TTFT p50 120.0 ms", "  (queue-incl.)"]


def test_a_line_breaks_at_a_separator_first():
    parts = wrap(Text("TPOT p50 49.2 ms · p90 51.0 ms · predicted 46.4 ms (err −6%)"), 40)
    assert [p.plain for p in parts] == ["TPOT p50 49.2 ms · p90 51.0 ms", "  predicted 46.4 ms (err −6%)"]


def test_short_of_rows_the_first_ranked_lines_stay():
    lines = [(0, Text("aggregate 40.6 tok/s")), (1, Text("predicted 43.1 tok/s (err +6%)")),
             (3, Text("TTFT p50 120.0 ms (queue-incl.)")), (6, Text("TTFT p50 80.0 ms (engine)")),
             (2, Text("bandwidth product 11.8 GB/s")), (0, Text("wall: memory bandwidth"))]
    assert fit_lines(lines, 40, 4).plain.split("\n") == ["aggregate 40.6 tok/s", "predicted 43.1 tok/s (err +6%)",
                                                         "bandwidth product 11.8 GB/s", "wall: memory bandwidth"]
    assert fit_lines(lines, 40, 2).plain.split("\n") == ["aggregate 40.6 tok/s", "wall: memory bandwidth"]
    assert fit_lines(lines).plain.count("\n") == 5


def test_a_long_prediction_line_keeps_its_figures_and_lets_its_explanation_go_first():
    """The roofline's explanation of a prediction can take several lines of a narrow panel: there the figures
    (predicted tok/s and the error) keep their line and rank, the explanation is ranked under the TTFT line."""
    from test_panels import SNAP, VIEW
    from tui.panels import render_numbers

    why = ("roofline (binding: cores); K × threads = 3 > 2 cores: time-shared, the prediction holds only while "
           "nothing else wants the cores (5–36 % high beside other work)")
    snap = replace(SNAP, numbers=replace(SNAP.numbers, predicted_by=why))
    assert f"predicted 395.0 tok/s (err +13%) · {why}" in render_numbers(snap, VIEW).plain  # no width: one line
    lines = render_numbers(snap, VIEW, 36, 14).plain.split("\n")
    assert "predicted 395.0 tok/s (err +13%)" in lines and "wall: memory bandwidth" in lines
    assert any(x.startswith("TTFT p50 12.0 ms") for x in lines) and not any("roofline" in x for x in lines)
    assert all(cell_len(x) <= 36 for x in render_numbers(snap, VIEW, 36).plain.split("\n"))


def test_a_header_line_leaves_out_its_least_needed_parts():
    parts = [(0, Text("llama.cpp")), (4, Text(" · CPU")), (1, Text(" · gemma-3-270m")), (5, Text(" 0.253 GB")),
             (3, Text(" · a long chip name")), (1, Text(" β 25.6 GB/s")), (6, Text(" (measured)"))]
    assert fit_parts(parts, None).plain == "llama.cpp · CPU · gemma-3-270m 0.253 GB · a long chip name β 25.6 GB/s " \
                                           "(measured)"
    assert fit_parts(parts, 61).plain == "llama.cpp · CPU · gemma-3-270m · a long chip name β 25.6 GB/s"
    assert fit_parts(parts, 40).plain == "llama.cpp · gemma-3-270m β 25.6 GB/s"
    assert fit_parts(parts, 20).plain == "llama.cpp" and fit_parts(parts[:1], 5).plain == "llam…"


# ---- the arrangement (tui/layout.py) ----------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES, ids=IDS)
def test_the_headline_is_in_the_first_view_and_every_chart_has_its_rows(size):
    w, h = size
    a = arrange(w, h, "main", Needs(log=3))
    assert a.charts[0] == "chart-bw" and a.side["numbers"] >= 6 + 2
    assert (a.body // len(a.charts)) - CHART_FRAME >= PLOT_ROWS or len(a.charts) == 1
    assert set(CHARTS) - set(a.charts) <= set(a.views)
    assert a.views[:2] == ("main", "steps")
    if w >= 160:
        assert a.charts == CHARTS and a.views == ("main", "steps")


def test_the_log_is_as_tall_as_what_it_holds():
    assert arrange(160, 48, "main", Needs(log=0)).log_rows == 3
    assert arrange(160, 48, "main", Needs(log=4)).log_rows == 6
    assert arrange(160, 48, "main", Needs(log=40)).log_rows == 8
    assert arrange(80, 24, "main", Needs(log=40)).log_rows == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
async def test_the_tune_screen_shows_its_table_and_its_front_by_v_where_narrow(size):
    """The live tune: from 120 columns the table beside the front's chart; at 80×24 the table whole, the front
    its own view (v); the log as tall as its lines."""
    import threading

    from tui.tune_app import TuneApp

    go = threading.Event()

    def start(io):
        io.say("tune: the candidates …")
        go.wait(10)
        raise ValueError("stopped by the test")

    app = TuneApp(start, lambda r: "")
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        rows, front = app.query_one("#rows-box"), app.query_one("#front")
        assert app.query_one("#log").size.height == 1
        if size[0] >= 120:
            assert rows.display and front.display
        else:
            assert rows.display and not front.display and rows.region.width == size[0]
            await pilot.press("v")
            await pilot.pause()
            assert front.display and not rows.display and front.region.width == size[0]
        go.set()
        await pilot.pause()


def test_workers_rows_that_do_not_fit_beside_the_charts_are_a_view_of_their_own():
    """Twelve endpoints (two lines each) at 120×40: the side keeps the numbers whole and the workers' header and
    first rows; v reaches a view where the workers have the body's width and the rest of its height, the
    numbers' first-ranked lines (the wall) still above them."""
    n = Needs(workers=25, numbers=16, numbers_core=7, log=3)
    main = arrange(120, 40, "main", n)
    assert "machine" in main.views and main.side["numbers"] == 16 + 2 and main.side["workers"] < 25 + 2
    machine = arrange(120, 40, "machine", n)
    assert machine.side_w == 120 and machine.side["numbers"] == 7 + 2
    assert machine.side["workers"] == machine.body - machine.side["numbers"] - machine.side["gauges"]
    assert "machine" not in arrange(160, 48, "main", Needs(workers=3, log=3)).views


def test_short_of_rows_what_gives_out_and_the_residency_go_before_the_figures():
    """The lines under the wall (issue 57's: a level past the wall, which memory gives out first, the residency
    gauge) in a short panel: the level past the wall stays with the wall and the prediction's error; what gives
    out and the residency are ranked with the TTFT line, under the bandwidth product."""
    from test_panels import SNAP, VIEW
    from tui.panels import render_numbers

    n = replace(SNAP.numbers, past_wall="K=4: 120.0 tok/s predicted", gives_out="the page cache holding the "
                "mmap'ed model in 21.8 GiB = 1,061 requests", residency="residency: weights 100% in memory (mmap) · "
                "anon 0.3 GiB, 0.0 GiB swapped · 0 major faults/token")
    lines = render_numbers(replace(SNAP, numbers=n), VIEW, 46, 12).plain.split("\n")
    assert any(x.startswith("past the wall: K=4") for x in lines) and any(x.startswith("wall: ") for x in lines)
    assert any("(err +13%)" in x for x in lines) and any(x.startswith("bandwidth product 50.6 GB/s") for x in lines)
    assert not any(x.startswith(("gives out first", "residency")) for x in lines), lines


@pytest.mark.parametrize("h", range(7, 41))
def test_a_markers_label_is_never_written_over_a_lines_label(h):
    """Round 25 saw "atK=2nable K=34 GB/s" on the bandwidth chart at 120 × 40: the K = 2 and K = 3 markers' labels
    (near the top, at 0.94 of the y axis) on the row of the attainable line's (at 1 ÷ 1.15 of it, the line being the
    chart's largest value); and a spec line near the attainable one shares its row. At every chart height from 3
    rows of plot (the dashboard shows PLOT_ROWS = 8 at the least beside other charts; 2 rows cannot hold three
    labels), with the spec line's label above, below or on the attainable one's row, each label is read whole; and
    a marker's label beside the legend, at 80 × 24's chart width."""
    from tui.charts import draw

    xs = [i * 0.5 for i in range(120)]
    ys = [8.9 if x < 20 else 17.0 if x < 40 else 25.0 for x in xs]
    for spec in (None, 33.0, 28.0):
        rows = draw(66, h, "bandwidth product [GB/s]", [("GB/s", xs, ys, "cyan", "line")],
                    hlines=[(spec, "spec 33 GB/s" if spec else "", "red"),
                            (31.4, "attainable 31.4 GB/s", "yellow")],
                    markers=[(20.0, "K=2"), (40.0, "K=3")], x_range=(0.0, 60.0))
        text = "\n".join("".join(s for s, _ in r) for r in rows)
        assert "attainable 31.4 GB/s" in text and "K=2" in text and "K=3" in text, (h, spec, text)
        assert not spec or "spec 33 GB/s" in text, (h, spec, text)
    # 80 × 24's throughput chart: a step at 11.2 s of 44.6, under the legend's two rows ("── predicK=2")
    xs = [i * 0.5 for i in range(90)]
    rows = draw(38, h, "aggregate throughput [tok/s]", [("tok/s (5 s window)", xs, [40.0] * 90, "cyan", "line"),
                                                         ("predicted", xs, [44.0] * 90, "red", "dash")],
                markers=[(11.2, "K=2")], x_range=(0.0, 44.6))
    text = "\n".join("".join(s for s, _ in r) for r in rows)
    assert "tok/s (5 s window)" in text and "── predicted" in text and "K=2" in text, (h, text)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [(120, 40), (160, 48)], ids=["120x40", "160x48"])
async def test_a_long_log_line_wraps_under_its_text_and_keeps_its_last_words(size):
    """A warning's last words are often what to do; the log cut them at its border ("… its rates, and the predicti").
    Each line is wrapped to the log's width, continuations under the text (past the time and level), and the log is
    as tall as the rows it holds up to its cap: every word of the warning is on screen."""
    c, fleet, clock = steady()
    warning = ("the probe of 2026-12-07T14:28:36 ran while other work used 0.9 of 2 cores: its rates, and the "
               "predictions made from them, may be low; measure again on a quiet machine: inference-top probe --rerun")
    c.log("warn", warning)
    run_for(c, fleet, clock, 1)  # in the next snapshot
    app = InferenceTop(c, live=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.refresh_numbers()
        await pilot.pause()
        log = app.query_one("#log")
        rows = [strip.text for strip in log.lines]  # what it holds (it shows its last rows)
        at = next(i for i, r in enumerate(rows) if "warn  the probe of" in r)
        parts = rows[at:at + 3]
        assert all(r.startswith(" " * LOG_INDENT) and r.strip() for r in parts[1:]), rows  # under the text
        assert max(cell_len(r.rstrip()) for r in parts) < log.content_size.width, rows
        assert " ".join(" ".join(parts).split()[2:]) == warning, rows
