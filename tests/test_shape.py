"""Issue 32 item 4: short functions. At most 5 functions over 60 lines in the package tree (each listed in LONG
with why it stays long) and none with more than 8 parameters (self and cls not counted; *args and **kwargs count
one each), but those in MANY with why. The counting is tools' usual one (ast: def line to last line)."""
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES, MAX_PARAMS, MAX_LONG = 60, 8, 5

# functions allowed over 60 lines: "path:name" → why (at most MAX_LONG)
LONG: dict[str, str] = {}
# functions allowed over 8 parameters: "path:name" → why
MANY: dict[str, str] = {}
# Files left out of the count (none: the whole package tree is counted)
OTHERS: set[str] = set()


def functions():
    for path in sorted(ROOT.glob("*/**/*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("tests/", "benchmarks/", ".venv", "build/")) or rel in OTHERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                if (a.posonlyargs + a.args)[:1] and (a.posonlyargs + a.args)[0].arg in ("self", "cls"):
                    n -= 1
                yield f"{rel}:{node.name}", node.end_lineno - node.lineno + 1, n


def test_functions_are_short():
    long = {name: lines for name, lines, _ in functions() if lines > MAX_LINES}
    assert set(long) <= set(LONG), f"over {MAX_LINES} lines without a reason in LONG: {set(long) - set(LONG)}"
    assert len(LONG) <= MAX_LONG


def test_no_function_takes_more_than_eight_parameters():
    many = {name: n for name, _, n in functions() if n > MAX_PARAMS}
    assert set(many) <= set(MANY), f"over {MAX_PARAMS} parameters without a reason in MANY: {set(many) - set(MANY)}"


def test_the_count_sees_a_long_function_and_many_parameters(tmp_path, monkeypatch):
    """The counting itself, on a hand-made file: 61 lines and 9 parameters (self not counted, **kw one)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    (pkg / "m.py").write_text(f"def long(a):\n{body}\n    return x0\n\n\nclass C:\n"
                              "    def many(self, a, b, c, d, e, f, g, h, **kw):\n        pass\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    got = {name: (lines, n) for name, lines, n in functions()}
    assert got == {"pkg/m.py:long": (61, 1), "pkg/m.py:many": (2, 9)}
