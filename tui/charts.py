"""The dashboard's charts, drawn by plotext (braille lines) and handed to Textual as strips, and the text panels
beside them. What plotext does not do is here: a gap in a series breaks its line, and Textual is asked to
repaint only the rows of a chart or a panel that changed (the line API: nothing is laid out or wrapped). A chart
is rebuilt on the main thread only when its data changed."""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import plotext as plt
from plotext._dict import color_codes as PLOTEXT_CODES  # plotext's colour names → their number (0–15)
from rich.cells import cell_len
from rich.color import ANSI_COLOR_NAMES
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.content import Content
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget



class Panel(Widget):
    """Text that changes often: render() returns it and an update only repaints this widget (a
    Static.update asks for a layout pass of the whole screen, which costs more than the drawing). Each line is
    laid out (Textual's Content: wrapped, styled, cut into strips) when it changes; an unchanged line keeps its
    strips (most of the numbers panel's lines stay the same from one second to the next)."""

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self._text: Text | str = ""
        self._strips: list[Strip] | None = None  # the text's, at _width
        self._width = 0
        self._style: object = None  # the widget's style (Textual's VisualStyle) of the cached strips
        self._cache: dict[tuple, list[Strip]] = {}  # a line (text, spans, style) → its strips, at _width

    def set_text(self, text: Text | str) -> None:
        if text == self._text:  # the same text: no repaint
            return
        self._text = text
        old, width = self._strips, self.size.width
        if old is None or not width or width != self._width or not self.is_mounted:
            self._strips = None
            self.refresh()
            return
        self._strips = new = self._lay_out(width)  # an unchanged line keeps its very strips
        if len(new) != len(old):
            self.refresh()
        else:
            refresh_rows(self, [y for y, (a, b) in enumerate(zip(old, new)) if a is not b], width)

    def render(self):
        return self._text

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._strips is None or width != self._width:
            self._strips = self._lay_out(width)
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(width, self.visual_style.rich_style)

    def _lay_out(self, width: int) -> list[Strip]:
        text = self._text if isinstance(self._text, Text) else Text(self._text)
        style = self.visual_style
        if self.text_selection is not None:  # a selection spans lines: the whole text at once, as Textual does
            self._cache = {}
            return Visual.to_strips(self, Content.from_rich_text(text, console=self.app.console), width, None, style)
        cache = self._cache if (width, style) == (self._width, self._style) else {}
        kept: dict[tuple, list[Strip]] = {}
        out: list[Strip] = []
        for line in text.split("\n", allow_blank=True):
            key = (line.plain, tuple(line.spans), line.style)
            strips = cache.get(key)
            if strips is None:
                strips = Visual.to_strips(self, Content.from_rich_text(line, console=self.app.console), width, None,
                                          style)
            kept[key] = strips
            out.extend(strips)
        self._cache, self._width, self._style = kept, width, style
        return out


class TablePanel(Panel):
    """A Panel as wide and as tall as its text, its lines never wrapped (a table's rows): in a container that
    scrolls, a table wider than the room it has scrolls sideways instead of breaking its rows in two."""

    DEFAULT_CSS = "TablePanel { width: auto; height: auto; }"

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self._extent = (0, 0)  # the text's widest line (cells) and its lines

    def set_text(self, text: Text | str) -> None:
        lines = (text.plain if isinstance(text, Text) else text).split("\n")
        extent = (max(cell_len(line) for line in lines), len(lines))
        if extent != self._extent:  # another size: lay the screen out again (the container's scrollbars)
            self._extent = extent
            self._text = text
            self._strips = None
            self.refresh(layout=True)
            return
        super().set_text(text)

    def get_content_width(self, container, viewport) -> int:
        return self._extent[0]

    def get_content_height(self, container, viewport, width: int) -> int:
        return self._extent[1]


def refresh_rows(widget: Widget, rows: Sequence[int], width: int) -> None:
    """Repaint only these rows of the widget (each run of adjacent rows as one region): Textual then renders
    just those lines again, not the whole widget (most of a second's repaint was lines that had not changed)."""
    runs: list[list[int]] = []
    for y in rows:
        if runs and y == runs[-1][1]:
            runs[-1][1] = y + 1
        else:
            runs.append([y, y + 1])
    if runs:
        widget.refresh(*(Region(0, a, width, b - a) for a, b in runs))


