"""The Textual dashboard. It reads its controller's `snapshot()` and calls its key actions (the members of
measure/control/controller.Controller: LiveController live, ReplayController over a recording); nothing here
waits on a worker. Numbers and gauges refresh at 1 Hz, charts at --refresh Hz (together at 1 Hz), each panel only
when its content changed."""
from __future__ import annotations

import gc
from bisect import bisect_left
from operator import attrgetter
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer, Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, RichLog, Static

from measure.control.controller import Controller
from measure.control.live import LiveController
from measure.control.snapshot import Snapshot
from measure.control.steps import SETTLE_AFTER_S, SETTLE_CV, SETTLE_REQUESTS
from measure.core.metrics import p99_mark
from measure.core.records import is_remote
from measure.core.server_cache import live_rates
from measure.core.units import fmt_bytes, fmt_ms
from tui.charts import Chart, Panel, TablePanel
from tui.signals import hold, quit_on_signals

if TYPE_CHECKING:
    from measure.control.replay import ReplayController

STICKY = 3600.0  # seconds: errors and refusals stay up until dismissed
SPAN_S = 180.0  # seconds of history on the charts
NUMBERS_HZ = 1.0  # the numbers panels' redraws a second (a key's effect is drawn at once)
_t = attrgetter("t")

KEYS = [
    ("+ / -", "instances mode: add / retire an engine instance (K); batch mode: B"),
    ("] / [", "batch mode: raise / lower the sequences per engine (B)"),
    ("m", "switch mode: instances (K engines, 1 stream each) / batch (B per engine)"),
    ("p", "pause / resume the load"),
    ("r", "reset the statistics (request figures count from now)"),
    ("e", "export the current statistics (and the step table) to JSON"),
    ("v", "switch the chart area: live time series / the step table and its Pareto chart"),
    ("?", "this help"),
    ("q", "quit (every worker stops)"),
]


