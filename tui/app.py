"""The Textual dashboard. It reads its controller's `snapshot()` and calls its key actions (the members of
measure/control/live/protocol.Controller: LiveController live, ReplayController over a recording); nothing here
waits on a worker. Numbers and gauges refresh at 1 Hz, charts at --refresh Hz (0.5 by default: in every other of
the same repaints), each panel only when its content changed; a key's effect on the numbers is drawn at once, on
the charts in the next repaint. What each panel shows is a pure function of the snapshot (tui/panels.py); `e`
exports on a worker thread, so the screen keeps refreshing meanwhile."""
from __future__ import annotations

import gc
import signal
from typing import TYPE_CHECKING

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, RichLog, Static

from measure.control.live.protocol import Controller
from measure.control.live.snapshot import Snapshot
from measure.core.records import is_remote
from tui.charts import Chart, Panel, TablePanel
from tui.fit import fit_lines, wrap
from tui.layout import BORDER, Arrangement, Needs, arrange, text_width
from tui.panels import (CHART_BW, CHART_PARETO, CHART_TPOT, CHART_TPS, LOG_INDENT, View, numbers_lines,
                        pareto_chart, render_clients, render_gauges, render_header, render_log, render_numbers,
                        render_step_table, render_workers, series_charts)
from tui.panels import bar, wall_name  # noqa: F401  # where tests and callers found them before tui/panels.py
from tui.signals import Cleanup, hold, quit_on_signals, terminal_gone

if TYPE_CHECKING:
    from measure.control.live.replay import ReplayController
    from measure.machine.ray_cluster import ClusterSpec

STICKY = 3600.0  # seconds: errors and refusals stay up until dismissed
NUMBERS_HZ = 1.0  # the numbers panels' redraws a second (a key's effect is drawn at once)

KEYS = [
    ("+ / -", "instances mode: add / retire an engine instance (K); batch mode: B"),
    ("] / [", "batch mode: raise / lower the sequences per engine (B)"),
    ("m", "switch mode: instances (K engines, 1 stream each) / batch (B per engine)"),
    ("p", "pause / resume the load"),
    ("r", "reset the statistics (request figures count from now)"),
    ("e", "export the current statistics (and the step table) to JSON"),
    ("v", "the next view: the step table and its Pareto chart, then each chart or panel this terminal has no "
          "room for beside the others"),
    ("?", "this help"),
    ("q", "quit (every worker stops)"),
]


REPLAY_KEYS = [
    ("p", "pause / resume the replay"),
    ("> / <", "play faster / slower (×0.25 … ×64)"),
    ("→ / ←", "jump 10 s forward / back"),
    ("e", "export the statistics at this moment to JSON"),
    ("v", "the next view: the step table and its Pareto chart, then what this terminal has no room for"),
    ("?", "this help"),
    ("q", "quit"),
]


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "close")]

    def __init__(self, keys=KEYS):
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        text = Text("inference-top keys\n\n", "bold")
        for k, v in self.keys:  # Text, not markup: "] / [" is a key
            text.append(f"  {k:<7}", "bold")
            text.append(f" {v}\n")
        lines = ["", "TTFT is queue-inclusive (first token − scheduled) unless marked engine, over the "
                  "requests of the current K/B level; TPOT = (t_last − t_first)/(N − 1) per stream over the "
                  "last 5 s; achieved concurrency = requests in service (started → done, prefill included), "
                  "time-averaged (Little's law: docs/design/concurrency.md).", "", "esc closes"]
        with VerticalScroll(id="help"):  # a short terminal scrolls it
            yield Static(text + Text("\n".join(lines)))