# A colour by its number in the terminal's 16: plotext and Rich name some differently (plotext's "orange" is Rich's
# "yellow", its "white" Rich's "bright_white"), so charts are given Rich's names and plotext its own.
_RICH_NAME = {n: name for name, n in reversed(list(ANSI_COLOR_NAMES.items())) if n < 16}
_PLOTEXT_NAME = {name: p for p, n in PLOTEXT_CODES.items() for name, m in ANSI_COLOR_NAMES.items() if m == n}
_FROM_PLOTEXT = {p: _RICH_NAME[n] for p, n in PLOTEXT_CODES.items()}


def _pc(color: str) -> str:
    """plotext's name for a Rich colour name."""
    return _PLOTEXT_NAME.get(color, color)


Series = tuple[str, Sequence[float], Sequence[float | None], str, str]  # label, xs, ys, colour, 'line' | 'dash'


class HLine(NamedTuple):
    """A horizontal line of a chart: its value, its label ('' for none) and its colour."""

    y: float
    label: str
    color: str


Row = list[tuple[str, str | None]]  # a chart's row: runs of (text, colour or None)


def runs(xs: Sequence[float], ys: Sequence[float | None], x0: float, x1: float
         ) -> list[tuple[list[float], list[float]]]:
    """The points in [x0, x1] as runs of consecutive values: a None (no value then) ends a run, so plotext does not
    join the values either side of a gap."""
    out: list[tuple[list[float], list[float]]] = []
    cur: tuple[list[float], list[float]] | None = None
    for x, y in zip(xs, ys):
        if y is None or not x0 <= x <= x1:
            cur = None
            continue
        if cur is None:
            cur = ([], [])
            out.append(cur)
        cur[0].append(x)
        cur[1].append(y)
    return out


def thin(xs: list[float], ys: list[float], x0: float, x1: float, cells: int) -> tuple[list[float], list[float]]:
    """At most two points a character cell of the plot: where more fall in one, its lowest and highest, in x order.
    plotext's cost grows with the segments it joins (a 180 s span at 2 Hz is 360 points for ≈ 90 cells); the line
    through a cell's extremes spans the same rows of that cell. The points are in x order."""
    if len(xs) <= 2 * cells:
        return xs, ys
    scale = cells / (x1 - x0)
    out_x: list[float] = []
    out_y: list[float] = []
    i, n = 0, len(xs)
    while i < n:
        cell = int((xs[i] - x0) * scale)
        j = i + 1
        while j < n and int((xs[j] - x0) * scale) == cell:
            j += 1
        if j - i <= 2:
            out_x.extend(xs[i:j])
            out_y.extend(ys[i:j])
        else:
            seg = ys[i:j]
            lo = i + seg.index(min(seg))
            hi = i + seg.index(max(seg))
            for k in sorted({lo, hi}):
                out_x.append(xs[k])
                out_y.append(ys[k])
        i = j
    return out_x, out_y


def held(parts: list[tuple[list[float], list[float]]], x0: float, x1: float, n: int
         ) -> tuple[list[float], list[float]]:
    """A dashed series' marks: at `n` evenly spaced x over [x0, x1], the value of the run's last point at or before
    it (a value held until the next point, none past a run's last point); a run no mark falls in keeps its first
    point. The points of a run are in x order (a time series)."""
    grid = [x0 + (x1 - x0) * i / (n - 1) for i in range(n)]
    out_x: list[float] = []
    out_y: list[float] = []
    for px, py in parts:
        marks = [g for g in grid if px[0] <= g <= px[-1]]
        if not marks:
            out_x.append(px[0])
            out_y.append(py[0])
        for g in marks:
            out_x.append(g)
            out_y.append(py[bisect_right(px, g) - 1])
    return out_x, out_y


