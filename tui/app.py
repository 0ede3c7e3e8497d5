"""The Textual dashboard. It reads `LiveController.snapshot()` and calls its key actions; nothing here
waits on a worker. Numbers and gauges refresh at 2 Hz; charts at --refresh Hz, and only when changed."""
from __future__ import annotations

import sys

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, RichLog, Static

from bench.live import LiveController, Snapshot
from tui.charts import Chart, Panel

STICKY = 3600.0  # seconds: errors and refusals stay up until dismissed
SPAN_S = 180.0  # seconds of history on the charts

KEYS = [
    ("+ / -", "instances mode: add / retire an engine instance (K); batch mode: B"),
    ("] / [", "batch mode: raise / lower the sequences per engine (B)"),
    ("m", "switch mode: instances (K engines, 1 stream each) / batch (B per engine)"),
    ("p", "pause / resume the load"),
    ("r", "reset the statistics window"),
    ("e", "export the current statistics to JSON"),
    ("?", "this help"),
    ("q", "quit (every worker stops)"),
]


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "—"
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def fmt_ms(s: float | None) -> str:
    return "—" if s is None else f"{s * 1e3:.1f} ms"


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


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "close")]

    def compose(self) -> ComposeResult:
        lines = ["[b]inference-top keys[/b]", ""] + [f"  [b]{k:<7}[/b] {v}" for k, v in KEYS]
        lines += ["", "TTFT is queue-inclusive (first token − scheduled) unless marked engine;",
                  "TPOT = (t_last − t_first)/(N − 1) per stream, over the last 5 s.", "", "esc closes"]
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
        Binding("question_mark", "help", "help"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, controller: LiveController, refresh_hz: float = 1.0, live: bool = True, title: str = ""):
        super().__init__()
        self.c = controller
        self.refresh_hz = refresh_hz
        self.live = live
        self.model_title = title
        self._log_seen = 0
        self._last_numbers = None
        self._last_charts = None

    def compose(self) -> ComposeResult:
        yield Panel(id="header")
        with Horizontal(id="body"):
            with Vertical(id="charts"):
                yield Chart("aggregate throughput", "tok/s", id="chart-tps")
                yield Chart("per-stream TPOT: p50, p90; ─ predicted K·W/β", "ms", id="chart-tpot")
                yield Chart("bandwidth product (formula in the numbers panel)", "GB/s", id="chart-bw")
            with Vertical(id="side"):
                yield Panel(id="gauges")
                yield Panel(id="numbers")
                yield Panel(id="workers")
        yield RichLog(id="log", max_lines=500, markup=False, wrap=False)
        yield Footer()

    def on_mount(self) -> None:
        if self.live:
            self.set_interval(0.5, self.refresh_numbers)
            self.set_interval(1.0 / self.refresh_hz, self.refresh_charts)
        self.refresh_numbers()
        self.call_after_refresh(self.refresh_charts)

    # ---- refresh -----------------------------------------------------------------------------
    def refresh_numbers(self) -> None:
        snap = self.c.snapshot()
        if snap is None or snap.version == self._last_numbers:
            return
        self._last_numbers = snap.version
        self.query_one("#header", Panel).set_text(self._render_header(snap))
        self.query_one("#gauges", Panel).set_text(self._render_gauges(snap))
        self.query_one("#numbers", Panel).set_text(self._render_numbers(snap))
        self._fill_workers(snap)
        self._append_log(snap)

    def refresh_charts(self) -> None:
        snap = self.c.snapshot()
        if snap is None or snap.version == self._last_charts:
            return
        self._last_charts = snap.version
        hist = snap.history
        x1 = max(snap.t, 10.0)
        x0 = max(0.0, x1 - SPAN_S)
        pts = [p for p in hist if p.t >= x0]
        xs = [p.t for p in pts]
        beta = self.c.s.bandwidth_gbps
        v = snap.version
        self.query_one("#chart-tps", Chart).plot(
            v, [("tok/s (5 s window)", xs, [p.agg_tps for p in pts], "cyan", "line")],
            markers=snap.markers, x_range=(x0, x1))
        ms = lambda s: None if s is None else s * 1e3  # noqa: E731
        self.query_one("#chart-tpot", Chart).plot(
            v, [("p50", xs, [ms(p.tpot_p50) for p in pts], "green", "line"),
                ("p90", xs, [ms(p.tpot_p90) for p in pts], "yellow", "line"),
                ("predicted", xs, [ms(p.predicted_tpot) for p in pts], "red", "dash")],
            markers=snap.markers, x_range=(x0, x1))
        self.query_one("#chart-bw", Chart).plot(
            v, [("GB/s", xs, [p.bw_gbps for p in pts], "cyan", "line")],
            hlines=[(beta, f"spec {beta:g} GB/s" if beta else "", "red")],
            markers=snap.markers, x_range=(x0, x1))

    def _render_header(self, s: Snapshot) -> Text:
        c = self.c
        beta = c.s.bandwidth_gbps
        state_style = {"steady": "bold green", "warming": "bold yellow", "loading": "bold yellow",
                       "paused": "bold blue", "WALL": "bold white on red"}.get(s.state, "bold")
        t = Text()
        if hasattr(c, "label"):
            t.append(f" {c.label()} ", "bold black on yellow")
            t.append(" ")
        if s.simulated:
            t.append(" SIMULATED ", "bold white on magenta")
            t.append(" ")
        t.append(f"{c.fleet.meta.engine}", "bold")
        t.append(f" · {self.model_title or c.fleet.meta.model} {c.fleet.meta.model_bytes / 1e9:.3f} GB")
        t.append(f" · {c.s.chip} ")
        t.append(f"β {beta:g} GB/s ({c.s.bandwidth_source})" if beta else "β unknown (--bandwidth)")
        t.append("\n")
        t.append(f"mode {s.mode}", "bold")
        t.append(f" · K={s.k} · B={s.b} · users {s.users} · ")
        t.append(f" {s.state} ", state_style)
        t.append(f" · t={s.t:.0f} s")
        return t

    def _render_gauges(self, s: Snapshot) -> Text:
        t = Text()
        m = s.system
        if m is None:
            return t
        w = 28
        if getattr(self.c.fleet, "url", None) and not any(
                h in self.c.fleet.url for h in ("://127.", "://localhost", "://[::1]")):
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
        t.append(f"aggregate {n['agg_tps']:.1f} tok/s", "bold cyan")
        t.append(f" · {n['streams']} streams\n")
        t.append(f"TPOT p50 {fmt_ms(n['tpot_p50'])} · p90 {fmt_ms(n['tpot_p90'])}")
        if n["predicted_tpot"] is not None:
            t.append(f" · predicted {fmt_ms(n['predicted_tpot'])}")
        t.append("\n")
        t.append(f"bandwidth product {n['bw_gbps']:.1f} GB/s\n" if n["bw_gbps"] is not None else "bandwidth product —\n")
        t.append(f"  = {n['bw_formula']}\n", "grey50")
        t.append(f"TTFT p50 {fmt_ms(n['ttft_p50'])} · p99 {fmt_ms(n['ttft_p99'])} (queue-incl.)\n")
        t.append(f"TTFT p50 {fmt_ms(n['ttft_engine_p50'])} · p99 {fmt_ms(n['ttft_engine_p99'])} (engine)\n")
        t.append(f"ITL p50 {fmt_ms(n['itl_p50'])} · requests {n['requests']} · ")
        t.append(f"errors {n['errors']}", "bold red" if n["errors"] else "")
        t.append("\nwall: ")
        t.append(f"MEMORY — {n['wall']}" if n.get("wall") and s.state == "WALL" else n["ceiling"],
                 "bold white on red" if s.state == "WALL" else "bold")
        if s.mode == "http":
            v = n.get("server_view")
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
                t.append(" · ".join(parts))
        else:
            t.append(f"\nfootprint ≈ {n['footprint'] / 1e9:.2f} GB of {n['budget'] / 1e9:.1f} GB budget")
        return t

    def _fill_workers(self, s: Snapshot) -> None:
        """The workers table as fixed-width text: a DataTable re-renders every row on any change,
        which cost more CPU than the three charts together."""
        style = {"serving": "green", "idle": "", "warming": "yellow", "loading": "yellow", "starting": "yellow",
                 "retiring": "magenta", "retired": "grey50", "dead": "bold red"}
        t = Text()
        t.append(f"{'id':>2} {'pid':>6} {'state':<8} {'thr':>3} {'RSS':>7} {'CPU%':>4} {'tok/s':>5} {'done':>4} "
                 f"{'TTFT':>9}\n", "bold")
        for w in s.workers:
            t.append(f"{w.wid:>2} {w.pid or '—':>6} ")
            t.append(f"{w.state:<8}", style.get(w.state, ""))
            t.append(f" {w.threads or '—':>3} {fmt_bytes(w.rss):>7} {'—' if w.cpu is None else f'{w.cpu:.0f}':>4} "
                     f"{w.tps:>5.1f} {w.requests:>4} {fmt_ms(w.last_ttft):>9}\n")
        self.query_one("#workers", Panel).set_text(t)

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
        """+/- change K in instances mode and B in batch mode (m switches)."""
        if self.c.mode in ("batch", "http"):
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

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    async def action_quit(self) -> None:
        self.c.close()
        self.exit()