class InferenceTop(App):
    CSS_PATH = "app.tcss"
    TITLE = "inference-top"
    BINDINGS = [
        Binding("plus", "k(1)", "K+"),
        Binding("minus", "k(-1)", "K−"),
        Binding("right_square_bracket", "b(1)", "B+"),
        Binding("left_square_bracket", "b(-1)", "B−"),
        Binding("m", "mode", "mode"),
        Binding("p", "pause", "pause"),
        Binding("r", "reset", "reset"),
        Binding("e", "export", "export"),
        Binding("v", "view", "view"),
        Binding("question_mark", "help", "help"),
        Binding("q", "quit", "quit"),
    ]

    HELP_KEYS = KEYS
    cleanup: Cleanup | None = None  # tui.signals.quit_on_signals sets it: the run's cleanup and its exit watchdog

    def exit(self, result=None, return_code: int = 0, message=None) -> None:
        """Any exit (`q`, a signal) arms the watchdog that ends a run whose app cannot end (its terminal gone)."""
        if self.cleanup is not None:
            self.cleanup.arm()
        super().exit(result, return_code, message)

    def __init__(self, controller: Controller, refresh_hz: float = 1.0, live: bool = True, title: str = "",
                 peers=None):
        super().__init__()
        self.c = controller
        self.peers = peers  # control/live/peers.Peers: other clients' /metrics (--peer), or None
        self.refresh_hz = refresh_hz
        self.live = live
        self.model_title = title
        self._log_seen = 0
        self._last_numbers: int | None = None  # the snapshot version last drawn
        self._last_charts: int | None = None
        self._charts_every = 1  # the charts are redrawn in every n-th 1 Hz repaint (--refresh 1 / n)
        self._ticks = 0
        self.view_name = "main"  # which view `v` chose (tui/layout.py: the views at this terminal's size)
        self.arrangement: Arrangement | None = None
        self._needs = Needs()
        self._log_lines = 0
        self._term_size: tuple[int, int] | None = None  # the terminal's, as the last resize said

    @property
    def steps_view(self) -> bool:
        return self.view_name == "steps"

    def compose(self) -> ComposeResult:
        yield Panel(id="header")
        with Horizontal(id="body"):
            with Vertical(id="charts"):  # the headline first (tui/layout.CHARTS)
                yield Chart(*CHART_BW, id="chart-bw")
                yield Chart(*CHART_TPS, id="chart-tps")
                yield Chart(*CHART_TPOT, id="chart-tpot")
            with Vertical(id="steps-view"):
                with ScrollableContainer(id="steps-box"):  # sideways where the table is wider than the panel
                    yield TablePanel(id="steps")
                yield Chart(*CHART_PARETO, id="chart-pareto")
            with Vertical(id="side"):
                yield Panel(id="gauges")
                yield Panel(id="numbers")
                yield Panel(id="workers")
        yield RichLog(id="log", max_lines=500, markup=False, wrap=False)
        yield Footer()

    def on_mount(self) -> None:
        if self.live:
            if self.refresh_hz <= NUMBERS_HZ:  # one repaint a second; the charts in every n-th of them
                self._charts_every = max(1, round(NUMBERS_HZ / self.refresh_hz))
                self.set_interval(1.0 / NUMBERS_HZ, self._refresh_both)
            else:
                self.set_interval(1.0 / NUMBERS_HZ, self.refresh_numbers)
                self.set_interval(1.0 / self.refresh_hz, self.refresh_charts)
            self.call_after_refresh(self._freeze_startup)
            self.set_interval(1.0, self._end_without_terminal)
        self.relayout()
        self.refresh_numbers()
        self.call_after_refresh(self.refresh_charts)

    def _end_without_terminal(self) -> None:
        """The terminal hung up and no SIGHUP came (a `make run` in a closed window or a killed tmux session: the
        dashboard and its workers ran on for as long as nobody killed them): end as SIGHUP ends it."""
        if terminal_gone():
            if self.cleanup is not None:
                self.cleanup.arm(128 + signal.SIGHUP)
            self.exit()

    @staticmethod
    def _freeze_startup() -> None:
        """Once the screen is up, the objects made so far (modules, Textual, the widget tree) live as long as the
        run: kept out of the cyclic collector's passes, which otherwise walk them all again and again (about half
        of the collector's time, which was a tenth of the dashboard's own CPU)."""
        gc.collect()
        gc.freeze()

    # ---- refresh -----------------------------------------------------------------------------
    def _refresh_both(self) -> None:
        """The 1 Hz repaint: the numbers, and the charts in every `_charts_every`-th (--refresh below 1 Hz), so
        the charts' rows go out in the same repaint as the numbers' lines, not in one of their own."""
        self.refresh_numbers()
        self._ticks += 1
        if self._ticks >= self._charts_every:
            self._ticks = 0
            self.refresh_charts()

    def refresh_numbers(self) -> None:
        snap = self.c.snapshot()
        if snap is None or snap.version == self._last_numbers:
            return
        self._last_numbers = snap.version
        view = self.view()
        self._append_log(snap)
        width = (self._term_size or self.size)[0]
        tw = text_width(width, self.view_name)
        lines = numbers_lines(snap, view, tw)
        gauges = render_gauges(snap, view, tw)
        workers = self._workers_text(snap, tw)
        numbers = fit_lines(lines, tw)
        needs = Needs(len(gauges.plain.split("\n")), len(numbers.plain.split("\n")),
                      len(fit_lines([x for x in lines if x[0] <= 2], tw).plain.split("\n")),
                      len(workers.plain.rstrip("\n").split("\n")), self._log_lines, len(snap.steps) + 3)
        if needs != self._needs or self.arrangement is None:
            self._needs = needs
            if self.relayout():  # (the texts below are made for the new arrangement; the charts in the next paint)
                self._last_charts = None
                self.call_after_refresh(self.refresh_charts)
        side = self.arrangement.side if self.arrangement else {}
        rows = side.get("numbers", 0) - BORDER
        self.query_one("#header", Panel).set_text(render_header(snap, view, max(20, width - 2)))
        self.query_one("#gauges", Panel).set_text(gauges if side.get("gauges", 0) - BORDER >= len(gauges.plain.split(
            "\n")) else render_gauges(snap, view, tw, max(0, side.get("gauges", 0) - BORDER)))
        self.query_one("#numbers", Panel).set_text(numbers if rows >= needs.numbers else fit_lines(lines, tw,
                                                                                                    max(rows, 1)))
        if self.steps_view:
            self.query_one("#steps", TablePanel).set_text(render_step_table(snap.steps, view.slo))
        self.query_one("#workers", Panel).set_text(workers)

    # ---- the layout --------------------------------------------------------------------------------------------
    def on_resize(self, event: events.Resize) -> None:
        self._term_size = (event.size.width, event.size.height)
        if self.relayout():
            self._redraw()

    def _redraw(self) -> None:
        """The numbers drawn again now (their widths are the arrangement's), the charts once the screen has its new
        layout (a chart is drawn to its widget's size)."""
        self._last_numbers = self._last_charts = None
        self.refresh_numbers()
        self.call_after_refresh(self.refresh_charts)

    def relayout(self) -> bool:
        """The panels arranged for this terminal's size and view (tui/layout.arrange); whether that changed."""
        w, h = self._term_size or self.size
        arr = arrange(w, h, self.view_name, self._needs)
        if arr == self.arrangement:
            return False
        self.arrangement, self.view_name = arr, arr.view
        for wid in ("chart-bw", "chart-tps", "chart-tpot"):
            self.query_one(f"#{wid}").display = wid in arr.charts
        self.query_one("#charts").display = bool(arr.charts)
        steps_view = self.query_one("#steps-view")
        steps_view.display = arr.steps or arr.pareto
        box = self.query_one("#steps-box")
        box.display = arr.steps
        box.styles.height = arr.steps_rows if arr.steps_rows and arr.pareto else "1fr"
        self.query_one("#chart-pareto").display = arr.pareto
        main_w = arr.main_w if arr.side_w else "1fr"
        self.query_one("#charts").styles.width = steps_view.styles.width = main_w
        side = self.query_one("#side")
        side.display = bool(arr.side_w)
        side.styles.width = arr.side_w or None
        for wid in ("gauges", "numbers", "workers"):
            rows = arr.side.get(wid, 0)
            panel = self.query_one(f"#{wid}")
            panel.display = rows > 0
            panel.styles.height = rows or None
        log = self.query_one("#log", RichLog)
        log.styles.height = arr.log_rows
        self.call_after_refresh(log.scroll_end, animate=False)  # its last lines, at its new height
        return True

    def refresh_charts(self) -> None:
        snap = self.c.snapshot()
        if snap is None or snap.version == self._last_charts:
            return
        self._last_charts = snap.version
        arr = self.arrangement
        charts = []
        if arr is None or arr.pareto:
            charts.append(("#chart-pareto", pareto_chart(snap.steps)))
        if arr is None or arr.charts:
            charts += [(wid, d) for wid, d in zip(("#chart-tps", "#chart-tpot", "#chart-bw"),
                                                  series_charts(snap, self.c.info))
                       if arr is None or wid[1:] in arr.charts]
        for wid, d in charts:
            self.query_one(wid, Chart).plot(d.key, d.series, d.hlines, d.markers, d.x_range)

    def view(self) -> View:
        """What the panels show besides the snapshot (tui/panels.py)."""
        return View(self.c.info, self.model_title, self.c.banner() or "", self.c.settings.slo,
                    self.c.settings.memory_budget_source, self.steps_view)

    def _render_header(self, s: Snapshot) -> Text:
        return render_header(s, self.view())

    def _render_gauges(self, s: Snapshot) -> Text:
        return render_gauges(s, self.view())

    def _render_numbers(self, s: Snapshot) -> Text:
        return render_numbers(s, self.view())

    def _render_steps(self, s: Snapshot) -> Text:
        return render_step_table(s.steps, self.c.settings.slo)

    def _workers_text(self, s: Snapshot, width: int) -> Text:
        """The workers table as fixed-width text (a DataTable re-renders every row on any change, which cost
        more CPU than the three charts together), its columns those that fit `width`."""
        t = render_workers(s, width)
        if self.peers:  # --peer: every client's figures under the workers
            from measure.control.live.peers import client_rows

            own = {"tps": s.numbers.agg_tps, "requests": self.c.totals["requests"], "errors": self.c.totals["errors"]}
            t = render_clients(t, *client_rows(own, self.peers.readings(), self.peers.with_own))
        return t

    def _append_log(self, s: Snapshot) -> None:
        """The log's new lines, each wrapped to the log's width under its text (a warning's last words are often
        what to do: cut at the border, "measure again … inference-top probe --rerun" was lost)."""
        log = self.query_one("#log", RichLog)
        width = (log.content_size.width or (self._term_size or self.size)[0] - BORDER) - 1  # a scrollbar's column
        for seq, line, error in render_log(s.log, self._log_seen):
            self._log_seen = seq
            parts = wrap(line, max(width, LOG_INDENT + 10), " " * LOG_INDENT)
            self._log_lines = min(self._log_lines + len(parts), 10)
            for part in parts:
                log.write(part)
            if error is not None:
                self.notify(error, severity="error", timeout=STICKY)

    # ---- actions -----------------------------------------------------------------------------
    def _refuse(self, msg: str | None) -> None:
        if msg:
            self.c.log("warn", msg)
            self.notify(msg, severity="warning", timeout=STICKY)
        self.refresh_numbers()
        self._ticks = self._charts_every - 1  # the charts too, in the next repaint (the step's marker)

    def action_k(self, delta: int) -> None:
        """+/- change K in instances mode (and endpoints in use over HTTP, where several were given) and B in
        batch mode (m switches) or against one server."""
        if self.c.mode == "batch" or (is_remote(self.c.mode) and not self.c.caps.scales_k):
            self._refuse(self.c.set_b(self.c.b + delta))
        else:
            self._refuse(self.c.set_k(self.c.k + delta))

    def action_b(self, delta: int) -> None:
        self._refuse(self.c.set_b(self.c.b + delta))

    def action_mode(self) -> None:
        self._refuse(self.c.toggle_mode())

    def action_pause(self) -> None:
        self.c.toggle_pause()

    def action_reset(self) -> None:
        self.c.reset_stats()

    def action_export(self) -> None:
        """`e`: the export (the JSON, and the PNG drawn by matplotlib: seconds) runs on a worker thread, so the
        screen keeps refreshing; a notification says where it went, or why it failed (that one stays up)."""
        if any(w.group == "export" and not w.is_finished for w in self.workers):
            self.notify("an export is running", timeout=3)
            return
        self.run_worker(self._export, thread=True, group="export", exit_on_error=False)

    def _export(self) -> None:
        """The export, on its worker thread; what it says is said on the UI thread."""
        try:
            path = self.c.export()
        except Exception as exc:  # noqa: BLE001  # any failure is shown, none ends the dashboard
            msg = f"{exc}" if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
            self.call_from_thread(self._refuse, f"export failed: {msg}")
            return
        self.call_from_thread(self.notify, f"exported to {path}", timeout=5)

    def action_view(self) -> None:
        """The next view at this terminal's size (tui/layout.arrange): the live charts, the step table and its
        Pareto chart, then each chart or panel that does not fit beside the headline, one a view."""
        views = self.arrangement.views if self.arrangement else ("main", "steps")
        self.view_name = views[(views.index(self.view_name) + 1) % len(views)] if self.view_name in views else "main"
        self.relayout()
        self._redraw()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.HELP_KEYS))

    async def action_quit(self) -> None:
        self.c.close()
        self.exit()


