"""The dashboard's panels as pure functions of a Snapshot (measure/control/live/snapshot.py) and the run's fixed facts
(a View): each returns the panel's text, or for a chart what it plots, and needs no App, no widget and no
controller. tui/app.py hands their results to its widgets; tests/integration/test_panels.py compares them to golden text."""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from rich.cells import cell_len
from rich.text import Text

from measure.control.live.snapshot import LogLine, Numbers, RunInfo, Snapshot
from measure.control.tune import TuneView
from measure.control.live.steps import LEFT_UNSETTLED, SETTLE_AFTER_S, SETTLE_CV, SETTLE_REQUESTS, StepRow
from measure.core.metrics import p99_mark
from measure.core.records import is_remote
from measure.core.server_cache import live_rates
from measure.core.units import fmt_bytes, fmt_ms
from presets import SLO
from tui.charts import Series, draw
from tui.fit import fit_lines, fit_parts

SPAN_S = 180.0  # seconds of history on the charts
_t = attrgetter("t")

STATE_STYLE = {"steady": "bold green", "warming": "bold yellow", "loading": "bold yellow",
               "degraded": "bold white on dark_orange3", "paused": "bold blue", "WALL": "bold white on red"}
WORKER_STYLE = {"serving": "green", "idle": "", "warming": "yellow", "loading": "yellow", "starting": "yellow",
                "retiring": "magenta", "retired": "grey50", "dead": "bold red", "down": "bold red"}


@dataclass(frozen=True)
class View:
    """What the panels show besides the snapshot: the run's fixed facts and the dashboard's own settings."""

    info: RunInfo
    title: str = ""  # the model's name as the header shows it ("" → info.model)
    banner: str = ""  # the controller's banner (a replay's position), "" for none
    slo: SLO | None = None
    memory_budget_source: str = ""  # which limit set the memory budget (shown after the footprint)
    steps_view: bool = False  # the chart area shows the step table (the numbers panel then says what a level awaits)


@dataclass(frozen=True)
class ChartData:
    """What one chart plots (tui/charts.Chart.plot's arguments): `key` changes when the data does."""

    key: Any
    series: list[Series]
    hlines: list[tuple[float | None, str, str]] = field(default_factory=list)
    markers: tuple[tuple[float, str], ...] = ()
    x_range: tuple[float, float] | None = None


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


# ---- the header ---------------------------------------------------------------------------------------------------
def render_header(s: Snapshot, v: View, width: int | None = None) -> Text:
    """Two lines: the engine, model, chip and β; the mode, K, B, users, achieved concurrency, state and clock. At
    a `width` each line leaves out its least important parts until it fits (tui/fit.fit_parts): the β source,
    the file's size, the placement, the chip's name; the state stays."""
    info = v.info
    beta = info.bandwidth_gbps
    top: list[tuple[int, Text]] = []
    if v.banner:
        top.append((0, Text.assemble((f" {v.banner} ", "bold black on yellow"), " ")))
    if s.simulated:
        top.append((0, Text.assemble((" SIMULATED ", "bold white on magenta"), " ")))
    top.append((0, Text(f"{info.engine}", "bold")))
    if info.placement:
        top.append((4, Text(f" · {info.placement}")))
    top.append((1, Text(f" · {v.title or info.model}")))
    if info.weight_bytes:
        top.append((5, Text(f" {info.weight_bytes / 1e9:.3f} GB")))
    top.append((3, Text(f" · {info.chip}")))
    if s.numbers.spec_gbps:
        top += [(1, Text(f" β Σ {s.numbers.spec_gbps:g} GB/s")), (6, Text(" (the endpoints' chips)"))]
    elif beta:
        top += [(1, Text(f" β {beta:g} GB/s")), (6, Text(f" ({info.bandwidth_source})"))]
    else:
        top.append((1, Text(" β unknown (--bandwidth)")))
    bottom = [(0, Text(f"mode {s.mode}", "bold")), (0, Text(f" · K={s.k}")), (0, Text(f" · B={s.b}")),
              (2, Text(f" · users {s.users}")), (1, Text(f" · achieved {s.numbers.concurrency:.1f}")),
              (0, Text.assemble(" · ", (f" {s.state} ", STATE_STYLE.get(s.state, "bold")))),
              (1, Text(f" · t={s.t:.0f} s"))]
    t = fit_parts(top, width)
    t.append("\n")
    t.append_text(fit_parts(bottom, width))
    return t


