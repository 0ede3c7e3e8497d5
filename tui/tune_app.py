"""The live tune (`inference-top tune --live`, docs/design/tune.md): the search runs on a worker thread of this
app; each candidate is a row of the table as it settles (tui/panels.render_tune_rows), the Pareto front is drawn
as it grows (tune_front_chart), the search's lines scroll in the log. Keys: p pauses before the next run (the
one going on finishes), s skips the candidate being measured (its row: skipped, its records so far kept), q
stops the tune (the run going on stops; the answer and tune.json are made of what was measured) and, once it
has ended, quits; v shows the front's chart in the table's place where the terminal (under 120 columns) has no
room for both side by side. The log is as tall as what it holds, up to a few lines. tune.json is rewritten after
every run, as on the command line."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer
from textual.widgets import Footer, RichLog

from measure.control.tune import Tune, TuneControl, TuneIO, TuneResult, TuneView
from tui.charts import Chart, Panel, TablePanel
from tui.layout import BORDER, WIDE
from tui.panels import CHART_FRONT, render_tune_rows, render_tune_status, tune_front_chart

STICKY = 3600.0  # seconds: a failure's notification stays up


class TuneApp(App[int]):
    CSS = """
    Screen { layout: vertical; }
    #status { height: 2; background: $boost; padding: 0 1; }
    #body { height: 1fr; }
    #rows-box { width: 3fr; border: round $primary; overflow-x: auto; overflow-y: auto; }
    #rows { padding: 0 1; }
    #front { width: 2fr; }
    #log { height: 3; border: round $primary; overflow-x: hidden; scrollbar-size-vertical: 1; }
    """
    TITLE = "inference-top tune"
    BINDINGS = [Binding("p", "pause", "pause / go on"), Binding("s", "skip", "skip the candidate"),
                Binding("v", "view", "table / front"), Binding("q", "quit", "stop / quit")]

    def __init__(self, start: Callable[[TuneIO], TuneResult], summary: Callable[[TuneResult], str]):
        """`start(io)` runs the tune (control/tune.run_tune with its settings) and gives its result; `summary`
        says it in text (format_result)."""
        super().__init__()
        self._start, self._summary = start, summary
        self.control = TuneControl()
        self.view: TuneView | None = None
        self._at = time.monotonic()  # when the view was made
        self.result: TuneResult | None = None
        self.error: str | None = None
        self.done = False
        self.front_view = False  # under WIDE columns: the front's chart in the table's place (v)
        self._log_lines = 0

    def compose(self) -> ComposeResult:
        yield Panel(id="status")
        with Horizontal(id="body"):
            with ScrollableContainer(id="rows-box"):  # sideways where a row is wider than the room
                yield TablePanel(id="rows")
            yield Chart(*CHART_FRONT, id="front")
        yield RichLog(id="log", wrap=False, markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#status", Panel).set_text("tune: starting (the roofline's probe, the candidates) …")
        self.run_worker(self._run, thread=True, exit_on_error=False, name="tune")
        self.set_interval(1.0, self._tick)

    # ---- the search's thread ---------------------------------------------------------------------------------
    def _run(self) -> None:
        io = TuneIO(say=lambda m: self.call_from_thread(self._say, m), control=self.control,
                    on_change=lambda t: self._changed(t))
        try:
            self.result = self._start(io)
        except Exception as exc:  # noqa: BLE001 - a tune that cannot go on: said on screen, kept up
            self.error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc)
        self.call_from_thread(self._ended)

    def _changed(self, tune: Tune) -> None:
        view = tune.view()  # made here, where the search changes its rows
        self.call_from_thread(self._draw, view)

    # ---- the screen's thread ---------------------------------------------------------------------------------
    def _say(self, line: str) -> None:
        self.query_one("#log", RichLog).write(line)
        self._log_lines += 1
        if self._log_lines <= 8:
            self._arrange()

    def _arrange(self) -> None:
        """The table beside the front's chart from WIDE columns; under that, one of them (v switches); the log
        as tall as its lines, up to 1 below 30 rows, 4 below 40 and 8 from there."""
        w, h = self.size
        wide = w >= WIDE
        self.query_one("#rows-box").display = wide or not self.front_view
        front = self.query_one("#front")
        front.display = wide or self.front_view
        front.styles.width = "2fr" if wide else "1fr"
        cap = 1 if h < 30 else 4 if h < 40 else 8
        self.query_one("#log").styles.height = min(max(self._log_lines, 1), cap) + BORDER

    def _tick(self) -> None:
        """The status once a second: the candidate being measured and the time spent since the last change."""
        v = self.view
        if v is None or self.done:
            return
        now = time.monotonic()
        self.query_one("#status", Panel).set_text(render_tune_status(replace(
            v, running=self.control.running, paused=self.control.paused,
            spent_s=v.spent_s + (0.0 if self.control.paused else now - self._at))))

    def _draw(self, v: TuneView) -> None:
        self.view, self._at = v, time.monotonic()
        self.query_one("#status", Panel).set_text(render_tune_status(v, ended=self.done and self.error is None))
        self.query_one("#rows", TablePanel).set_text(render_tune_rows(v))
        d = tune_front_chart(v)
        self.query_one("#front", Chart).plot(d.key, d.series, d.hlines, d.markers, d.x_range)

    def _ended(self) -> None:
        self.done = True
        if self.view is not None:
            self.query_one("#status", Panel).set_text(render_tune_status(self.view, ended=self.error is None))
        if self.error:
            self.notify(f"the tune stopped: {self.error}", severity="error", timeout=STICKY)
            self._say(f"error: {self.error}")
            return
        assert self.result is not None  # no error: the tune gave its result
        for line in self._summary(self.result).splitlines():
            self._say(line)
        w = self.result.winner
        self.notify(f"tune done: {w.key if w else 'nothing measured'}; tune.json written (q quits)",
                    timeout=STICKY)

    def on_resize(self, event: events.Resize) -> None:
        self._arrange()
        if self.view is not None:
            self.call_after_refresh(self._draw, self.view)

    # ---- keys ------------------------------------------------------------------------------------------------
    def action_pause(self) -> None:
        if self.done:
            return
        self.control.pause(not self.control.paused)
        self.notify("paused: the run going on finishes, the next waits (p goes on)" if self.control.paused
                    else "going on", timeout=4)
        if self.view is not None:
            self._tick()

    def action_view(self) -> None:
        self.front_view = not self.front_view
        self._arrange()
        if self.view is not None:
            self.call_after_refresh(self._draw, self.view)

    def action_skip(self) -> None:
        if self.done:
            return
        self.control.skip()
        who = self.control.running
        self.notify(f"skipping {who}" if who else "the next candidate will be skipped", timeout=4)

    async def action_quit(self) -> None:
        if self.done:
            self.exit(0 if self.error is None else 1)
            return
        self.control.stop()
        self.notify("stopping: the run going on stops, the answer is made of what was measured; q again quits "
                    "once it has ended", timeout=STICKY)


def run_tune_app(start: Callable[[TuneIO], TuneResult], summary: Callable[[TuneResult], str]
                 ) -> tuple[int, TuneResult | None]:
    """The live tune until q after it ended: (exit code, the tune's result or None)."""
    app = TuneApp(start, summary)
    code = app.run()
    return (code if code is not None else 0), app.result
