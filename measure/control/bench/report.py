"""`inference-top report`: PNG charts and a Markdown summary from bench outputs and recordings, read into
runs by control/bench/runs.py.

matplotlib is an optional extra (`pip install 'inference-top[report]'`), imported only here.
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from measure.core import metrics as M
from measure.core.lines import Environment
from measure.control.bench.cell import Cell, fmt
from measure.control.bench.knee import TARGET_ATTAINMENT
from measure.control.bench.runs import ReportError, Run, combine, load_run
from measure.control.bench.sweep import answer_notes, client_note
from measure.core.records import MODES
from measure.core.sessions import turn_note

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

NS = 1_000_000_000


def _status(c: Cell) -> str:
    return c.status or "ok"  # a summary.json from before cells had a status


def _ok(cells: list[Cell]) -> list[Cell]:
    return [c for c in cells if _status(c) == "ok" and c.output_throughput]


def _marked(cells: list[Cell]) -> list[Cell]:
    return [c for c in cells if _status(c) != "ok"]


def _per_rep_sd(c: Cell) -> float:
    reps = c.output_throughput_per_rep or []
    return statistics.stdev(reps) if len(reps) > 1 else 0.0


def _axes(plt: ModuleType, runs: list[Run], title: str, ylabel: str, xlabel: str) -> tuple[Figure, Any]:
    """A figure of one axes per run, side by side (`plt`: matplotlib.pyplot); the axes' row."""
    fig, axes = plt.subplots(1, len(runs), figsize=(6.5 * len(runs), 4.5), sharey=True, squeeze=False)
    fig.suptitle(title)
    from matplotlib.ticker import MaxNLocator

    for ax, run in zip(axes[0], runs):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(run.name, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    return fig, axes[0]


def _mark_cells(ax: Axes, cells: list[Cell], x_of: Callable[[Cell], float], y_level: float) -> None:
    """Refused, wall and timeout cells as labelled crosses on the x axis; noisy cells circled."""
    for c in _marked(cells):
        ax.plot([x_of(c)], [y_level], "x", color="red")
        ax.annotate(_status(c), (x_of(c), y_level), textcoords="offset points", xytext=(0, 6), ha="center",
                    fontsize=7, color="red")


def _legend(ax: Axes) -> None:
    """The panel's legend where it has a labelled line: a panel with none (a run whose cells carry no such figure)
    stays bare, where matplotlib's legend() warned on stderr that it found no artists."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _series(ax: Axes, cells: list[Cell], x_key: str, group_key: str, y: Callable[[Cell], float | None],
            yerr: Callable[[Cell], float] | None = None, label_prefix: str = "") -> None:
    """One curve per value of the cells' `group_key` figure (and context row), over their `x_key` figure."""
    groups: dict[tuple[Any, int | None], list[Cell]] = {}
    for c in _ok(cells):
        groups.setdefault((getattr(c, group_key), c.context), []).append(c)
    for (g, ctx), cs in sorted(groups.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1] or 0)):
        cs.sort(key=lambda c: getattr(c, x_key))
        xs = [getattr(c, x_key) for c in cs]
        ys = [y(c) for c in cs]  # a None is drawn as a gap (matplotlib's stubs take no None: the ignores below)
        label = f"{label_prefix}{group_key.upper()}={g}" + (f", ctx {ctx}" if ctx else "")
        if yerr:
            ax.errorbar(xs, ys, yerr=[yerr(c) for c in cs], marker="o", capsize=3,  # type: ignore[arg-type]
                        label=label)
        else:
            ax.plot(xs, ys, marker="o", label=label)  # type: ignore[arg-type]
        for c in cs:
            if c.noisy:
                ax.plot([getattr(c, x_key)], [y(c)], "o", mfc="none", mec="orange", ms=12)  # type: ignore[arg-type]
                ax.annotate("noisy", (getattr(c, x_key), y(c)), textcoords="offset points", xytext=(0, 8), fontsize=7,
                            color="orange", ha="center")