# ---- the gauges ---------------------------------------------------------------------------------------------------
def render_gauges(s: Snapshot, v: View, width: int | None = None, rows: int | None = None) -> Text:
    """This machine's memory (the workers' RSS marked), swap, pressure and CPU; empty before the first reading.
    At a `width` the bars shorten (to 8 cells) and a longer line wraps; in `rows` the memory bar and the pressure
    line come first (tui/fit.fit_lines)."""
    m = s.system
    if m is None:
        return Text()
    lines: list[tuple[int, Text]] = []
    endpoint = v.info.endpoint
    if endpoint and not any(h in endpoint for h in ("://127.", "://localhost", "://[::1]")):
        lines.append((1, Text("this machine; the server is remote", "grey50")))

    def gauge(label: str, used: int, total: int, marked: float = 0.0) -> Text:
        tail = f" {fmt_bytes(used)} / {fmt_bytes(total)}"
        w = 28 if width is None else max(8, min(28, width - len(label) - len(tail)))
        return Text(label) + bar(used, total, w, marked) + Text(tail)

    lines.append((0, gauge("memory ", m.mem_used, m.mem_total, min(s.rss_sum, m.mem_used))))
    lines.append((3, Text(f"       ▓ workers' RSS Σ {fmt_bytes(s.rss_sum)} (shared pages per worker)", "yellow")))
    lines.append((2, gauge("swap   ", m.swap_used, m.swap_total) if m.swap_total else Text("swap   none configured")))
    lines.append((3, Text(f"       in {m.swap_in_bps / 1e6:.1f} MB/s · out {m.swap_out_bps / 1e6:.1f} MB/s")))
    pressure = (f"{m.pressure:.2f} ({m.pressure_source})" if m.pressure is not None else "not reported by this OS")
    lines.append((1, Text(f"pressure {pressure} · CPU {m.cpu_percent:.0f} %")))
    return fit_lines(lines, width, rows)


# ---- the numbers panel --------------------------------------------------------------------------------------------
def render_numbers(s: Snapshot, v: View, width: int | None = None, rows: int | None = None) -> Text:
    """The level's figures: throughput and TPOT against the prediction, the bandwidth product, TTFT, ITL, errors,
    goodput, power and cost, what a settling level waits for, the wall, and the server's or the footprint's line.
    At a `width` a longer line wraps at a separator (never inside a figure); in `rows` the wall, the level's
    tok/s, the prediction's error and the bandwidth product stay and the TTFT split, the formula, the server's line
    go first (numbers_lines' ranks; tui/fit.fit_lines)."""
    return fit_lines(numbers_lines(s, v, width), width, rows)


def numbers_lines(s: Snapshot, v: View, width: int | None = None) -> list[tuple[int, Text]]:
    """The numbers panel's lines in order, each with its rank (0 the most important, kept the longest); at a
    `width` the prediction's line is cut in two where it is wider: its figures, and what predicted them (ranked
    lower: the roofline's explanation can take several lines)."""
    out = _throughput_lines(s, width) + _request_lines(s, v) + _wall_lines(s, v)
    n = s.numbers
    if n.footprint is None:
        out.append((6, _server_line(n.server_view)))
    else:
        t = Text(f"footprint ≈ {fmt_bytes(n.footprint)} of {fmt_bytes(n.budget)} budget")
        if v.memory_budget_source:
            t.append(f" ({v.memory_budget_source})", "grey50")
        out.append((6, t))
    return out