def draw(w: int, h: int, title: str, series: Iterable[Series], hlines=(), markers=(),
         x_range: tuple[float, float] | None = None) -> list[Row]:
    """The chart as h rows of (text, colour) runs, each row w cells, drawn by plotext: the title, the framed plot
    with plotext's ticks and its legend (the labelled series), braille lines (a None breaks a line), a dashed
    series as ─, hlines with their labels at the right, markers as labelled vertical lines. The y axis runs from 0
    to 1.15 × the largest value (or hline) shown."""
    series = list(series)
    if x_range is None:
        allx = [x for _, xs, ys, _, _ in series for x, y in zip(xs, ys) if y is not None]
        x_range = (min(allx), max(allx)) if allx else (0.0, 1.0)
    x0, x1 = x_range
    if x1 <= x0:
        x1 = x0 + 1.0
    plt.clf()
    plt.limit_size(False, False)  # the widget's size, not the terminal's
    plt.plotsize(w, h - 1)  # under the title, which is ours: plotext leaves out one longer than its plot
    plt.theme("clear")
    ymax = 0.0
    shown = False
    legend = legend_w = 0  # plotext's legend: a row a labelled series shown, from the plot's top row down, each
    # its marker, a space and the label from the plot's second column
    for label, xs, ys, color, style in series:
        parts = runs(xs, ys, x0, x1)
        if not parts:
            continue
        shown = True
        legend += bool(label)
        legend_w = max(legend_w, 1 + 3 + cell_len(label or ""))
        ymax = max(ymax, max(max(py) for _, py in parts))
        if style == "point":  # points, not a line (a scatter: the tune's candidates)
            pts = [(x, y) for px, py in parts for x, y in zip(px, py)]
            plt.scatter([x for x, _ in pts], [y for _, y in pts], label=label or None, color=_pc(color), marker="●")
            continue
        if style == "dash":  # a value held from each point to the next: a ─ about every other cell
            px, py = held(parts, x0, x1, max(5, w // 2))
            plt.scatter(px, py, label=label or None, color=_pc(color), marker="─")
            continue
        for i, (px, py) in enumerate(parts):
            px, py = thin(px, py, x0, x1, w // 2)  # half the chart's width: no more than its plot's cells
            if len(px) == 1:
                plt.scatter(px, py, label=(label or None) if i == 0 else None, color=_pc(color), marker="braille")
            else:
                plt.plot(px, py, label=(label or None) if i == 0 else None, color=_pc(color), marker="braille")
    hl = [HLine(y, label, color) for y, label, color in hlines if y is not None]
    ymax = max([ymax] + [y for y, _, _ in hl])
    y1 = ymax * 1.15 if ymax > 0 else 1.0
    _lines_and_markers(hl, markers, (x0, x1), y1, (w, h), (legend, legend_w))
    if not shown:
        plt.text("waiting for data…", x0 + 0.02 * (x1 - x0), y1 / 2, alignment="left")
    plt.xlim(x0, x1)
    plt.ylim(0, y1)
    title_row: Row = [(_center(title, w), None)]
    return [title_row, *_rows()]


def _lines_and_markers(hl: Sequence[HLine], markers: Iterable[tuple[float, str]],
                       x_range: tuple[float, float], y1: float, size: tuple[int, int], legend: tuple[int, int]) -> None:
    """The hlines with their labels at the right end (the legend holds the top left corner) and the markers as
    labelled vertical lines, each label on a row no other label is on (_label_ys). `legend`: its rows and width."""
    (x0, x1), (w, h) = x_range, size
    labelled = [(y, label, color) for y, label, color in hl if label]
    ys, at, below = _label_ys(y1, h, [y for y, _, _ in labelled], legend[0])
    plot_w = w - 2 - len(f"{y1:.1f}")  # less the frame's two columns and the y ticks' (their widest, the top one)
    for y, _, color in hl:
        plt.hline(y, _pc(color))
    for ly, (_, label, color) in zip(ys, labelled):
        plt.text(label, x1 - 0.01 * (x1 - x0), ly, color=_pc(color), alignment="right")
    for x, label in markers:
        if x0 <= x <= x1:
            plt.vline(x, "magenta")
            beside = (x - x0) / (x1 - x0) * (plot_w - 1) <= legend[1] + 1  # its label would meet the legend's
            plt.text(label, x, below if beside else at, color="magenta", alignment="left")


def _label_ys(y1: float, h: int, lines: Sequence[float], legend: int = 0) -> tuple[list[float], float, float]:
    """Where the labels go, so that none is written over another ("atK=2nable K=34 GB/s", "── predicK=2" read as
    neither): each labelled hline's on its line's row, or, where a higher line's label took that row, on the nearest
    free row (below before above); the markers' near the top (0.94 of the y axis), on the highest row at or below it
    that no hline's label is on, and for a marker beside the legend (its `legend` rows from the top) that the legend
    is not on either. (The y of each line's label in the order given, the markers' y, the y of those beside the
    legend.) The plot has h − 4 rows (the title, its frame's two and the x ticks' are not the plot's); plotext puts
    y on row round(y ÷ y1 × (rows − 1)) from the bottom."""
    rows = h - 4
    if rows < 2:
        return list(lines), y1 * 0.94, y1 * 0.94
    row = lambda y: round(y / y1 * (rows - 1))  # noqa: E731
    out = list(lines)
    taken: set[int] = set()
    for i in sorted(range(len(lines)), key=lambda i: -lines[i]):
        want = row(lines[i])
        free = [r for r in range(rows) if r not in taken] or [want]
        r = min(free, key=lambda r: (abs(r - want), r > want))
        taken.add(r)
        if r != want:
            out[i] = r / (rows - 1) * y1

    def highest(avoid: set[int]) -> float:
        r = row(y1 * 0.94)
        while r in avoid and r > 0:
            r -= 1
        return r / (rows - 1) * y1
    return out, highest(taken), highest(taken | set(range(rows - legend, rows)))


def _center(s: str, w: int) -> str:
    n = cell_len(s)
    if n > w:
        return s[:w - 1] + "…"
    left = (w - n) // 2
    return " " * left + s + " " * (w - n - left)


def _rows() -> list[Row]:
    """plotext's figure as rows of (text, Rich colour name) runs, read from its cell matrix (the characters and
    each one's colour) rather than from the ANSI text plt.build() would make of it and Rich would decode again."""
    fig = plt._core._figure  # the figure plt.* draws on
    fig._set_sizes()
    fig._build_matrix()
    m = fig.monitor.matrix
    out: list[Row] = []
    for r in range(m.rows - 1, -1, -1):  # plotext's row 0 is the bottom one
        chars, colors = m.marker[r], m.fullground[r]
        row: Row = []
        run: list[str] = []
        run_color: str | None = None
        for ch, c in zip(chars, colors):
            color = _FROM_PLOTEXT.get(c)  # plotext's "default": none
            if color != run_color and run:
                row.append(("".join(run), run_color))
                run = []
            run_color = color
            run.append(ch)
        if run:
            row.append(("".join(run), run_color))
        out.append(row)
    return out


def fitted_title(title: str, unit: str, w: int) -> str:
    """A chart's title and unit in `w` cells: whole, else without its parenthesis ("bandwidth product [GB/s]"),
    else what comes before its colon ("per-stream TPOT [ms]"), else cut (draw() ends it in "…")."""
    for t in (title, title.split(" (")[0], title.split(" (")[0].split(":")[0]):
        if cell_len(f"{t} [{unit}]") <= w:
            break
    return f"{t} [{unit}]"


class Chart(Widget):
    """One chart. `series`: (label, xs, ys, color, style) with style 'line' or 'dash'; `hlines`: (y, label,
    color); `markers`: (x, label) drawn as labelled vertical lines. Drawn into strips once per change of its key
    and size (the line API: Textual asks for lines, nothing is laid out or wrapped)."""

    DEFAULT_CSS = "Chart { height: 1fr; }"

    def __init__(self, title: str, unit: str, **kw):
        super().__init__(**kw)
        self.title = title
        self.unit = unit
        self._key = None
        self._rows: list[Row] = []
        self._strips: list[Strip | None] = []  # None: a row changed, its strip not made yet
        self._data: tuple | None = None  # the last plot's arguments: drawn again at a new size
        self.builds = 0

    def on_resize(self) -> None:
        """A new size (the terminal's, or the layout's): the last data drawn again to it at once, so no row of
        the old drawing stays."""
        if self._data is not None:
            self.plot(*self._data)

    def plot(self, key, series, hlines=(), markers=(), x_range=None) -> None:
        self._data = (key, series, hlines, markers, x_range)
        w, h = self.size.width, self.size.height
        if w < 20 or h < 5:
            return
        key = (key, w, h)
        if key == self._key:
            return  # nothing changed: no redraw
        self._key = key
        rows = draw(w, h, fitted_title(self.title, self.unit, w), series, hlines, markers, x_range)
        self.builds += 1
        if rows != self._rows:
            old = self._rows
            self._rows = rows
            if len(old) != len(rows) or not self._strips:
                self._strips = []
                self.refresh()
            else:  # the rows that changed are made again and repainted; the others keep their strips
                changed = [y for y, (a, b) in enumerate(zip(old, rows)) if a != b]
                for y in changed:
                    self._strips[y] = None
                refresh_rows(self, changed, w)

    @property
    def plain(self) -> list[str]:
        """The chart's rows as text (no colours)."""
        return ["".join(s for s, _ in row) for row in self._rows]

    def render_line(self, y: int) -> Strip:
        if self._rows and (not self._strips or None in self._strips):  # new rows: their strips, made once
            base = self.rich_style  # the widget's own colours (a walk up the DOM: once per drawing)
            styles: dict[str | None, Style] = {None: base}
            strips = self._strips or [None] * len(self._rows)
            for i, row in enumerate(self._rows):
                if strips[i] is None:
                    for _, color in row:
                        if color not in styles:
                            styles[color] = base + Style(color=color)
                    strips[i] = Strip([Segment(s, styles[c]) for s, c in row])
            self._strips = strips
        if y < len(self._strips):
            return self._strips[y]  # type: ignore[return-value]  # every one made just above
        return Strip.blank(self.size.width)