def _predicted_series(ax: Axes, cells: list[Cell], x_key: str, group_key: str, key: str, by: str = "roofline") -> None:
    """A prediction (the cells' `key` figure, made `by` the roofline or K·W/β) per cell as a dashed curve
    beside the measured one: what each cell holds, so the chart and the table read one figure."""
    groups: dict[Any, list[Cell]] = {}
    for c in _ok(cells):
        if c.prediction.by == by and getattr(c.prediction, key) is not None:
            groups.setdefault(getattr(c, group_key), []).append(c)
    for g, cs in sorted(groups.items(), key=lambda kv: kv[0] or 0):
        cs.sort(key=lambda c: getattr(c, x_key))
        ax.plot([getattr(c, x_key) for c in cs], [getattr(c.prediction, key) for c in cs], "--", alpha=0.8,
                label=f"predicted {group_key.upper()}={g} (roofline)" if by == "roofline"
                else f"predicted K·W/β {group_key.upper()}={g}")


def _k(c: Cell) -> int:
    """K (every cell has its K: Cell.measure and skipped set it)."""
    assert c.k is not None
    return c.k


def _kb(c: Cell) -> int:
    """K × B (every cell has its K and B: Cell.measure and skipped set them)."""
    assert c.k is not None and c.b is not None
    return c.k * c.b


def _throughput(c: Cell) -> float:
    """An ok cell's aggregate tok/s (_ok keeps only cells that have it)."""
    assert c.output_throughput is not None
    return c.output_throughput


def _concurrency(c: Cell) -> float:
    """A cell's x on the load axis: its achieved concurrency, else (older outputs) the nominal K × B."""
    return c.achieved_concurrency or _kb(c)


def _knee(run: Run, cells: list[Cell]) -> tuple[float, str] | None:
    """(x, label) of the knee: knee.json's answer where `bench --find` wrote one (none where it found none),
    else the last cell whose SLO attainment meets the search's target (knee.TARGET_ATTAINMENT)."""
    kj = run.knee
    if kj is not None and kj.knee is None:
        return None
    for c in cells:
        if kj is not None and c.knee.level == kj.knee:
            return (_concurrency(c), f"{kj.knee:g} ({kj.find})")
    within = [c for c in cells if (c.goodput.attainment or 0) >= (kj.target if kj else TARGET_ATTAINMENT)]
    if within:
        c = within[-1]
        return (_concurrency(c), f"K{c.k}B{c.b}")
    return None


def _cost_curve(run: Run) -> list[tuple[float, float]]:
    return sorted((_concurrency(c), c.cost.usd_per_mtok) for c in _ok(run.cells)
                  if c.cost and c.cost.usd_per_mtok is not None)