def _throughput_lines(s: Snapshot, width: int | None) -> list[tuple[int, Text]]:
    n = s.numbers
    out = [(0, Text.assemble((f"aggregate {n.agg_tps:.1f} tok/s", "bold cyan"),
                             f" · achieved concurrency {n.concurrency:.1f} (asked {s.users})"))]
    out += [(2, Text(text, style)) for text, style in serving_text(n, s.b)]
    t = Text(f"TPOT p50 {fmt_ms(n.tpot_p50)} · p90 {fmt_ms(n.tpot_p90)}")
    if n.predicted_tpot is not None:
        t.append(f" · predicted {fmt_ms(n.predicted_tpot)}{_err(n.tpot_p50, n.predicted_tpot)}")
    out.append((1, t))
    if n.predicted_tps is not None:
        head = f"predicted {n.predicted_tps:.1f} tok/s{_err(n.agg_tps, n.predicted_tps)}" + (
            f" · range {n.predicted_range[0]:.1f}–{n.predicted_range[1]:.1f}" if n.predicted_range else "")
        if width is None or cell_len(f"{head} · {n.predicted_by}") <= width:
            out.append((1, Text(f"{head} · {n.predicted_by}", "grey50")))
        else:
            out += [(1, Text(head, "grey50")), (4, Text(f"  {n.predicted_by}", "grey50"))]
    t = Text(f"bandwidth product {n.bw_gbps:.1f} GB/s" if n.bw_gbps is not None else "bandwidth product —")
    if n.mbu is not None:
        t.append(f" · MBU {n.mbu:.0%} of attainable")
    out += [(2, t), (4, Text(f"  = {n.bw_formula}", "grey50"))]
    return out


def serving_text(n: Numbers, b: int) -> list[tuple[str, str]]:
    """Over HTTP, whether the server batches the streams open and its efficiency against the engine's own
    batching (docs/design/server-vs-engine.md): (text, style) lines; none where there is nothing to tell."""
    out = []
    if n.engine_tps is not None and n.server_efficiency is not None:
        out.append((f"server efficiency {n.server_efficiency:.0%} of the engine's own batched "
                    f"{n.engine_tps:.1f} tok/s at B={b}", "bold"))
    if (v := n.batching) is not None:
        if v.verdict != "batches":  # serialises (B > 1 only queues) or interleaves (B > 1 only takes turns)
            out.append((f"server {v.verdict}: {v.served:.1f} served at once of {v.open:.1f} streams open "
                        f"({v.source}); B > 1 only {'queues' if v.verdict == 'serialises' else 'takes turns'}",
                        "bold black on yellow"))
        else:
            out.append((f"server batches: {v.served:.1f} served at once of {v.open:.1f} streams open "
                        f"({v.source})", "grey50"))
    return out


def _request_lines(s: Snapshot, v: View) -> list[tuple[int, Text]]:
    n = s.numbers
    few = p99_mark(n.requests)  # ≈: a p99 of fewer than 100 requests is about their maximum
    out = [(5, Text(f"this level ({n.level}, {n.requests} requests):", "grey50")),
           (3, Text(f"TTFT p50 {fmt_ms(n.ttft_p50)} · p99 {few}{fmt_ms(n.ttft_p99)} (queue-incl.)")),
           (6, Text(f"TTFT p50 {fmt_ms(n.ttft_engine_p50)} · p99 {few}{fmt_ms(n.ttft_engine_p99)} (engine)")),
           (3, Text.assemble(f"chunk ITL p50 {fmt_ms(n.itl_p50)} · ", (f"errors {n.errors}",
                                                                       "bold red" if n.errors else "")))]
    if n.goodput_tps is not None and v.slo is not None:  # goodput is counted against an SLO only
        out.append((3, Text(f"goodput {n.goodput_rps:.2f} req/s · {n.goodput_tps:.1f} tok/s · "
                            f"{n.slo_attainment:.0%} in SLO ({v.slo.key})")))
    if n.watts is not None or n.usd_per_mtok is not None:
        out.append((5, Text(" · ".join(x for x in (
            f"power {n.watts:.0f} W" if n.watts is not None else "",
            f"{n.joules_per_token:.2f} J/token" if n.joules_per_token else "",
            f"${n.usd_per_mtok:.2f}/Mtok" if n.usd_per_mtok is not None else "") if x))))
    return out