class ReplayApp(InferenceTop):
    """The same dashboard over a recording: no engine runs; keys move through time instead."""

    BINDINGS = [
        Binding("plus,minus,right_square_bracket,left_square_bracket,m,r", "k(0)", show=False),
        Binding("p", "pause", "pause"),
        Binding("greater_than_sign", "speed(2.0)", "faster"),
        Binding("less_than_sign", "speed(0.5)", "slower"),
        Binding("right", "seek(10)", "+10 s"),
        Binding("left", "seek(-10)", "−10 s"),
        Binding("e", "export", "export"),
        Binding("question_mark", "help", "help"),
        Binding("q", "quit", "quit"),
    ]

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


def run_replay(path: str, speed: float = 1.0) -> int:
    from bench.replay import Recording, RecordingError, ReplayController
    from tui.cli import fail

    try:
        rec = Recording.load(path)
    except RecordingError as exc:
        fail(str(exc))
    for w in rec.warnings:
        print(f"inference-top replay: warning: {w}", file=sys.stderr)
    c = ReplayController(rec, speed)
    c.start()
    app = ReplayApp(c, refresh_hz=1.0, title=rec.header.get("model", ""))
    for w in rec.warnings:
        app.call_later(app.notify, w, severity="warning", timeout=STICKY)
    try:
        app.run()
    finally:
        c.close()
    return 0