def crossover(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float | None:
    """The concurrency at which curve b's $/Mtok falls to curve a's (linear between measured points, over
    the range both cover), or None where they do not cross."""
    if len(a) < 2 or len(b) < 2:
        return None
    import numpy as np

    lo, hi = max(a[0][0], b[0][0]), min(a[-1][0], b[-1][0])
    if hi <= lo:
        return None
    xs = np.linspace(lo, hi, 512)
    d = np.interp(xs, [x for x, _ in a], [y for _, y in a]) - np.interp(xs, [x for x, _ in b], [y for _, y in b])
    sign = np.sign(d)
    idx = np.nonzero(sign[1:] != sign[:-1])[0]
    if not len(idx):
        return None
    i = int(idx[0])
    return float(xs[i] - d[i] * (xs[i + 1] - xs[i]) / (d[i + 1] - d[i]))


def render_crossover(runs: list[Run], out: Path) -> tuple[Path, float | None]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, b = _cost_curve(runs[0]), _cost_curve(runs[1])
    if not a or not b:
        raise ReportError("--crossover needs $/Mtok in both runs: bench them with --price-per-hour or "
                          "--hardware-cost and --lifetime")
    x = crossover(a, b)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run, pts in ((runs[0], a), (runs[1], b)):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{run.name}: {run.header.cost}")
    if x is not None:
        ax.axvline(x, color="red", ls=":", label=f"crossover at concurrency {x:.1f}")
    ax.set_xlabel("concurrency (achieved)")
    ax.set_ylabel("$ per million output tokens")
    ax.set_title("The cost of a token: where one becomes cheaper than the other")
    ax.grid(alpha=0.3)
    _legend(ax)
    fig.tight_layout()
    path = out / "crossover.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path, x


def render(runs: list[Run], out: Path) -> list[Path]:
    """Every chart the runs have data for, as PNGs under `out`, in CHARTS' order; the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ReportError("matplotlib is not installed: pip install 'inference-top[report]'") from None
    out.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    for name, chart in CHARTS:
        fig = chart(plt, runs)
        if fig is None:  # nothing in these runs to draw it from
            continue
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)
    return files


def _throughput_chart(x: str, group: str) -> Callable[[ModuleType, list[Run]], Figure]:
    def chart(plt: ModuleType, runs: list[Run]) -> Figure:
        fig, axes = _axes(plt, runs, f"Aggregate throughput vs {x.upper()} (error bars: stdev over reps)",
                          "output tok/s", x.upper())
        for ax, run in zip(axes, runs):
            _series(ax, run.cells, x, group, lambda c: c.output_throughput, _per_rep_sd)
            _predicted_series(ax, run.cells, x, group, "output_throughput")
            _mark_cells(ax, run.cells, attrgetter(x), 0)
            _legend(ax)
        return fig
    return chart


def _tpot_chart(plt: ModuleType, runs: list[Run]) -> Figure:
    fig, axes = _axes(plt, runs, "Per-stream TPOT vs K, measured (points) and predicted (dashed)", "median TPOT (ms)",
                      "K")
    for ax, run in zip(axes, runs):
        _series(ax, run.cells, "k", "b", lambda c: c.requests.tpot.p50)
        by = {c.prediction.by for c in _ok(run.cells)}
        if by & {"roofline", "K·W/β"}:  # each cell's own prediction (K·W/β: over HTTP, Σβ of its endpoints)
            _predicted_series(ax, run.cells, "k", "b", "tpot_ms",
                              "roofline" if "roofline" in by else "K·W/β")
        else:
            ax.text(0.02, 0.95, "β unknown: no prediction (pass --bandwidth)", transform=ax.transAxes, fontsize=7)
        _mark_cells(ax, run.cells, _k, 0)
        _legend(ax)
    return fig


def _bandwidth_chart(plt: ModuleType, runs: list[Run]) -> Figure:
    fig, axes = _axes(plt, runs, "Bandwidth product vs K, against the chip's spec", "GB/s", "K")
    for ax, run in zip(axes, runs):
        _series(ax, run.cells, "k", "b", lambda c: c.bandwidth.gbps or 0.0)
        if run.beta:
            ax.axhline(run.beta, color="red", ls="--", label=f"spec {run.beta:g} GB/s")
        formula = next((c.bandwidth.formula for c in _ok(run.cells)), "")
        ax.text(0.02, 0.02, formula, transform=ax.transAxes, fontsize=6)
        _mark_cells(ax, run.cells, _k, 0)
        _legend(ax)
    return fig


def _ttft_chart(plt: ModuleType, runs: list[Run]) -> Figure:
    fig, axes = _axes(plt, runs, "TTFT (queue-inclusive) vs concurrency K×B", "TTFT (ms)", "concurrent users K×B")
    for ax, run in zip(axes, runs):
        cs = sorted(_ok(run.cells), key=_kb)
        xs: list[float] = [_kb(c) for c in cs]
        ax.plot(xs, [c.requests.ttft.p50 for c in cs], "o-", label="p50")
        ax.plot(xs, [c.requests.ttft.p99 for c in cs], "s--", label="p99")
        _mark_cells(ax, run.cells, _kb, 0)
        _legend(ax)
    return fig


def _pareto_chart(plt: ModuleType, runs: list[Run]) -> Figure:
    fig, axes = _axes(plt, runs, "Pareto: per-user tok/s vs aggregate tok/s (one point per cell)", "tok/s per user",
                      "aggregate tok/s")
    for ax, run in zip(axes, runs):
        for group in MODES:
            cs = sorted((c for c in _ok(run.cells) if (c.mode or "instances") == group and c.requests.per_stream_tps),
                        key=_throughput)
            if cs:
                ax.plot([c.output_throughput for c in cs], [c.requests.per_stream_tps for c in cs], "o-", label=group)
                for c in cs:
                    ax.annotate(f"K{c.k}B{c.b}", (c.output_throughput, c.requests.per_stream_tps), fontsize=6,
                                textcoords="offset points", xytext=(3, 3))
        _legend(ax)
    return fig


def _goodput_chart(plt: ModuleType, runs: list[Run]) -> Figure | None:
    if not any(c.goodput.tps is not None for run in runs for c in run.cells):
        return None
    fig, axes = _axes(plt, runs, "Goodput vs load (requests within the SLO), the knee marked", "goodput tok/s",
                      "concurrency (achieved)")
    for ax, run in zip(axes, runs):
        cs = sorted((c for c in _ok(run.cells) if c.goodput.tps is not None), key=_concurrency)
        xs = [_concurrency(c) for c in cs]
        ax.plot(xs, [c.goodput.tps for c in cs], "o-", label="goodput")
        ax.plot(xs, [c.output_throughput for c in cs], "x--", alpha=0.5, label="all tokens")
        knee = _knee(run, cs)
        if knee is not None:
            ax.axvline(knee[0], color="red", ls=":", label=f"knee: {knee[1]}")
        _legend(ax)
    return fig


def _cost_chart(plt: ModuleType, runs: list[Run]) -> Figure | None:
    if not any(c.cost and c.cost.usd_per_mtok is not None for run in runs for c in run.cells):
        return None
    fig, axes = _axes(plt, runs, "The cost of a token vs concurrency", "$ per million output tokens",
                      "concurrency (achieved)")
    for ax, run in zip(axes, runs):
        pts = _cost_curve(run)
        ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=run.header.cost or "")
        _legend(ax)
    return fig


def _turns_chart(plt: ModuleType, runs: list[Run]) -> Figure | None:
    """Multi-turn sessions: every run on one axes."""
    if not any(c.turns.ttft_by_turn for run in runs for c in run.cells):
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.set_title("TTFT p50 by turn of the session (queue-inclusive), labelled with the prefix cache", fontsize=9)
    for run in runs:
        for c in (c for c in _ok(run.cells) if c.turns.ttft_by_turn):
            turns = c.turns.ttft_by_turn
            assert turns is not None  # the cells picked have turns
            ax.plot([int(t) for t in turns], [v["median_ttft_ms"] for v in turns.values()], "o-",
                    label=f"{run.name} K{c.k}B{c.b}, prefix cache {c.turns.prefix_cache or '?'}")
    ax.set_xlabel("turn")
    from matplotlib.ticker import MaxNLocator

    locator = ax.xaxis.get_major_locator()
    assert isinstance(locator, MaxNLocator)  # a new axes' AutoLocator is one
    locator.set_params(integer=True)
    ax.set_ylabel("TTFT p50 (ms)")
    _legend(ax)
    ax.grid(alpha=0.3)
    return fig  # type: ignore[no-any-return]  # pyplot's subplots is untyped here


def _memory_chart(plt: ModuleType, runs: list[Run]) -> Figure:
    fig, axes = _axes(plt, runs, "Peak memory per cell: workers' RSS sum, and swap used", "GB", "cell")
    for ax, run in zip(axes, runs):
        cs = run.cells
        labels = [f"K{c.k}B{c.b}" + (f"\n{c.context}" if c.context else "") for c in cs]
        rss = [c.machine.rss_gb_sum or 0.0 for c in cs]
        swap = [_peak_swap(run, c) for c in cs]
        xs = list(range(len(cs)))
        ax.bar([x - 0.2 for x in xs], rss, width=0.4, label="workers' RSS sum")
        ax.bar([x + 0.2 for x in xs], [s or 0.0 for s in swap], width=0.4, label="swap used (recordings)")
        ax.set_xticks(xs, labels, fontsize=7)
        for xi, c in zip(xs, cs):
            if (status := _status(c)) != "ok":
                ax.annotate(status, (xi, 0), textcoords="offset points", xytext=(0, 4), ha="center",
                            fontsize=7, color="red")
        _legend(ax)
    return fig


def residency_label(c: Cell) -> str:
    """A cell's point on the residency chart: its level, major faults a token, and what came back a second from
    swap and from files (mmap'ed weights re-read come back as read-in, not swap-in: 1147 MB/s against 0 in a 400
    MiB memory cgroup)."""
    m = c.machine
    return (f"K{c.k}B{c.b} {fmt(m.major_faults_per_token, '.0f')} flt/tok · swap-in {fmt(m.swap_in_mbps, '.0f')} · "
            f"read-in {fmt(m.file_read_mbps, '.0f')} MB/s")


def _residency_chart(plt: ModuleType, runs: list[Run]) -> Figure | None:
    """tok/s against the share of the weights in memory, each cell labelled by residency_label (docs/residency.md):
    past the wall the points fall with the share."""
    if not any(c.machine.weights_resident_share is not None for run in runs for c in run.cells):
        return None
    fig, axes = _axes(plt, runs, "Residency against tok/s: past the wall the weights leave memory and tok/s falls",
                      "aggregate tok/s", "weights resident in memory (%)")
    for ax, run in zip(axes, runs):
        cs = [c for c in _ok(run.cells) if c.machine.weights_resident_share is not None]
        xs = [100 * (c.machine.weights_resident_share or 0.0) for c in cs]
        ax.plot(xs, [_throughput(c) for c in cs], "o", label=run.name)
        for x, c in zip(xs, cs):
            ax.annotate(residency_label(c), (x, _throughput(c)), textcoords="offset points", xytext=(3, 3), fontsize=6)
        ax.set_xlim(0, 105)
        _legend(ax)
    return fig


def _timeline_chart(plt: ModuleType, runs: list[Run]) -> Figure | None:
    """Recorded sessions: tok/s, TPOT and memory over time, a column per recording, its markers drawn."""
    timed = [r for r in runs if r.samples]
    if not timed:
        return None
    fig, axes = plt.subplots(3, len(timed), figsize=(7 * len(timed), 8), sharex="col", squeeze=False)
    fig.suptitle("Recorded session: the steps as they happened")
    for col, run in enumerate(timed):
        t0 = run.samples[0].t_ns - int(run.samples[0].t * NS)
        ts = [(s.t_ns - t0) / NS for s in run.samples]
        _timeline_column(run, [row[col] for row in axes], ts)
        for e in run.events:
            if e.type == "marker":
                x = (e.t_ns - t0) / NS
                for row in range(3):
                    axes[row][col].axvline(x, color="magenta", ls=":")
                axes[0][col].annotate(e.text, (x, 0), textcoords="offset points", xytext=(2, 2),
                                      fontsize=7, color="magenta")
        for row in range(3):
            _legend(axes[row][col])
            axes[row][col].grid(alpha=0.3)
    return fig  # type: ignore[no-any-return]  # pyplot's subplots is untyped here


def _timeline_column(run: Run, axes: list[Axes], ts: list[float]) -> None:
    ax = axes[0]
    ax.set_title(run.name, fontsize=9)
    ax.plot(ts, [s.agg_tps or 0 for s in run.samples], label="aggregate tok/s (5 s window)")
    ax.set_ylabel("tok/s")
    ax = axes[1]
    ax.plot(ts, [(s.tpot_p50 or float("nan")) * 1e3 for s in run.samples], color="green",
            label="per-stream TPOT p50")
    ax.set_ylabel("TPOT (ms)")
    ax = axes[2]
    ax.plot(ts, [s.system["mem_used"] / 1e9 for s in run.samples], label="memory used")
    ax.plot(ts, [s.system["swap_used"] / 1e9 for s in run.samples], label="swap used")
    ax.set_ylabel("GB")
    ax.set_xlabel("seconds")


# The report's charts in the order they are drawn: (file name, what draws it; None where the runs lack its data).
CHARTS: list[tuple[str, Callable[[ModuleType, list[Run]], Figure | None]]] = [
    ("throughput_vs_k.png", _throughput_chart("k", "b")),
    ("throughput_vs_b.png", _throughput_chart("b", "k")),
    ("tpot_vs_k.png", _tpot_chart),
    ("bandwidth_vs_k.png", _bandwidth_chart),
    ("ttft_vs_concurrency.png", _ttft_chart),
    ("pareto.png", _pareto_chart),
    ("goodput_vs_load.png", _goodput_chart),
    ("cost_vs_concurrency.png", _cost_chart),
    ("ttft_by_turn.png", _turns_chart),
    ("memory_per_cell.png", _memory_chart),
    ("residency_vs_throughput.png", _residency_chart),
    ("timeline.png", _timeline_chart),
]


def _peak_swap(run: Run, cell: Cell) -> float | None:
    span = cell.timing.span_ns
    if not run.samples or not span:
        return None
    vals = [s.system["swap_used"] for s in run.samples if span[0] <= s.t_ns <= span[1]]
    return max(vals) / 1e9 if vals else None


def _heat_lines(run: Run) -> list[str]:
    """Burst vs sustained tok/s of each cell that ran long enough (metrics.burst_sustained), with the thermal
    states it saw: a machine that throttles as it heats reads sustained below burst."""
    out = []
    for c in run.cells:
        recs = [r for r in run.records if (r.k, r.b, r.mode) == (c.k, c.b, c.mode) and not r.error]
        bs = M.burst_sustained(recs) if c.ok and recs else None
        if bs is None:
            continue
        burst, sustained = bs
        out.append(f"- K={c.k} B={c.b}: burst {burst:.1f} tok/s (its first fifth), sustained {sustained:.1f} "
                   f"(its last half): {(sustained - burst) / burst:+.0%}" if burst else "")
        if c.machine.thermal:
            out[-1] += f"; thermal {c.machine.thermal}"
    return ["", "Burst vs sustained (cells of 30 s or more):", *out] if out else []


def _run_lines(run: Run) -> list[str]:
    """The report's lines about a run before its table: model, machine, warnings, the clients it combines."""
    h, env = run.header, run.header.environment or Environment()
    lines = [f"## {run.name}", "",
             f"- model: {h.model} ({(h.model_bytes or 0) / 1e9:.3f} GB, sha256 {h.model_sha256_prefix or '?'}), "
             f"engine {h.engine} {h.engine_settings or {}}",
             f"- machine: {env.os}, {env.cpu}, chip {h.chip or '?'}, β "
             + (f"{run.beta:g} GB/s ({h.bandwidth_source or 'spec'})" if run.beta else "unknown"),
             f"- simulated: {h.simulated}"]
    lines += [f"- warning: {w}" for w in run.warnings]
    both = run.combined
    if both is None:
        return lines
    lines.append(f"- combined from {len(both.runs)} clients: throughput and concurrency summed "
                 "per cell, latency percentiles over all their requests pooled")
    if both.segments:
        lines.append(f"- segments {both.segments} of one schedule ({h.arrivals}, seed {h.seed}, "
                     f"{h.requests} requests): together, the load one client would have sent")
    if both.clients_start:
        import time as _time

        at = _time.strftime("%Y-%m-%dT%H:%M:%S", _time.gmtime(both.clients_start[0].start_at_unix))
        lines.append(f"- started at the asked time {at}Z: " + "; ".join(
            f"{c.client}: first request sent {fmt(c.first_sent_late_ms, '+.1f')} ms after its schedule, clock "
            + (f"{c.clock_offset_s * 1e3:+.1f} ± {(c.clock_bound_s or 0) * 1e3:.1f} ms against the server's"
               if c.clock_offset_s is not None else f"not checked ({c.clock_why})")
            for c in both.clients_start))
    return lines


def markdown(runs: list[Run], files: list[Path]) -> str:
    lines = ["# inference-top report", ""]
    for run in runs:
        lines += _run_lines(run)
        lines += ["", "| K | B | context | status | tok/s | ± sd | TPOT p50 ms | TTFT p50 ms | TTFT p99 ms | RSS GB | "
                  "BW GB/s | CV | note |", "|" + "---|" * 13]
        for c in run.cells:
            status = _status(c)
            note = ("NOISY" if c.noisy else "") + answer_notes(c) + turn_note(c.turns) + client_note(c)
            if status != "ok":
                note = c.reason or ""
            elif c.load.arrivals or c.load.behind_schedule:  # the load generator's lateness (open loop)
                note += (f" {c.load.arrivals or ''}, sent late p50/p99 {fmt(c.load.lateness.p50)}/"
                         f"{fmt(c.load.lateness.p99)} ms" + (" BEHIND SCHEDULE" if c.load.behind_schedule else ""))
            lines.append(
                f"| {c.k} | {c.b} | {c.context or '—'} | {status} | {fmt(c.output_throughput)} | "
                f"{fmt(_per_rep_sd(c)) if status == 'ok' else '—'} | {fmt(c.requests.tpot.p50)} | "
                f"{fmt(c.requests.ttft.p50, '.0f')} | "
                f"{M.p99_mark(c.requests.completed)}{fmt(c.requests.ttft.p99, '.0f')} | "
                f"{fmt(c.machine.rss_gb_sum, '.2f')} | {fmt(c.bandwidth.gbps, '.2f')} | "
                f"{fmt(c.cv, '.3f')} | {note} |")
        lines += _heat_lines(run)
        lines.append("")
    lines += ["TTFT is queue-inclusive (first token − scheduled); TPOT = (t_last − t_first)/(N − 1); throughput ="
              " output tokens ÷ (first scheduled → last done), mean over reps (a recording: tokens inside the "
              "level's own periods ÷ their length, pauses excluded); CV = stdev/mean over reps, noisy above 0.10; "
              f"BW in instances mode = aggregate tok/s × W; {M.P99_LEGEND}.", ""]
    lines += [f"![{f.stem}]({f.name})" for f in files]
    return "\n".join(lines) + "\n"


def report_runs(paths: list[str], out: Path, crossover_of_two: bool = False,
                combined: bool = False) -> tuple[list[Path], Path, list[str]]:
    """Bench outputs (or recordings) reported: their charts and report.md in `out` (control/reports.py adds a
    tune's front beside them)."""
    runs = [load_run(p) for p in paths]
    if combined:
        runs = [combine(runs)]
        out.mkdir(parents=True, exist_ok=True)  # the combined cells as numbers, every figure exact
        (out / "combined.json").write_text(json.dumps([c.to_json() for c in runs[0].cells], indent=2, default=str))
    if crossover_of_two and len(runs) != 2:
        raise ReportError("--crossover compares exactly two runs (e.g. this machine's bench output and a server's)")
    files = render(runs, out)
    text = markdown(runs, files)
    if crossover_of_two:
        path, x = render_crossover(runs, out)
        files.append(path)
        text += (f"\n## Crossover\n\n{runs[1].name} becomes cheaper per token than {runs[0].name} at concurrency "
                 f"{x:.1f}.\n" if x is not None else "\n## Crossover\n\nThe two $/Mtok curves do not cross over "
                 "the concurrency both cover.\n") + f"\n![crossover]({path.name})\n"
    md = out / "report.md"
    md.write_text(text)
    return files, md, [w for r in runs for w in r.warnings]


__all__ = ["report_runs", "render", "markdown", "crossover"]
