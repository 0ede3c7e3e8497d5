"""The dashboard's charts, drawn in braille by this module (2 × 4 dots a cell) straight into Textual strips, and
the text panels beside them. A chart is rebuilt on the main thread only when its data changed."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.content import Content
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget

BRAILLE = 0x2800
# the bit of the dot (column 0/1, row 0–3 from the top of the cell) in a braille character (U+2800 + bits)
_DOT = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
_BITS = np.array([[_DOT[half][3 - sub] for half in (0, 1)] for sub in range(4)])  # [row from the bottom, column]
LINE_MARK = "⢕⢕"  # the legend's sign for a line series
DASH_MARK = "──"


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


def ticks(lo: float, hi: float, n: int) -> list[float]:
    """n values evenly from lo to hi (both included)."""
    if n <= 1:
        return [lo]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def tick_format(lo: float, hi: float, n: int) -> str:
    """A format with enough decimals for two significant digits of the step between n ticks."""
    step = (hi - lo) / max(1, n - 1)
    if step <= 0:
        return ".1f"
    return f".{min(4, max(0, 1 - math.floor(math.log10(step))))}f"


class Grid:
    """A chart's plot area: `cols` × `rows` cells, 2·cols × 4·rows braille dots, x and y scaled from
    [x0, x1] and [y0, y1] (dot 0 is the left / bottom one). A cell holds dots or a character, and a colour."""

    def __init__(self, cols: int, rows: int, x0: float, x1: float, y0: float, y1: float):
        self.cols, self.rows = cols, rows
        self.x0, self.x1, self.y0, self.y1 = x0, x1, y0, y1
        self.w, self.h = 2 * cols, 4 * rows  # dots
        self.bits = [0] * (cols * rows)  # row 0 is the bottom one
        self.char: list[str | None] = [None] * (cols * rows)
        self.color: list[str | None] = [None] * (cols * rows)
        self._sx = (self.w - 1) / (x1 - x0) if x1 > x0 else 0.0  # dots per unit of x
        self._sy = (self.h - 4) / (y1 - y0) if y1 > y0 else 0.0  # y: from the bottom row's middle to the top's

    def dx(self, x: float) -> int:
        return round((x - self.x0) * self._sx)

    def dy(self, y: float) -> int:
        """y0 at the middle of the bottom row (dot 1.5), y1 at the middle of the top row: a row's label (the value
        at its middle) is the nearest to every value drawn in it."""
        return min(self.h - 1, max(0, round(1.5 + (y - self.y0) * self._sy)))

    def line(self, xs: Sequence[float], ys: Sequence[float | None], color: str) -> None:
        """The points joined by straight lines, in the order given (a None breaks the line); points outside
        [x0, x1] are left out. Each dot column gets the rows the segments cross over its width, as one run from
        the lowest to the highest. The plain statement of where the dots go; charts draw with `line_np`, the same
        dots in numpy (about 2.5 times faster on a 180 s series)."""
        x0, x1, y0, sx, sy = self.x0, self.x1, self.y0, self._sx, self._sy
        top = self.h - 1
        lo: dict[int, int] = {}  # dot column → its run's lowest and highest dot rows
        hi: dict[int, int] = {}
        ax = ay = -1  # the last point drawn, in dots (ax −1: none, the line starts again)
        for x, y in zip(xs, ys):
            if y is None or not x0 <= x <= x1:
                ax = -1
                continue
            px = round((x - x0) * sx)
            py = round(1.5 + (y - y0) * sy)
            py = 0 if py < 0 else top if py > top else py
            if ax < 0 or px == ax:  # one column: from the last point (if any) to this one
                a, b = (py, py) if ax < 0 else ((ay, py) if ay < py else (py, ay))
                if px in lo:
                    if a < lo[px]:
                        lo[px] = a
                    if b > hi[px]:
                        hi[px] = b
                else:
                    lo[px], hi[px] = a, b
            else:  # over the columns from ax to px: in each, the rows the segment crosses over its width
                if px < ax:
                    ax, ay, px_, py_ = px, py, ax, ay
                else:
                    px_, py_ = px, py
                slope = (py_ - ay) / (px_ - ax)
                for c in range(ax, px_ + 1):
                    a = round(ay + slope * (max(ax, c - 0.5) - ax))
                    b = round(ay + slope * (min(px_, c + 0.5) - ax))
                    if a > b:
                        a, b = b, a
                    if c in lo:
                        if a < lo[c]:
                            lo[c] = a
                        if b > hi[c]:
                            hi[c] = b
                    else:
                        lo[c], hi[c] = a, b
            ax, ay = px, py
        cols, bits, char, cell_color = self.cols, self.bits, self.char, self.color
        for c, a in lo.items():
            half = _DOT[c & 1]
            base = c >> 1
            for y in range(a, hi[c] + 1):
                i = (y >> 2) * cols + base
                bits[i] |= half[3 - (y & 3)]
                char[i] = None
                cell_color[i] = color

    def line_np(self, xs: Sequence[float], ys: Sequence[float | None], color: str) -> None:
        """`line` in numpy, the same dots: the columns every segment crosses at once, then each column's run
        from its lowest to its highest row, then the runs' dots as braille bits (a chart's hot path)."""
        n = len(xs)
        if n == 0:
            return
        y_arr = np.array([np.nan if y is None else y for y in ys], dtype=float)
        x_arr = np.asarray(xs, dtype=float)
        ok = ~np.isnan(y_arr) & (x_arr >= self.x0) & (x_arr <= self.x1)
        if not ok.any():
            return
        px = np.rint((x_arr - self.x0) * self._sx).astype(np.int64)
        py = np.clip(np.rint(1.5 + (np.where(ok, y_arr, 0.0) - self.y0) * self._sy), 0, self.h - 1).astype(np.int64)
        idx = np.flatnonzero(ok)
        px, py = px[idx], py[idx]
        joined = np.zeros(len(idx), dtype=bool)  # this point and the one before it are joined
        joined[1:] = (idx[1:] - idx[:-1]) == 1
        prev_x, prev_y = np.roll(px, 1), np.roll(py, 1)
        moved = joined & ((px != prev_x) | (py != prev_y))
        # one column: a point starting a line, or joined to the last one in its column
        one = ~joined | (moved & (px == prev_x))
        a1 = np.where(joined, np.minimum(prev_y, py), py)[one]
        b1 = np.where(joined, np.maximum(prev_y, py), py)[one]
        c1 = px[one]
        # over columns: each segment between different columns, in x order
        seg = moved & (px != prev_x)
        ax, ay, bx, by = prev_x[seg], prev_y[seg], px[seg], py[seg]
        swap = bx < ax
        ax, bx = np.where(swap, bx, ax), np.where(swap, ax, bx)
        ay, by = np.where(swap, by, ay), np.where(swap, ay, by)
        span = bx - ax + 1
        c2 = np.repeat(ax, span) + (np.arange(span.sum()) - np.repeat(np.cumsum(span) - span, span))
        axr, ayr, bxr = np.repeat(ax, span), np.repeat(ay, span), np.repeat(bx, span)
        slope = np.repeat((by - ay) / (bx - ax), span)
        ya = np.rint(ayr + slope * (np.maximum(axr, c2 - 0.5) - axr)).astype(np.int64)
        yb = np.rint(ayr + slope * (np.minimum(bxr, c2 + 0.5) - axr)).astype(np.int64)
        cols_ = np.concatenate([c1, c2])
        lo_ = np.concatenate([a1, np.minimum(ya, yb)])
        hi_ = np.concatenate([b1, np.maximum(ya, yb)])
        lo = np.full(self.w, self.h, dtype=np.int64)
        hi = np.full(self.w, -1, dtype=np.int64)
        np.minimum.at(lo, cols_, lo_)
        np.maximum.at(hi, cols_, hi_)
        rows_y = np.arange(self.h)[:, None]
        mask = (rows_y >= lo[None, :]) & (rows_y <= hi[None, :])  # (dot rows, dot columns)
        cell_bits = (mask.reshape(self.rows, 4, self.cols, 2) * _BITS[None, :, None, :]).sum(axis=(1, 3))
        flat = cell_bits.ravel()
        where = np.flatnonzero(flat)
        bits, char, cell_color = self.bits, self.char, self.color
        for i, v in zip(where.tolist(), flat[where].tolist()):
            bits[i] |= v
            char[i] = None
            cell_color[i] = color

    def dashes(self, xs: Sequence[float], ys: Sequence[float | None], color: str) -> None:
        """A value held from each point to the next, drawn as ─ in every other cell."""
        pts = [(self.dx(x) >> 1, self.dy(y) >> 2) for x, y in zip(xs, ys) if y is not None and self.x0 <= x <= self.x1]
        for (c, r), nxt in zip(pts, pts[1:] + [None]):
            end = c + 1 if nxt is None else max(c + 1, nxt[0])
            for c_ in range(c, end):
                if c_ % 2 == 0:
                    self.put(c_, r, "─", color)

    def put(self, col: int, row: int, ch: str, color: str | None) -> None:
        if 0 <= col < self.cols and 0 <= row < self.rows:
            i = row * self.cols + col
            self.char[i], self.bits[i], self.color[i] = ch, 0, color

    def hline(self, y: float, color: str) -> int:
        r = self.dy(y) >> 2
        for c in range(self.cols):
            self.put(c, r, "─", color)
        return r

    def vline(self, x: float, color: str) -> int:
        c = self.dx(x) >> 1
        for r in range(self.rows):
            self.put(c, r, "│", color)
        return c

    def text(self, col: int, row: int, s: str, color: str | None) -> None:
        for i, ch in enumerate(s):
            self.put(col + i, row, ch, color)

    def cell(self, col: int, row: int) -> tuple[str, str | None]:
        i = row * self.cols + col
        ch = self.char[i]
        if ch is None:
            ch = chr(BRAILLE + self.bits[i]) if self.bits[i] else " "
        return ch, self.color[i]


Series = tuple[str, Sequence[float], Sequence[float | None], str, str]  # label, xs, ys, colour, 'line' | 'dash'
Row = list[tuple[str, str | None]]  # a chart's row: runs of (text, colour or None)


def draw(w: int, h: int, title: str, series: Iterable[Series], hlines=(), markers=(),
         x_range: tuple[float, float] | None = None) -> list[Row]:
    """The chart as h rows of (text, colour) runs, each row w cells: the title; the plot framed, y labels on
    its left (one a row: the value at that row), x labels under it (five); the legend in its top left corner.
    The y axis runs from 0 to 1.15 × the largest value (or hline) shown."""
    series = [(label, xs, ys, color, style) for label, xs, ys, color, style in series]
    if x_range is None:
        allx = [x for _, xs, ys, _, _ in series for x, y in zip(xs, ys) if y is not None]
        x_range = (min(allx), max(allx)) if allx else (0.0, 1.0)
    x0, x1 = x_range
    ymax = 0.0
    shown = []
    for label, xs, ys, color, style in series:
        vals = [y for x, y in zip(xs, ys) if y is not None and x0 <= x <= x1]
        if vals:
            ymax = max(ymax, max(vals))
            shown.append((label, xs, ys, color, style))
    hl = [(y, label, color) for y, label, color in hlines if y is not None]
    ymax = max([ymax] + [y for y, _, _ in hl])
    y0, y1 = 0.0, (ymax * 1.15 if ymax > 0 else 1.0)
    rows = h - 4
    yfmt = tick_format(y0, y1, rows)
    ylabels = [format(v, yfmt) for v in ticks(y0, y1, rows)]  # bottom row first
    lw = max(len(s) for s in ylabels)
    cols = w - lw - 2
    g = Grid(cols, rows, x0, x1, y0, y1)
    mk = [(g.vline(x, "magenta"), label) for x, label in markers if x0 <= x <= x1]
    hr = [(g.hline(y, color), label, color) for y, label, color in hl]
    for label, xs, ys, color, style in shown:
        (g.dashes if style == "dash" else g.line_np)(xs, ys, color)
    legend = [(f"{DASH_MARK if style == 'dash' else LINE_MARK} {label}", color)
              for label, _, _, color, style in shown if label]
    for r, label, color in hr:  # after the legend where it shares its row
        if label:
            i = rows - 1 - r
            g.text(1 + (len(legend[i][0]) + 1 if i < len(legend) else 0), r, label, color)
    for c, label in mk:
        g.text(c + 1, rows - 1, label, "magenta")
    for i, (s, color) in enumerate(legend):
        g.text(1, rows - 1 - i, s, color)
    if not shown:
        g.text(1, rows // 2, "waiting for data…", None)
    out: list[Row] = [[(_center(f"{title}", w), None)]]
    out.append([(" " * lw + "┌" + "─" * cols + "┐", None)])
    for r in range(rows - 1, -1, -1):
        line: Row = [(ylabels[r].rjust(lw) + "┤", None)]
        run: list[str] = []
        run_color: str | None = None
        for c in range(cols):
            ch, cc = g.cell(c, r)
            if cc != run_color and run:
                line.append(("".join(run), run_color))
                run = []
            run_color = cc
            run.append(ch)
        if run:
            line.append(("".join(run), run_color))
        line.append(("│", None))
        out.append(line)
    xt = ticks(x0, x1, 5)
    tick_cols = [g.dx(x) >> 1 for x in xt]  # the cells these x values are drawn in
    bottom = ["─"] * cols
    for c in tick_cols:
        bottom[c] = "┬"
    out.append([(" " * lw + "└" + "".join(bottom) + "┘", None)])
    labels = [" "] * w
    end = 0
    xfmt = tick_format(x0, x1, 5)
    for c, v in zip(tick_cols, xt):
        s = format(v, xfmt)
        start = min(w - len(s), max(end, lw + 1 + c - len(s) // 2))
        if start < end:
            continue
        labels[start:start + len(s)] = s
        end = start + len(s) + 1
    out.append([("".join(labels), None)])
    return out


def _center(s: str, w: int) -> str:
    n = cell_len(s)
    if n >= w:
        return s[:w]
    left = (w - n) // 2
    return " " * left + s + " " * (w - n - left)


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
        self.builds = 0

    def plot(self, key, series, hlines=(), markers=(), x_range=None) -> None:
        w, h = self.size.width, self.size.height
        if w < 20 or h < 5:
            return
        key = (key, w, h)
        if key == self._key:
            return  # nothing changed: no redraw
        self._key = key
        rows = draw(w, h, f"{self.title} [{self.unit}]", series, hlines, markers, x_range)
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
