"""Which of the dashboard's panels show at a terminal's size, and how big: a pure function of the size, the view
`v` chose and the rows each panel's text takes, applied by tui/app.py on every resize. The headline first: the
bandwidth chart (the bandwidth product against the spec and attainable lines) and the numbers panel (the wall,
the level's tok/s, TPOT and the prediction's error) are on screen at every size; the other charts beside it where
each has at least PLOT_ROWS rows of plot; what does not fit is a view of its own behind `v` rather than a panel
shrunk to nothing. The log is as tall as what it holds (up to a few lines, fewer on a short screen).

    ≥ 120 columns: the charts (3/5) beside a side column of the gauges, the numbers and the workers (2/5, ≥ 50)
    < 120 columns: the chart beside the numbers (half each); the gauges and workers are the `machine` view
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

CHARTS = ("chart-bw", "chart-tps", "chart-tpot")  # the headline first
PLOT_ROWS = 8  # the least rows of plot a chart is shown with beside others
CHART_FRAME = 4  # a chart's rows besides its plot: its title, plotext's frame (top, bottom) and the x ticks
CHART_MIN = PLOT_ROWS + CHART_FRAME
WIDE = 120  # columns from which the side column holds the gauges, the numbers and the workers
SIDE_MIN = 50
HEADER = 2
FOOTER = 1
BORDER = 2  # a bordered panel's rows (and columns) besides its text
PAD = 2  # a side panel's padding, left and right together


@dataclass(frozen=True)
class Needs:
    """The rows each text panel's lines take at its width (no border): all of them, and the numbers panel's
    first-ranked ones (tui/panels.numbers_lines: the wall, tok/s, TPOT, the prediction's error, the bandwidth
    product); the log's lines and the step table's."""

    gauges: int = 6
    numbers: int = 14
    numbers_core: int = 6
    workers: int = 2
    log: int = 0
    steps: int = 4


@dataclass(frozen=True)
class Arrangement:
    """What shows: `views` is what `v` goes through (this one is `view`); the charts in the chart column, the
    step table and its Pareto chart, the side panels with their heights, the columns' widths, the log's height."""

    size: tuple[int, int]
    views: tuple[str, ...]
    view: str
    charts: tuple[str, ...] = ()
    steps: bool = False
    pareto: bool = False
    steps_rows: int = 0
    side: dict[str, int] = field(default_factory=dict)  # panel id → its height (borders included)
    main_w: int = 0
    side_w: int = 0
    log_rows: int = 3

    @property
    def body(self) -> int:
        return self.size[1] - HEADER - FOOTER - self.log_rows


def log_rows(height: int, lines: int) -> int:
    """The log's height: the lines it holds, at most 1 below 30 rows, 2 below 40, 6 from there (and its border)."""
    cap = 1 if height < 30 else 2 if height < 40 else 6
    return min(max(lines, 1), cap) + BORDER


def side_width(width: int, view: str) -> int:
    """The side column's width (0: none shown)."""
    if view == "machine":
        return width
    if width >= WIDE:
        return max(SIDE_MIN, width * 2 // 5)
    return 0 if view == "steps" else width // 2


def text_width(width: int, view: str) -> int:
    """The columns a side panel's text has (the numbers panel's lines are wrapped to it)."""
    return max(10, side_width(width, view) - BORDER - PAD)


def fitting_charts(body: int) -> int:
    """How many charts fit `body` rows with PLOT_ROWS rows of plot each (the headline at least)."""
    return max(1, min(len(CHARTS), body // CHART_MIN))


def _side(total: int, panels: tuple[str, ...], n: Needs, workers_first: bool = False) -> dict[str, int]:
    """The side panels' heights in `total` rows: the numbers panel's first-ranked lines first, then the gauges
    whole, then the rest of the numbers (`workers_first`: the workers' rows first), and what is left to the
    workers (≥ 3 rows, or none); a panel given no row is left out (it is then in the `machine` view)."""
    out = {p: 0 for p in panels}
    rem = total
    if "numbers" in panels:
        out["numbers"] = min(n.numbers_core + BORDER, rem)
        rem -= out["numbers"]
    if "gauges" in panels and rem >= n.gauges + BORDER:
        out["gauges"] = n.gauges + BORDER
        rem -= out["gauges"]
    if "numbers" in panels:  # the workers' header and first rows (`workers_first`: all of them) kept
        keep = min(n.workers, n.workers if workers_first else 4) + BORDER if "workers" in panels else 0
        more = max(0, min(n.numbers + BORDER - out["numbers"], rem - keep))
        out["numbers"] += more
        rem -= more
    if "workers" in panels and rem >= BORDER + min(2, n.workers):  # the header and a row at least
        out["workers"], rem = rem, 0
    if rem and "numbers" in panels:
        out["numbers"] += rem  # the room no panel takes: under the numbers
    return out


def arrange(width: int, height: int, view: str, needs: Needs) -> Arrangement:
    """The panels at this size in this view (one not offered at this size is `main`)."""
    logs = log_rows(height, needs.log)
    body = height - HEADER - FOOTER - logs
    wide = width >= WIDE
    k = fitting_charts(body)
    side_panels = ("gauges", "numbers", "workers") if wide else ("numbers",)
    main_side = _side(body, side_panels, needs)
    steps_rows = needs.steps + BORDER
    pareto_fits = body - steps_rows >= CHART_MIN
    views = ["main", "steps"]
    if not wide and not pareto_fits:
        views.append("pareto")
    views += CHARTS[k:]
    if not wide or not all(main_side.values()) or main_side["workers"] < needs.workers + BORDER:
        views.append("machine")  # a panel left out, or the workers' rows (an endpoint's each) cut
    if view not in views:
        view = "main"
    side_w = side_width(width, view)
    base = Arrangement((width, height), tuple(views), view, log_rows=logs, side_w=side_w, main_w=width - side_w,
                       side=main_side if side_w else {})
    if view == "machine":
        return replace(base, side=_side(body, ("gauges", "numbers", "workers"), needs, workers_first=True))
    if view == "steps":
        return replace(base, steps=True, pareto=wide or pareto_fits, steps_rows=0 if wide or not pareto_fits
                       else steps_rows)
    if view == "pareto":
        return replace(base, pareto=True)
    return replace(base, charts=CHARTS[:k] if view == "main" else (view,))