def _wall_lines(s: Snapshot, v: View) -> list[tuple[int, Text]]:
    n = s.numbers
    out = []
    cur = next((r for r in reversed(s.steps) if r.level == n.level), None) if v.steps_view else None
    if cur is not None and not cur.settled:  # the step table's row says "settling"; what it waits for is here
        out.append((2, Text(f"this level is {cur.progress}", "grey50")))
    out.append((0, Text.assemble("wall: ", (f"memory: {n.wall}" if n.wall and s.state == "WALL"
                                             else n.ceiling, "bold white on red" if s.state == "WALL" else "bold"))))
    out += [(rank, Text(line, style)) for rank, line, style in (
        (1, n.past_wall and f"past the wall: {n.past_wall}", "bold red"),
        (3, n.gives_out and f"gives out first: {n.gives_out}", ""), (3, n.residency, "grey70")) if line]  # residency.md
    return out


def _server_line(v: dict[str, Any] | None) -> Text:
    """What the server's /metrics say (absent, not zero, where it exposes none)."""
    t = Text("server: ")
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
    return t


# ---- the workers panel --------------------------------------------------------------------------------------------
def render_workers(s: Snapshot, width: int | None = None) -> Text:
    """The workers table as fixed-width text (one row per engine worker), or per endpoint over HTTP. At a `width`
    the least needed columns are left out until a row fits (a row is never wrapped)."""
    if is_remote(s.mode):
        return render_endpoints(s, width)
    rows = [{"id": w.wid, "pid": w.pid or "—", "state": w.state, "thr": w.threads or "—", "RSS": fmt_bytes(w.rss),
             "CPU%": "—" if w.cpu is None else f"{w.cpu:.0f}", "tok/s": f"{w.tps:.1f}", "done": w.requests,
             "TTFT": fmt_ms(w.last_ttft)} for w in s.workers]
    cols = _columns([("id", 2, 0), ("pid", 6, 4), ("state", -8, 0), ("thr", 3, 5), ("RSS", 7, 2), ("CPU%", 4, 3),
                     ("tok/s", 5, 0), ("done", 4, 1), ("TTFT", 9, 2)], rows, width)
    t = Text()
    t.append(_table_row(cols, {c[0]: c[0] for c in cols}).plain + "\n", "bold")
    for w, cells in zip(s.workers, rows):
        t.append_text(_table_row(cols, cells, {"state": WORKER_STYLE.get(w.state, "")}))
        t.append("\n")
    return t


Column = tuple[str, int, int]  # name, width (negative: left-aligned), rank (0: never left out)


def _columns(cols: list[Column], rows: Sequence[dict[str, Any]], width: int | None) -> list[Column]:
    """The columns, each as wide as its widest cell in `rows` (its header's at least), that fit `width` (one
    space between two), the highest-ranked left out first."""
    keep = [(name, (-1 if w < 0 else 1) * max([abs(w)] + [cell_len(str(r.get(name, ""))) for r in rows]), rank)
            for name, w, rank in cols]
    while width is not None and sum(abs(c[1]) + 1 for c in keep) - 1 > width:
        worst = max(range(len(keep)), key=lambda i: (keep[i][2], i))
        if keep[worst][2] == 0:
            break
        del keep[worst]
    return keep


def _table_row(cols: list[Column], cells: dict[str, Any], styles: dict[str, str] | None = None) -> Text:
    t = Text()
    for i, (name, w, _) in enumerate(cols):
        v = str(cells.get(name, ""))
        if i:
            t.append(" ")
        t.append(f"{v:<{-w}}" if w < 0 else f"{v:>{w}}", (styles or {}).get(name, ""))
    return t