def run_http_dashboard(args) -> int:
    """--engine http: B concurrent streams against a server; ]/[ (or +/-) change B."""
    from bench.fleet import FleetError, RunMeta
    from bench.http_fleet import HttpFleet
    from bench.live import LiveController, LiveSettings
    from presets import PresetError, workload
    from tui.cli import check_url, fail

    check_url(args)
    try:
        wl = workload(args.workload)
    except PresetError as exc:
        fail(str(exc))
    fleet = HttpFleet(args.url, RunMeta(engine="http", model=args.model or "?", model_bytes=0), b=args.b or 1,
                      endpoint=args.endpoint, model=args.model, api_key_env=args.api_key_env,
                      stall_s=args.stall_timeout)
    try:
        fleet.start()
    except FleetError as exc:
        fail(str(exc), 1)
    fleet.meta.model = fleet.model or fleet.meta.model
    settings = LiveSettings(max_tokens=args.max_tokens or 128, rate=args.rate, users=args.users,
                            chip="server at " + args.url, ignore_eos=not args.stop_at_eos, brake=False)
    controller = LiveController(fleet, wl, settings)
    controller.start()
    try:
        InferenceTop(controller, refresh_hz=args.refresh, title=fleet.model or args.url).run()
    finally:
        controller.close()
    return 0


def run_dashboard(args) -> int:
    """Build the controller from the parsed flags and run the app (the CLI's default command)."""
    from bench.fleet import Fleet
    from bench.live import LiveController, LiveSettings
    from bench.recorder import Recorder
    from bench.session import build_spec, resolve_model, run_header, run_meta
    from engines.base import EngineError
    from presets import PresetError, workload
    from tui.cli import fail, memory_budget, resolve_bandwidth

    if args.engine == "http":
        return run_http_dashboard(args)
    try:
        wl = workload(args.workload)
        choice = resolve_model(args.engine, args.model)
        spec = build_spec(args.engine, choice, args.threads, args.ctx, args.k, not args.no_flash_attn)
    except (EngineError, PresetError) as exc:
        fail(str(exc))
    chip_name, beta, beta_src = resolve_bandwidth(args)
    settings = LiveSettings(max_tokens=args.max_tokens or 128, rate=args.rate, users=args.users,
                            bandwidth_gbps=beta, bandwidth_source=beta_src, chip=chip_name,
                            ignore_eos=not args.stop_at_eos, memory_budget=memory_budget(args.memory_budget),
                            kv_bytes_per_token=choice.kv_bytes_per_token(),
                            ctx=args.ctx, force=args.force, brake=not args.no_brake)
    recorder = None
    if args.record:
        from dataclasses import asdict

        recorder = Recorder(args.record, run_header(choice, spec, {
            "command": "dashboard", "k": args.k, "workload": wl.key, "chip": chip_name, "bandwidth_gbps": beta,
            "settings": asdict(settings)}))
    mode = "batch" if args.b else "instances"
    fleet = Fleet(spec, run_meta(args.engine, choice, mode, args.b or 1), k=args.k, threads=args.threads,
                  b_cap=max(args.max_b, args.b or 1))
    controller = LiveController(fleet, wl, settings, recorder=recorder)
    controller.start()
    if spec.options.get("blas"):
        controller.log("info", f"mlx BLAS: {spec.options['blas']}")
    try:
        InferenceTop(controller, refresh_hz=args.refresh, title=choice.name).run()
    finally:
        controller.close()
    return 0

