"""Plotext charts rendered into a Static: built on the main thread, only when their data changed."""
from __future__ import annotations

import plotext as plt
from rich.style import Style
from rich.text import Span, Text
from textual.widget import Widget


class Panel(Widget):
    """Text that changes often: render() returns it and an update only repaints this widget (a
    Static.update asks for a layout pass of the whole screen, which costs more than the drawing)."""

    def __init__(self, *, id: str | None = None):
        super().__init__(id=id)
        self._text: Text | str = ""

    def set_text(self, text: Text | str) -> None:
        if text != self._text:
            self._text = text
            self.refresh()

    def render(self):
        return self._text


def downsample(xs: list[float], ys: list, max_points: int) -> tuple[list[float], list]:
    """Every n-th point (the last always kept) so a series holds at most `max_points`."""
    if len(xs) <= max_points:
        return xs, ys
    step = -(-len(xs) // max_points)
    idx = list(range(0, len(xs), step))
    if idx[-1] != len(xs) - 1:
        idx.append(len(xs) - 1)
    return [xs[i] for i in idx], [ys[i] for i in idx]


class Chart(Panel):
    """One time-series chart. `series`: (label, xs, ys, color, style) with style 'line' or 'dash';
    `hlines`: (y, label, color); `markers`: (x, label) drawn as labelled vertical lines."""

    DEFAULT_CSS = "Chart { height: 1fr; }"

    def __init__(self, title: str, unit: str, **kw):
        super().__init__(**kw)
        self.title = title
        self.unit = unit
        self._key = None
        self.builds = 0

    def plot(self, key, series, hlines=(), markers=(), x_range=None) -> None:
        w, h = self.size.width, self.size.height
        if w < 20 or h < 5:
            return
        key = (key, w, h)
        if key == self._key:
            return  # nothing changed: no redraw
        self._key = key
        self.set_text(self._build(w, h, series, hlines, markers, x_range))
        self.builds += 1

    def _build(self, w, h, series, hlines, markers, x_range) -> Text:
        plt.clf()
        plt.plotsize(w, h)
        plt.theme("clear")
        plt.title(f"{self.title} [{self.unit}]")
        ymax = 0.0
        any_data = False
        for label, xs, ys, color, style in series:
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
            if not pts:
                continue
            any_data = True
            px, py = downsample([p[0] for p in pts], [p[1] for p in pts], max(10, w // 2))
            ymax = max(ymax, max(py))
            if style == "dash":
                px, py = downsample(px, py, max(5, w // 4))
                plt.scatter(px, py, label=label, color=color, marker="─")
            else:
                plt.plot(px, py, label=label, color=color, marker="braille")
        for y, label, color in hlines:
            if y is None:
                continue
            plt.hline(y, color)
            ymax = max(ymax, y)
            if x_range:
                plt.text(label, x_range[0] + 0.02 * (x_range[1] - x_range[0]), y, color=color, alignment="left")
        if x_range:
            plt.xlim(*x_range)
            for x, label in markers:
                if x_range[0] <= x <= x_range[1]:
                    plt.vline(x, "magenta")
                    plt.text(label, x, ymax * 1.08 if ymax else 1, color="magenta")
        plt.ylim(0, ymax * 1.15 if ymax else 1)
        if not any_data:
            plt.text("waiting for data…", x_range[0] if x_range else 0, 0.5)
        return _figure_text()


_STYLES: dict[tuple, Style | None] = {}  # plotext's (color, style, background) of a cell → the Rich style


def _cell_style(key: tuple) -> Style | None:
    """The Rich style Text.from_ansi gives a cell plotext colours with `key`: decoded once per colour."""
    if key not in _STYLES:
        spans = Text.from_ansi(plt._utility.colors_to_ansi(*key) + "x").spans
        style = spans[0].style if spans else None
        _STYLES[key] = style if isinstance(style, Style) else None  # decoded ANSI: always a Style
    return _STYLES[key]


def _figure_text() -> Text:
    """The figure plt.build() would draw, as the Text that Text.from_ansi(plt.build()) makes, read from plotext's
    cell matrix: plotext's own ANSI canvas (a string concatenated cell by cell) and Rich decoding it again were
    about a fifth of a chart's cost. Falls back to that path where plotext's matrix is not where this reads it."""
    fig = plt._core._figure  # the figure plt.* draws on
    try:
        fig._set_sizes()
        fig._build_matrix()
        m = fig.monitor.matrix
        rows, cols = m.rows, m.cols
        marker, fg, st, bg = m.marker, m.fullground, m.style, m.background
    except AttributeError:  # another plotext
        return Text.from_ansi(plt.build())
    lines: list[str] = []
    spans: list[Span] = []
    pos = 0
    for r in range(rows - 1, -1, -1):  # plotext's row 0 is the bottom one
        line = "".join(marker[r])
        if len(line) != cols:  # a marker wider than one character: leave it to plotext's canvas
            return Text.from_ansi(plt.build())
        keys = list(zip(fg[r], st[r], bg[r]))
        c = 0
        while c < cols:
            key = keys[c]
            e = c + 1
            while e < cols and keys[e] == key:
                e += 1
            style = _cell_style(key)
            if style is not None:
                spans.append(Span(pos + c, pos + e, style))
            c = e
        lines.append(line)
        pos += cols + 1
    lines.append("")  # the canvas ends with a newline, which Text.from_ansi keeps as an empty last line
    return Text("\n".join(lines), spans=spans, tab_size=8)