def render_endpoints(s: Snapshot, width: int | None = None) -> Text:
    """One row per endpoint: its state, streams busy / B, tok/s, requests, errors, TTFT, its bandwidth
    product (/ its chip's β); under it, what its server says where it exposes /metrics, or why it is down."""
    rows = [{"id": w.wid, "endpoint": (w.label or "?")[:8], "state": w.state,
             "strm": f"{w.active:>2}/{w.streams or 0:<2}", "tok/s": f"{w.tps:.1f}", "done": w.requests,
             "err": w.errors, "TTFT": "—" if w.last_ttft is None else f"{w.last_ttft * 1e3:.0f} ms",
             "GB/s": ("—" if w.bw_gbps is None else f"{w.bw_gbps:.0f}")
             + (f"/{w.bandwidth_gbps:g}" if w.bandwidth_gbps else "")} for w in s.workers]
    cols = _columns([("id", 2, 0), ("endpoint", -8, 0), ("state", -8, 0), ("strm", 5, 2), ("tok/s", 5, 0),
                     ("done", 4, 3), ("err", 3, 1), ("TTFT", 7, 4), ("GB/s", 7, 1)], rows, width)
    room = 54 if width is None else max(10, width - 3)
    t = Text()
    t.append(_table_row(cols, {c[0]: c[0] for c in cols}).plain + "\n", "bold")
    for w, cells in zip(s.workers, rows):
        t.append_text(_table_row(cols, cells, {"state": WORKER_STYLE.get(w.state, ""),
                                               "err": "bold red" if w.errors else ""}))
        t.append("\n")
        v = w.server
        if w.state == "down" and w.error:
            t.append(f"   {w.error[:room]}\n", "red")
        elif v:
            parts = [f"{name} {v[key]:.0f}" for key, name in (("running", "running"), ("waiting", "waiting"),
                                                              ("preemptions", "preempted")) if key in v]
            if "kv_cache_usage" in v:
                parts.append(f"KV {v['kv_cache_usage'] * 100:.0f} %")
            t.append_text(fit_parts([(0, Text("   server:", "grey50"))]
                                    + [(1, Text(f"{' ' if i == 0 else ' · '}{p}", "grey50"))
                                       for i, p in enumerate(parts)], width))
            t.append("\n")
    return t


def render_clients(t: Text, rows: Sequence[dict[str, Any]], total: dict[str, Any]) -> Text:
    """--peer: appended under the workers, every client's tok/s, requests and errors summed (this one and the peers
    that answer), then one row per client (control/live/peers.client_rows); a peer that does not answer is down."""
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


# ---- the log -----------------------------------------------------------------------------------------------------
LOG_INDENT = len(f"{0.0:7.1f}s {'info':5} ")  # a log line's time and level: its text starts after them


def render_log(log: Sequence[LogLine], seen: int) -> list[tuple[int, Text, str | None]]:
    """The log's lines after sequence number `seen` (the snapshot's log: (seq, t, level, text)), each as (seq, its
    line, its text where it is an error: the dashboard also notifies it, and the notification stays up)."""
    return [(seq, Text(f"{t:7.1f}s {level:5} {text}", "red" if level == "error" else ""),
             text if level == "error" else None) for seq, t, level, text in log if seq > seen]


# ---- the step table -----------------------------------------------------------------------------------------------
def render_step_table(rows: Sequence[StepRow], slo: SLO | None) -> Text:
    """The step table, a row per line and never wrapped: the wall by its name (its figures are on the numbers
    panel's wall line, what a settling level waits for under its "this level" line). It fits the panel at
    160 columns; where it is wider than the panel (120 columns, a $/Mtok column) the panel scrolls sideways."""
    t = Text()
    t.append("step table (times in ms) · ", "bold")
    t.append(f"SLO {slo.describe()}\n" if slo else "no SLO (--slo interactive) for goodput\n")
    t.append(f"a row per K/B level visited, settled at ≥ {SETTLE_AFTER_S:g} s steady, "
             f"≥ {SETTLE_REQUESTS} requests, tok/s CV < {SETTLE_CV:.2f}\n", "grey50")
    cost = any(r.usd_per_mtok is not None for r in rows)
    lw = max([len("level")] + [len(r.level) for r in rows])
    pw = max([5] + [len(_pred(r)) for r in rows])  # a range (a chip nobody measured) is wider than one number
    t.append(f"  {'level':<{lw}} {'conc':>4} {'tok/s':>6} {'/user':>6} {'TPOT':>5} {'TTFT':>5} {'p99':>5} "
             f"{'goodput':>11} {'pred':>{pw}}" + (f" {'$/Mtok':>6}" if cost else "") + " wall", "bold")
    for r in rows:
        t.append("\n" + _step_row(r, lw, cost, pw), "bold green" if r.best else ("" if r.settled else "grey50"))
    return t


def _pred(r: StepRow) -> str:
    """The row's predicted tok/s: one number, or 'slowest–fastest' for a chip nobody measured."""
    if r.predicted_low is not None and r.predicted_high is not None:
        return f"{r.predicted_low:.0f}–{r.predicted_high:.0f}"
    return _f(r.predicted_tps, '.0f')