def _f(v, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def _err(measured: float | None, predicted: float | None) -> str:
    """ (err +5 %): predicted − measured, relative to measured."""
    if not measured or predicted is None:
        return ""
    return f" (err {(predicted - measured) / measured:+.0%})"


def wall_name(text: str) -> str:
    """A wall's name without its figures (core/roofline.name_wall's text): "CPU cores (2.0 of 2 busy)" → "CPU
    cores", "none: 30 % headroom" → "none", "memory bandwidth (91% of attainable)" → "memory bandwidth"."""
    return text.split(" (", 1)[0].split(":", 1)[0]


def bar(used: float, total: float, width: int, marked: float = 0.0) -> Text:
    """█ used by others, ▓ the part marked (the workers' RSS), ░ free."""
    if total <= 0:
        return Text("n/a")
    n_used = min(width, round(width * used / total))
    n_mark = min(n_used, round(width * marked / total))
    t = Text()
    t.append("█" * (n_used - n_mark), "cyan")
    t.append("▓" * n_mark, "yellow")
    t.append("░" * (width - n_used), "grey50")
    return t


REPLAY_KEYS = [
    ("p", "pause / resume the replay"),
    ("> / <", "play faster / slower (×0.25 … ×64)"),
    ("→ / ←", "jump 10 s forward / back"),
    ("e", "export the statistics at this moment to JSON"),
    ("v", "switch the chart area: time series / the step table and its Pareto chart"),
    ("?", "this help"),
    ("q", "quit"),
]


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "close")]

    def __init__(self, keys=KEYS):
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        lines = ["[b]inference-top keys[/b]", ""] + [f"  [b]{k:<7}[/b] {v}" for k, v in self.keys]
        lines += ["", "TTFT is queue-inclusive (first token − scheduled) unless marked engine, over the",
                  "requests of the current K/B level; TPOT = (t_last − t_first)/(N − 1) per stream over the",
                  "last 5 s; achieved concurrency = requests in service (started → done, prefill included),",
                  "time-averaged (Little's law: docs/design.md §6).", "", "esc closes"]
        yield Static("\n".join(lines), id="help")


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

    def __init__(self, controller: Controller, refresh_hz: float = 1.0, live: bool = True, title: str = "",
                 peers=None):
        super().__init__()
        self.c = controller
        self.peers = peers  # control/peers.Peers: other clients' /metrics (--peer), or None
        self.refresh_hz = refresh_hz
        self.live = live
        self.model_title = title
        self._log_seen = 0
        self._last_numbers: int | None = None  # the snapshot version last drawn
        self._last_charts: int | None = None
        self.steps_view = False

    def compose(self) -> ComposeResult:
        yield Panel(id="header")
        with Horizontal(id="body"):
            with Vertical(id="charts"):
                yield Chart("aggregate throughput", "tok/s", id="chart-tps")
                yield Chart("per-stream TPOT: p50, p90; ─ predicted (roofline, or K·W/β)", "ms", id="chart-tpot")
                yield Chart("bandwidth product (formula in the numbers panel)", "GB/s", id="chart-bw")
            with Vertical(id="steps-view"):
                with ScrollableContainer(id="steps-box"):  # sideways where the table is wider than the panel
                    yield TablePanel(id="steps")
                yield Chart("Pareto: per-user tok/s vs aggregate tok/s, one point per settled level", "tok/s/user",
                            id="chart-pareto")
            with Vertical(id="side"):
                yield Panel(id="gauges")
                yield Panel(id="numbers")
                yield Panel(id="workers")
        yield RichLog(id="log", max_lines=500, markup=False, wrap=False)
        yield Footer()

    def on_mount(self) -> None:
        if self.live:
            if self.refresh_hz == NUMBERS_HZ:  # one repaint a second: numbers and charts together
                self.set_interval(1.0 / NUMBERS_HZ, self._refresh_both)
            else:
                self.set_interval(1.0 / NUMBERS_HZ, self.refresh_numbers)
                self.set_interval(1.0 / self.refresh_hz, self.refresh_charts)
            self.call_after_refresh(self._freeze_startup)
        self.refresh_numbers()
        self.call_after_refresh(self.refresh_charts)

    @staticmethod
    def _freeze_startup() -> None:
        """Once the screen is up, the objects made so far (modules, Textual, the widget tree) live as long as the
        run: kept out of the cyclic collector's passes, which otherwise walk them all again and again (about half
        of the collector's time, which was a tenth of the dashboard's own CPU)."""
        gc.collect()
        gc.freeze()

    # ---- refresh -----------------------------------------------------------------------------
    def _refresh_both(self) -> None:
        self.refresh_numbers()
        self.refresh_charts()

    def refresh_numbers(self) -> None:
        snap = self.c.snapshot()
        if snap is None or snap.version == self._last_numbers:
            return
        self._last_numbers = snap.version
        self.query_one("#header", Panel).set_text(self._render_header(snap))
        self.query_one("#gauges", Panel).set_text(self._render_gauges(snap))
        self.query_one("#numbers", Panel).set_text(self._render_numbers(snap))
        if self.steps_view:
            self.query_one("#steps", TablePanel).set_text(self._render_steps(snap))
        self._fill_workers(snap)
        self._append_log(snap)

    def refresh_charts(self) -> None:
        snap = self.c.snapshot()
        if snap is None or snap.version == self._last_charts:
            return
        self._last_charts = snap.version
        if self.steps_view:
            rows = [r for r in snap.steps if r.settled and r.agg_tps and r.per_user_tps]
            xs, ys = [r.agg_tps for r in rows], [r.per_user_tps for r in rows]
            self.query_one("#chart-pareto", Chart).plot(  # redrawn when a level settles, not every sample
                (tuple(xs), tuple(ys)), [("settled levels", xs, ys, "cyan", "line")],
                x_range=(0.0, max([r.agg_tps or 0.0 for r in rows], default=1.0) * 1.1))
            return
        hist = snap.history
        x1 = max(snap.t, 10.0)
        x0 = max(0.0, x1 - SPAN_S)
        pts = hist[bisect_left(hist, x0, key=_t):]  # the span shown, not a pass over the whole history
        xs = [p.t for p in pts]
        beta = snap.numbers.spec_gbps or self.c.info.bandwidth_gbps
        att = self.c.info.attainable_gbps
        v = snap.version
        self.query_one("#chart-tps", Chart).plot(
            v, [("tok/s (5 s window)", xs, [p.agg_tps for p in pts], "cyan", "line"),
                ("predicted", xs, [p.predicted_tps for p in pts], "red", "dash")],
            markers=snap.markers, x_range=(x0, x1))
        ms = lambda s: None if s is None else s * 1e3  # noqa: E731
        self.query_one("#chart-tpot", Chart).plot(
            v, [("p50", xs, [ms(p.tpot_p50) for p in pts], "green", "line"),
                ("p90", xs, [ms(p.tpot_p90) for p in pts], "yellow", "line"),
                ("predicted", xs, [ms(p.predicted_tpot) for p in pts], "red", "dash")],
            markers=snap.markers, x_range=(x0, x1))
        self.query_one("#chart-bw", Chart).plot(
            v, [("GB/s", xs, [p.bw_gbps for p in pts], "cyan", "line")],
            hlines=[(beta, f"spec {beta:g} GB/s" if beta else "", "red"),
                    (att, f"attainable {att:.1f} GB/s" if att else "", "yellow")],
            markers=snap.markers, x_range=(x0, x1))

    def _render_header(self, s: Snapshot) -> Text:
        info = self.c.info
        beta = info.bandwidth_gbps
        state_style = {"steady": "bold green", "warming": "bold yellow", "loading": "bold yellow",
                       "degraded": "bold white on dark_orange3", "paused": "bold blue",
                       "WALL": "bold white on red"}.get(s.state, "bold")
        t = Text()
        if banner := self.c.banner():
            t.append(f" {banner} ", "bold black on yellow")
            t.append(" ")
        if s.simulated:
            t.append(" SIMULATED ", "bold white on magenta")
            t.append(" ")
        t.append(f"{info.engine}", "bold")
        t.append(f" · {self.model_title or info.model}")
        if info.weight_bytes:
            t.append(f" {info.weight_bytes / 1e9:.3f} GB")
        t.append(f" · {info.chip} ")
        if s.numbers.spec_gbps:
            t.append(f"β Σ {s.numbers.spec_gbps:g} GB/s (the endpoints' chips)")
        else:
            t.append(f"β {beta:g} GB/s ({info.bandwidth_source})" if beta else "β unknown (--bandwidth)")
        t.append("\n")
        t.append(f"mode {s.mode}", "bold")
        t.append(f" · K={s.k} · B={s.b} · users {s.users} · achieved {s.numbers.concurrency:.1f} · ")
        t.append(f" {s.state} ", state_style)
        t.append(f" · t={s.t:.0f} s")
        return t

    def _render_gauges(self, s: Snapshot) -> Text:
        t = Text()
        m = s.system
        if m is None:
            return t
        w = 28
        endpoint = self.c.info.endpoint
        if endpoint and not any(h in endpoint for h in ("://127.", "://localhost", "://[::1]")):
            t.append("this machine; the server is remote\n", "grey50")
        t.append("memory ")
        t.append_text(bar(m.mem_used, m.mem_total, w, min(s.rss_sum, m.mem_used)))
        t.append(f" {fmt_bytes(m.mem_used)} / {fmt_bytes(m.mem_total)}\n")
        t.append(f"       ▓ workers' RSS Σ {fmt_bytes(s.rss_sum)} (shared pages per worker)\n", "yellow")
        t.append("swap   ")
        if m.swap_total:
            t.append_text(bar(m.swap_used, m.swap_total, w))
            t.append(f" {fmt_bytes(m.swap_used)} / {fmt_bytes(m.swap_total)}")
        else:
            t.append("none configured")
        t.append(f"\n       in {m.swap_in_bps / 1e6:.1f} MB/s · out {m.swap_out_bps / 1e6:.1f} MB/s\n")
        t.append("pressure ")
        t.append(f"{m.pressure:.2f} ({m.pressure_source})" if m.pressure is not None else "not reported by this OS")
        t.append(f" · CPU {m.cpu_percent:.0f} %")
        return t

    def _render_numbers(self, s: Snapshot) -> Text:
        n = s.numbers
        t = Text()
        t.append(f"aggregate {n.agg_tps:.1f} tok/s", "bold cyan")
        t.append(f" · achieved concurrency {n.concurrency:.1f} (asked {s.users})\n")
        t.append(f"TPOT p50 {fmt_ms(n.tpot_p50)} · p90 {fmt_ms(n.tpot_p90)}")
        if n.predicted_tpot is not None:
            t.append(f" · predicted {fmt_ms(n.predicted_tpot)}{_err(n.tpot_p50, n.predicted_tpot)}")
        t.append("\n")
        if n.predicted_tps is not None:
            t.append(f"predicted {n.predicted_tps:.1f} tok/s{_err(n.agg_tps, n.predicted_tps)} · {n.predicted_by}\n",
                     "grey50")
        t.append(f"bandwidth product {n.bw_gbps:.1f} GB/s" if n.bw_gbps is not None else "bandwidth product —")
        t.append(f" · MBU {n.mbu:.0%} of attainable\n" if n.mbu is not None else "\n")
        t.append(f"  = {n.bw_formula}\n", "grey50")
        t.append(f"this level ({n.level}, {n.requests} requests):\n", "grey50")
        few = p99_mark(n.requests)  # ≈: a p99 of fewer than 100 requests is about their maximum
        t.append(f"TTFT p50 {fmt_ms(n.ttft_p50)} · p99 {few}{fmt_ms(n.ttft_p99)} (queue-incl.)\n")
        t.append(f"TTFT p50 {fmt_ms(n.ttft_engine_p50)} · p99 {few}{fmt_ms(n.ttft_engine_p99)} (engine)\n")
        t.append(f"chunk ITL p50 {fmt_ms(n.itl_p50)} · ")
        t.append(f"errors {n.errors}", "bold red" if n.errors else "")
        slo = self.c.settings.slo
        if n.goodput_tps is not None and slo is not None:  # goodput is counted against an SLO only
            t.append(f"\ngoodput {n.goodput_rps:.2f} req/s · {n.goodput_tps:.1f} tok/s · "
                     f"{n.slo_attainment:.0%} in SLO ({slo.key})")
        if n.watts is not None or n.usd_per_mtok is not None:
            t.append("\n" + " · ".join(x for x in (
                f"power {n.watts:.0f} W" if n.watts is not None else "",
                f"{n.joules_per_token:.2f} J/token" if n.joules_per_token else "",
                f"${n.usd_per_mtok:.2f}/Mtok" if n.usd_per_mtok is not None else "") if x))
        cur = next((r for r in reversed(s.steps) if r.level == n.level), None) if self.steps_view else None
        if cur is not None and not cur.settled:  # the step table's row says "settling"; what it waits for is here
            t.append(f"\nthis level is {cur.progress}", "grey50")
        t.append("\nwall: ")
        t.append(f"memory capacity (swap): {n.wall}" if n.wall and s.state == "WALL" else n.ceiling,
                 "bold white on red" if s.state == "WALL" else "bold")
        if n.footprint is None:
            v = n.server_view
            t.append("\nserver: ")
            if v is None:
                t.append("not scraped yet")
            elif not v:
                t.append("exposes no /metrics (absent, not zero)", "grey50")
            else:
                parts = [f"running {v['running']:.0f}" if "running" in v else "running —",
                         f"waiting {v['waiting']:.0f}" if "waiting" in v else "waiting —",
                         f"KV {v['kv_cache_usage'] * 100:.0f} %" if "kv_cache_usage" in v else "KV —",
                         f"preempted {v['preemptions']:.0f}" if "preemptions" in v else "preempted —"]
                rates = live_rates(v)  # vLLM's counters, since the server started
                if "prefix_cache_hit_rate" in rates:
                    parts.append(f"prefix-cache hits {rates['prefix_cache_hit_rate'] * 100:.0f} %")
                if "spec_acceptance_rate" in rates:
                    parts.append(f"drafts accepted {rates['spec_acceptance_rate'] * 100:.0f} %")
                t.append(" · ".join(parts))
        else:
            t.append(f"\nfootprint ≈ {fmt_bytes(n.footprint)} of {fmt_bytes(n.budget)} budget")
            if self.c.settings.memory_budget_source:
                t.append(f" ({self.c.settings.memory_budget_source})", "grey50")
        return t

    def _fill_workers(self, s: Snapshot) -> None:
        """The workers table as fixed-width text: a DataTable re-renders every row on any change,
        which cost more CPU than the three charts together."""
        style = {"serving": "green", "idle": "", "warming": "yellow", "loading": "yellow", "starting": "yellow",
                 "retiring": "magenta", "retired": "grey50", "dead": "bold red", "down": "bold red"}
        if is_remote(s.mode):
            self.query_one("#workers", Panel).set_text(self._with_clients(self._endpoint_rows(s, style), s))
            return
        t = Text()
        t.append(f"{'id':>2} {'pid':>6} {'state':<8} {'thr':>3} {'RSS':>7} {'CPU%':>4} {'tok/s':>5} {'done':>4} "
                 f"{'TTFT':>9}\n", "bold")
        for w in s.workers:
            t.append(f"{w.wid:>2} {w.pid or '—':>6} ")
            t.append(f"{w.state:<8}", style.get(w.state, ""))
            t.append(f" {w.threads or '—':>3} {fmt_bytes(w.rss):>7} {'—' if w.cpu is None else f'{w.cpu:.0f}':>4} "
                     f"{w.tps:>5.1f} {w.requests:>4} {fmt_ms(w.last_ttft):>9}\n")
        self.query_one("#workers", Panel).set_text(self._with_clients(t, s))

    def _with_clients(self, t: Text, s: Snapshot) -> Text:
        """--peer: under the workers, every client's tok/s, requests and errors summed (this one and the peers
        that answer), then one row per client; a peer that does not answer is down."""
        if not self.peers:
            return t
        from measure.control.peers import client_rows

        own = {"tps": s.numbers.agg_tps, "requests": self.c.totals["requests"], "errors": self.c.totals["errors"]}
        rows, total = client_rows(own, self.peers.readings(), self.peers.with_own)
        t.append(f"\nclients Σ {total['clients']}" + (f" ({total['down']} down)" if total["down"] else "")
                 + f": {total['tps']:.1f} tok/s · {total['requests']} done · {total['errors']} err\n", "bold cyan")
        for r in rows:
            t.append(f"  {r['label'][:21]:<21} ")
            if not r["up"]:
                t.append(f"down: {(r['error'] or '')[:34]}\n", "bold red")
                continue
            t.append(f"{_f(r['tps'], '.1f'):>7} tok/s {_f(r['requests'], 'd'):>6} done ")
            t.append(f"{_f(r['errors'], 'd'):>3} err\n", "bold red" if r["errors"] else "")
        return t

    def _endpoint_rows(self, s: Snapshot, style: dict) -> Text:
        """One row per endpoint: its state, streams busy / B, tok/s, requests, errors, TTFT, its bandwidth
        product (/ its chip's β); under it, what its server says where it exposes /metrics, or why it is down."""
        t = Text()
        t.append(f"{'id':>2} {'endpoint':<8} {'state':<8} {'strm':>5} {'tok/s':>5} {'done':>4} {'err':>3} "
                 f"{'TTFT':>7} {'GB/s':>7}\n", "bold")
        for w in s.workers:
            t.append(f"{w.wid:>2} {(w.label or '?')[:8]:<8} ")
            t.append(f"{w.state:<8}", style.get(w.state, ""))
            bw = "—" if w.bw_gbps is None else f"{w.bw_gbps:.0f}"
            if w.bandwidth_gbps:
                bw += f"/{w.bandwidth_gbps:g}"
            ttft = "—" if w.last_ttft is None else f"{w.last_ttft * 1e3:.0f} ms"
            t.append(f" {w.active:>2}/{w.streams or 0:<2} {w.tps:>5.1f} {w.requests:>4} ")
            t.append(f"{w.errors:>3}", "bold red" if w.errors else "")
            t.append(f" {ttft:>7} {bw:>7}\n")
            v = w.server
            if w.state == "down" and w.error:
                t.append(f"   {w.error[:54]}\n", "red")
            elif v:
                parts = [f"{name} {v[key]:.0f}" for key, name in (("running", "running"), ("waiting", "waiting"),
                                                                  ("preemptions", "preempted")) if key in v]
                if "kv_cache_usage" in v:
                    parts.append(f"KV {v['kv_cache_usage'] * 100:.0f} %")
                t.append(f"   server: {' · '.join(parts)}\n", "grey50")
        return t

    def _append_log(self, s: Snapshot) -> None:
        log = self.query_one("#log", RichLog)
        for seq, t, level, text in s.log:
            if seq <= self._log_seen:
                continue
            self._log_seen = seq
            log.write(Text(f"{t:7.1f}s {level:5} {text}", "red" if level == "error" else ""))
            if level == "error":
                self.notify(text, severity="error", timeout=STICKY)

    # ---- actions -----------------------------------------------------------------------------
    def _refuse(self, msg: str | None) -> None:
        if msg:
            self.c.log("warn", msg)
            self.notify(msg, severity="warning", timeout=STICKY)
        self.refresh_numbers()

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
        try:
            path = self.c.export()
            self.notify(f"exported to {path}", timeout=5)
        except OSError as exc:
            self._refuse(f"export failed: {exc}")

    def action_view(self) -> None:
        """The chart area: live time series, or the step table and its Pareto chart."""
        self.steps_view = not self.steps_view
        self.query_one("#charts").display = not self.steps_view
        self.query_one("#steps-view").display = self.steps_view
        self._last_numbers = self._last_charts = None
        self.refresh_numbers()
        self.call_after_refresh(self.refresh_charts)

    def _render_steps(self, s: Snapshot) -> Text:
        """The step table, a row per line and never wrapped: the wall by its name (its figures are on the numbers
        panel's wall line, what a settling level waits for under its "this level" line). It fits the panel at
        160 columns; where it is wider than the panel (120 columns, a $/Mtok column) the panel scrolls sideways."""
        t = Text()
        slo = self.c.settings.slo
        t.append("step table (times in ms) · ", "bold")
        t.append(f"SLO {slo.describe()}\n" if slo else "no SLO (--slo interactive) for goodput\n")
        t.append(f"a row per K/B level once settled: ≥ {SETTLE_AFTER_S:g} s steady, ≥ {SETTLE_REQUESTS} requests, "
                 f"tok/s CV < {SETTLE_CV:.2f}\n", "grey50")
        cost = any(r.usd_per_mtok is not None for r in s.steps)
        lw = max([len("level")] + [len(r.level) for r in s.steps])
        t.append(f"  {'level':<{lw}} {'conc':>4} {'tok/s':>6} {'/user':>6} {'TPOT':>5} {'TTFT':>5} {'p99':>5} "
                 f"{'goodput':>11} {'pred':>5}" + (f" {'$/Mtok':>6}" if cost else "") + " wall", "bold")
        for r in s.steps:
            mark = "★ " if r.best else "  "
            style = "bold green" if r.best else ("" if r.settled else "grey50")
            good = (f"{r.goodput_tps:.0f} ({r.attainment:.0%})" if r.goodput_tps is not None and r.attainment
                    is not None else "—")
            ms = lambda v: _f(None if v is None else v * 1e3, '.0f')  # noqa: E731
            t.append(f"\n{mark}{r.level:<{lw}} {_f(r.concurrency, '.1f'):>4} {_f(r.agg_tps, '.1f'):>6} "
                     f"{_f(r.per_user_tps, '.1f'):>6} {ms(r.tpot_p50):>5} {ms(r.ttft_p50):>5} {p99_mark(r.requests) + ms(r.ttft_p99):>5} "
                     f"{good:>11} {_f(r.predicted_tps, '.0f'):>5}" + (f" {_f(r.usd_per_mtok, '.2f'):>6}" if cost else "")
                     + f" {wall_name(r.wall) if r.settled else 'settling'}", style)
        return t

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
        self._log_seen = 0
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
    from measure.control.replay import ReplayController

    c = ReplayController(rec, speed)
    c.start()
    app = ReplayApp(c, refresh_hz=1.0, title=rec.header.get("model") or "")
    quit_on_signals(app)
    for w in rec.warnings:
        app.call_later(app.notify, w, severity="warning", timeout=STICKY)
    try:
        app.run()
    finally:
        hold()  # a second Ctrl-C must not cut the cleanup
        c.close()
    return 0


def run_dashboard(plan, refresh_hz: float = 1.0, record: str | None = None, brake: bool = True,
                  prometheus: tuple[str, int] | None = None, peers: list[str] | None = None,
                  ray: tuple[str, int | None, list[int] | None] | None = None) -> int:
    """The live dashboard over a RunPlan (measure/control/runplan.py: RunPlan.start_live starts its parts);
    SourceError when the source cannot start (nothing answers at --url)."""
    run = plan.start_live(record, brake, prometheus, peers, ray)
    app = InferenceTop(run.controller, refresh_hz=refresh_hz, title=run.title, peers=run.peers)
    quit_on_signals(app)
    try:
        app.run()
    finally:
        hold()  # a second Ctrl-C must not cut the cleanup
        run.close()
    return 0
