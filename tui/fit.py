"""Text fitted to the room a panel has: a line wider than its panel is broken at a separator (" · ", ", "), else at a
space that does not follow a figure (a number keeps its label and unit: "p50 12.0 ms"), never inside a number;
a panel shorter than its lines keeps its most important ones (each line has a rank, 0 the most important); a row
of parts (the header's) too wide for its line leaves out its least important parts. Pure functions of Rich Text:
tui/panels.py renders with them, tests/integration/test_screen_sizes.py holds them."""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from rich.cells import cell_len
from rich.text import Text

INDENT = "  "  # a wrapped line's continuation
SEPARATORS = (" · ", ", ", "; ")


def _breaks(plain: str) -> list[tuple[int, int, int]]:
    """Where a line may break: (end of this line, start of the next, kind); kind 0 at a separator, 1 at a space
    outside parentheses, 2 at a space inside them. No break after a word that ends in a digit ("p50 12.0 ms")
    but before a parenthesis ("1.0 (asked 1)"), or before a word that starts with one."""
    out: list[tuple[int, int, int]] = []
    depth = 0
    i = 0
    while i < len(plain):
        ch = plain[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        sep = next((s for s in SEPARATORS if plain.startswith(s, i)), None)
        if sep is not None and i > 0:
            end = i + (1 if sep[0] in ",;" else 0)  # a comma stays on its line, a "·" goes with the break
            out.append((end, i + len(sep), 0))
            i += len(sep)
            continue
        if ch == " " and 0 < i < len(plain) - 1 and (not plain[i - 1].isdigit() or plain[i + 1] == "(") \
                and not plain[i + 1].isdigit() and plain[i - 1] != " " and plain[i + 1] not in " )":
            out.append((i, i + 1, 2 if depth else 1))
        i += 1
    return out


def wrap(line: Text, width: int | None, indent: str = INDENT) -> list[Text]:
    """The line as lines of at most `width` cells (None: as it is). A break goes at the rightmost separator
    that fits, else at the rightmost space allowed (_breaks); only a word wider than the whole line is cut, and
    then every character goes on (nothing is lost). Continuation lines start with `indent`."""
    if width is None or cell_len(line.plain) <= width:
        return [line]
    cuts = _cuts(line.plain, width, cell_len(indent))
    return [line[a:b] if i == 0 else Text(indent, style=line.style) + line[a:b] for i, (a, b) in enumerate(cuts)]


@lru_cache(maxsize=1024)  # most of a panel's lines are the same from one second to the next
def _cuts(plain: str, width: int, indent: int) -> tuple[tuple[int, int], ...]:
    """Where wrap() cuts `plain`: each line's (start, end) in it."""
    at = [0]  # the cells before each index
    for ch in plain:
        at.append(at[-1] + cell_len(ch))
    breaks = [b for b in _breaks(plain) if b[0] > 0]
    out: list[tuple[int, int]] = []
    pos, room = 0, width
    while at[-1] - at[pos] > room:
        fits = [b for b in breaks if b[0] > pos and at[b[0]] - at[pos] <= room]
        best = None
        for kind in (0, 1, 2):
            cands = [b for b in fits if b[2] == kind]
            if cands and (kind == 2 or (at[cands[-1][0]] - at[pos]) * 3 >= room):  # not a stub of a line
                best = cands[-1]
                break
        if best is None and fits:
            best = fits[-1]
        if best is None:  # one word wider than the line: cut at the width
            cut = next(i for i in range(pos + 1, len(plain) + 1) if at[i] - at[pos] > room) - 1
            best = (max(cut, pos + 1), max(cut, pos + 1), 3)
        out.append((pos, best[0]))
        pos, room = best[1], width - indent
    if plain[pos:].strip():
        out.append((pos, len(plain)))
    return tuple(out)


def _index_at(plain: str, cells: int) -> int:
    """The index of the first character past `cells` cells."""
    n = 0
    for i, ch in enumerate(plain):
        n += cell_len(ch)
        if n > cells:
            return i
    return len(plain)


def fit_lines(lines: Sequence[tuple[int, Text]], width: int | None = None, rows: int | None = None) -> Text:
    """Ranked lines (rank, text) as one Text: each wrapped to `width`; where they take more than `rows` rows, the
    least important (the highest rank, the later first among equals) are left out until they fit, and the rest
    keep their order. None: no limit."""
    wrapped = [(rank, [w for part in t.split("\n", allow_blank=True) for w in wrap(part, width)]) for rank, t in lines]
    if rows is not None:
        keep = [True] * len(wrapped)
        total = sum(len(w) for _, w in wrapped)
        for i in sorted(range(len(wrapped)), key=lambda i: (-wrapped[i][0], -i)):
            if total <= rows:
                break
            if wrapped[i][0] == 0 and total - len(wrapped[i][1]) < rows:
                continue  # a first-rank line is left out only where nothing else would do
            keep[i] = False
            total -= len(wrapped[i][1])
        wrapped = [w for w, k in zip(wrapped, keep) if k]
    out = Text()
    parts = [t for _, ws in wrapped for t in ws]
    if rows is not None:
        parts = parts[:max(rows, 0)]
    for i, t in enumerate(parts):
        if i:
            out.append("\n")
        out.append_text(t)
    return out


def fit_parts(parts: Sequence[tuple[int, Text]], width: int | None) -> Text:
    """Parts of one line (rank, text; each with its own separator before it): where they are wider than `width`,
    the least important (highest rank, the later first) are left out until the line fits; a line still too wide
    ends in "…" (only a name is that long: the parts a figure is in are ranked above it)."""
    keep = list(parts)

    def joined(ps: Sequence[tuple[int, Text]]) -> Text:
        out = Text()
        for _, t in ps:
            out.append_text(t)
        return out

    line = joined(keep)
    while width is not None and cell_len(line.plain) > width and len(keep) > 1:
        worst = max(range(len(keep)), key=lambda i: (keep[i][0], i))
        if keep[worst][0] == 0:
            break
        del keep[worst]
        line = joined(keep)
    if width is not None and cell_len(line.plain) > width:
        line = line[:_index_at(line.plain, width - 1)]
        line.append("…")
    return line