def _step_row(r: StepRow, lw: int, cost: bool, pw: int = 5) -> str:
    mark = "★ " if r.best else "  "
    good = (f"{r.goodput_tps:.0f} ({r.attainment:.0%})" if r.goodput_tps is not None and r.attainment
            is not None else "—")
    ms = lambda v: _f(None if v is None else v * 1e3, '.0f')  # noqa: E731
    state = wall_name(r.wall) if r.settled else "unsettled" if r.progress.startswith(LEFT_UNSETTLED) else "settling"
    return (f"{mark}{r.level:<{lw}} {_f(r.concurrency, '.1f'):>4} {_f(r.agg_tps, '.1f'):>6} "
            f"{_f(r.per_user_tps, '.1f'):>6} {ms(r.tpot_p50):>5} {ms(r.ttft_p50):>5} "
            f"{p99_mark(r.requests) + ms(r.ttft_p99):>5} "
            f"{good:>11} {_pred(r):>{pw}}" + (f" {_f(r.usd_per_mtok, '.2f'):>6}" if cost else "")
            + f" {state}")


# ---- the charts ---------------------------------------------------------------------------------------------------
CHART_TPS = ("aggregate throughput", "tok/s")
CHART_TPOT = ("per-stream TPOT: p50, p90; ─ predicted (roofline, or K·W/β)", "ms")
CHART_BW = ("bandwidth product (formula in the numbers panel)", "GB/s")
CHART_PARETO = ("Pareto: per-user tok/s vs aggregate tok/s, one point per settled level", "tok/s/user")


def pareto_chart(rows: Sequence[StepRow]) -> ChartData:
    """One point per settled level: per-user tok/s against aggregate tok/s (keyed by the points: redrawn when a
    level settles, not every sample)."""
    rows = [r for r in rows if r.settled and r.agg_tps and r.per_user_tps]
    xs = [r.agg_tps or 0.0 for r in rows]  # (each one given: the rows are filtered on them)
    ys = [r.per_user_tps or 0.0 for r in rows]
    return ChartData((tuple(xs), tuple(ys)), [("settled levels", xs, ys, "cyan", "line")],
                     x_range=(0.0, max([r.agg_tps or 0.0 for r in rows], default=1.0) * 1.1))


def series_charts(s: Snapshot, info: RunInfo) -> tuple[ChartData, ChartData, ChartData]:
    """The three time series over the last SPAN_S seconds: aggregate tok/s, TPOT p50/p90 and the bandwidth
    product, each against its prediction or the spec and attainable β (keyed by the snapshot's version)."""
    hist = s.history
    x1 = max(s.t, 10.0)
    x0 = max(0.0, x1 - SPAN_S)
    pts = hist[bisect_left(hist, x0, key=_t):]  # the span shown, not a pass over the whole history
    xs = [p.t for p in pts]
    beta = s.numbers.spec_gbps or info.bandwidth_gbps
    att = info.attainable_gbps
    ms = lambda v: None if v is None else v * 1e3  # noqa: E731
    tps = ChartData(s.version, [("tok/s (5 s window)", xs, [p.agg_tps for p in pts], "cyan", "line"),
                                ("predicted", xs, [p.predicted_tps for p in pts], "red", "dash")],
                    markers=s.markers, x_range=(x0, x1))
    tpot = ChartData(s.version, [("p50", xs, [ms(p.tpot_p50) for p in pts], "green", "line"),
                                 ("p90", xs, [ms(p.tpot_p90) for p in pts], "yellow", "line"),
                                 ("predicted", xs, [ms(p.predicted_tpot) for p in pts], "red", "dash")],
                     markers=s.markers, x_range=(x0, x1))
    bw = ChartData(s.version, [("GB/s", xs, [p.bw_gbps for p in pts], "cyan", "line")],
                   hlines=[(beta, f"spec {beta:g} GB/s" if beta else "", "red"),
                           (att, f"attainable {att:.1f} GB/s" if att else "", "yellow")],
                   markers=s.markers, x_range=(x0, x1))
    return tps, tpot, bw