class ReplayApp(InferenceTop):
    """The same dashboard over a recording: no engine runs; keys move through time instead."""

    c: ReplayController  # its speed and seek keys are the replay's own
    HELP_KEYS = REPLAY_KEYS
    BINDINGS = [
        Binding("plus,minus,right_square_bracket,left_square_bracket,m,r", "k(0)", show=False),
        Binding("p", "pause", "pause"),
        Binding("greater_than_sign", "speed(2.0)", "faster"),
        Binding("less_than_sign", "speed(0.5)", "slower"),
        Binding("right", "seek(10)", "+10 s"),
        Binding("left", "seek(-10)", "−10 s"),
        Binding("e", "export", "export"),
        Binding("v", "view", "view"),
        Binding("question_mark", "help", "help"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, controller: ReplayController, refresh_hz: float = 1.0, live: bool = True, title: str = ""):
        super().__init__(controller, refresh_hz, live, title)

    def action_pause(self) -> None:
        self.c.toggle_pause()
        self.refresh_numbers()

    def action_speed(self, factor: float) -> None:
        self.c.set_speed(self.c.speed * factor)

    def action_seek(self, delta: float) -> None:
        self.c.seek(delta)
        self._log_seen = self._log_lines = 0
        self.query_one("#log", RichLog).clear()
        self._last_numbers = self._last_charts = None
        self.refresh_numbers()
        self.refresh_charts()

    def action_k(self, delta: int) -> None:
        self.notify("a replay runs no engine: K and B are what the recording shows", timeout=3)

    action_b = action_k

    def action_mode(self) -> None:
        self.action_k(0)

    def refresh_numbers(self) -> None:
        self._last_numbers = None  # the REPLAY label moves even when the recording has no new sample
        super().refresh_numbers()


def run_replay(rec, speed: float = 1.0) -> int:
    """The replay dashboard over a loaded Recording (the CLI loads it and reports a bad file)."""
    from measure.control.live.replay import ReplayController

    c = ReplayController(rec, speed)
    c.start()
    app = ReplayApp(c, refresh_hz=1.0, title=rec.header.model or "")
    cleanup = quit_on_signals(app, c.close)
    for w in rec.warnings:
        app.call_later(app.notify, w, severity="warning", timeout=STICKY)
    try:
        app.run()
    finally:
        hold()  # a second Ctrl-C must not cut the cleanup
        cleanup.finish()
    return 0


def run_dashboard(plan, refresh_hz: float = 0.5, record: str | None = None, brake: bool = True,
                  prometheus: tuple[str, int] | None = None, peers: list[str] | None = None,
                  ray: ClusterSpec | None = None) -> int:
    """The live dashboard over a RunPlan (measure/control/plan.py; measure/control/live/start.py starts its parts);
    SourceError when the source cannot start (nothing answers at --url)."""
    from measure.control.live.start import start_live

    run = start_live(plan, record, brake, prometheus, peers, ray)
    app = InferenceTop(run.controller, refresh_hz=refresh_hz, title=run.title, peers=run.peers)
    cleanup = quit_on_signals(app, run.close)
    try:
        app.run()
    finally:
        hold()  # a second Ctrl-C must not cut the cleanup
        cleanup.finish()
    return 0