def chart_text(title: tuple[str, str], data: ChartData, w: int, h: int) -> list[str]:
    """A chart as the rows of text a w × h Chart widget shows (no colours)."""
    rows = draw(w, h, f"{title[0]} [{title[1]}]", data.series, data.hlines, data.markers, data.x_range)
    return ["".join(s for s, _ in row) for row in rows]


# ---- the live tune (inference-top tune --live: tui/tune_app.py) ---------------------------------------------------
CHART_FRONT = ("Pareto front: goodput vs TTFT p99, ● measured, ● front", "goodput tok/s")
TUNE_STYLE = {"measured": "", "skipped": "yellow", "stopped": "yellow", "refused": "grey50", "pruned": "grey50",
              "not tried": "grey50", "pending": "grey50", "crashed": "bold red", "timeout": "bold red",
              "failed": "bold red", "wall": "bold red"}


def render_tune_status(v: TuneView, ended: bool = False) -> Text:
    """The live tune's top line: the budget, the candidate running (or paused / stopped / done), the winner so
    far."""
    t = Text()
    t.append(f"tune · {v.spent_s:.0f} of {v.budget_s:.0f} s · ", "bold")
    if ended:
        t.append({"stopped": "stopped (q): the answer is what was measured", "budget": "ended: the budget"}
                 .get(v.stopped, "done") + " · tune.json written · q quits", "bold green")
    elif v.stopped == "stopped":
        t.append("STOPPED (q): the answer is what was measured", "bold white on red")
    elif v.paused:
        t.append(f"PAUSED before the next run (p goes on){f'; {v.running} finishing' if v.running else ''}",
                 "bold blue")
    elif v.running:
        t.append(f"measuring {v.running} (s skips it)", "bold yellow")
    else:
        t.append("between runs" if v.stopped != "done" or v.rows else "starting")
    t.append(f"\nbest so far: {v.winner}" if v.winner else "\nnothing measured yet", "bold green" if v.winner else "")
    return t


def render_tune_rows(v: TuneView) -> Text:
    """A row a candidate, the measured ones best first (★ the best, ◆ on the Pareto front), each with its longest
    run's goodput, tok/s and TTFT p99 beside the roofline's tok/s; the others with why they were not measured."""
    kw = max([len("candidate")] + [len(r.key) for r in v.rows])
    t = Text()
    t.append(f"  {'candidate':<{kw}} {'status':<9} {'req':>4} {'goodput':>7} {'tok/s':>6} {'p99 ms':>6} "
             f"{'pred':>6} {'err':>5}  why\n", "bold")
    for r in v.rows:
        mark = "★ " if r.key == v.winner and r.tps is not None else ("◆ " if r.key in v.front else "  ")
        err = (f"{(r.predicted_tps - r.tps) / r.tps:+.0%}" if r.predicted_tps is not None and r.tps else "—")
        line = (f"{mark}{r.key:<{kw}} {r.status:<9} {r.requests or '—':>4} {_f(r.goodput_tps, '.1f'):>7} "
                f"{_f(r.tps, '.1f'):>6} {_f(r.p99_ttft_ms, '.0f'):>6} {_f(r.predicted_tps, '.1f'):>6} {err:>5}  "
                f"{r.reason}")
        style = "bold green" if mark.startswith("★") else TUNE_STYLE.get(r.status, "")
        t.append(line + ("  ← running" if r.key == v.running else "") + "\n", style)
    return t


def tune_front_chart(v: TuneView) -> ChartData:
    """Every measured candidate as a point (TTFT p99 across, goodput up) at the one run length the front compares
    (TuneView.front_n: p99s of runs of one length), the front's in cyan; keyed by the points."""
    pts = [(x, y, k in v.front) for k, x, y in v.front_points if x is not None]
    rest = [(x, y) for x, y, f in pts if not f]
    front = sorted((x, y) for x, y, f in pts if f)
    xmax = max([x for x, _, _ in pts], default=1.0) * 1.1
    return ChartData(tuple(pts), [("measured", [x for x, _ in rest], [y for _, y in rest], "grey50", "point"),
                                  ("front", [x for x, _ in front], [y for _, y in front], "cyan", "point")],
                     x_range=(0.0, xmax))
