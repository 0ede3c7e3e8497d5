"""Issue 32 item 4, issue 48 item 4: short functions. At most 5 functions over 60 lines in the package tree (each
listed in LONG with why it stays long) and none with more than 8 parameters (self and cls not counted; *args
counts one; **kwargs counts one, or the fields of its TypedDict when typed `**kw: Unpack[SomeTypedDict]`), but
those in MANY with why. No parameter is typed as an anonymous tuple of 3 or more items (`tuple[int, str, float]`,
also inside `list[…]` or `… | None`): a NamedTuple or dataclass names its parts. The counting is tools' usual one
(ast: def line to last line). The issue's other counts are tests/counts.py's, run here by test_the_counts."""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES, MAX_PARAMS, MAX_LONG, MAX_TUPLE = 60, 8, 5, 2

# functions allowed over 60 lines: "path:name" → why (at most MAX_LONG)
LONG: dict[str, str] = {}
# functions allowed over 8 parameters: "path:name" → why
MANY: dict[str, str] = {}
# Files left out of the count (none: the whole package tree is counted)
OTHERS: set[str] = set()


def trees() -> dict[str, ast.Module]:
    """The package tree's modules, parsed: "path" → ast."""
    out = {}
    for path in sorted(ROOT.glob("*/**/*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("tests/", "benchmarks/", ".venv", "build/")) or rel in OTHERS:
            continue
        out[rel] = ast.parse(path.read_text())
    return out


def typed_dicts(modules: dict[str, ast.Module]) -> dict[str, int]:
    """Each TypedDict class of the tree by name → its number of fields (its TypedDict bases' fields counted)."""
    classes = {n.name: n for tree in modules.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}

    def base_names(c: ast.ClassDef) -> list[str]:
        return [b.id if isinstance(b, ast.Name) else b.attr for b in c.bases
                if isinstance(b, (ast.Name, ast.Attribute))]

    def is_td(name: str, seen: frozenset[str] = frozenset()) -> bool:
        c = classes.get(name)
        return c is not None and name not in seen and any(
            b == "TypedDict" or is_td(b, seen | {name}) for b in base_names(c))

    def count(name: str) -> int:
        c = classes[name]
        own = sum(isinstance(s, ast.AnnAssign) for s in c.body)
        return own + sum(count(b) for b in base_names(c) if b != "TypedDict" and is_td(b))

    return {name: count(name) for name in classes if is_td(name)}


def _annotation(node: ast.expr | None) -> ast.expr | None:
    """An annotation as an expression; a quoted one parsed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    return node


def _name(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def unpacked(kwarg: ast.arg | None, fields: dict[str, int]) -> int | None:
    """The fields of `**kw: Unpack[SomeTypedDict]` (None: not typed so, or a TypedDict not in the tree)."""
    ann = _annotation(kwarg.annotation) if kwarg else None
    if isinstance(ann, ast.Subscript) and _name(ann.value) == "Unpack":
        inner = _name(ann.slice)
        return fields.get(inner) if inner else None
    return None


def anonymous_tuples(annotation: ast.expr | None) -> list[str]:
    """The `tuple[a, b, c, …]` (3+ items, no `...`) anywhere in one annotation, as written."""
    ann = _annotation(annotation)
    if ann is None:
        return []
    return [ast.unparse(n) for n in ast.walk(ann)
            if isinstance(n, ast.Subscript) and _name(n.value) in ("tuple", "Tuple") and isinstance(n.slice, ast.Tuple)
            and len(n.slice.elts) > MAX_TUPLE
            and not any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in n.slice.elts)]


def defs(node: ast.AST, prefix: str = ""):
    """Each function under `node` with its qualified name (Class.method, outer.inner)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = prefix + child.name
            if not isinstance(child, ast.ClassDef):
                yield name, child
            yield from defs(child, name + ".")
        else:
            yield from defs(child, prefix)


def functions():
    """Each function of the tree: "path:qualified name", its lines, its parameters, its parameters typed as
    anonymous tuples."""
    modules = trees()
    fields = typed_dicts(modules)
    for rel, tree in modules.items():
        for qual, node in defs(tree):
            a = node.args
            positional = a.posonlyargs + a.args
            n = len(positional) + len(a.kwonlyargs) + bool(a.vararg)
            if positional[:1] and positional[0].arg in ("self", "cls"):
                n -= 1
            if a.kwarg:
                kw = unpacked(a.kwarg, fields)
                n += 1 if kw is None else kw
            every = positional + a.kwonlyargs + [p for p in (a.vararg, a.kwarg) if p]
            tuples = [f"{p.arg}: {t}" for p in every for t in anonymous_tuples(p.annotation)]
            yield f"{rel}:{qual}", node.end_lineno - node.lineno + 1, n, tuples


def test_functions_are_short():
    long = {name: lines for name, lines, _, _ in functions() if lines > MAX_LINES}
    assert set(long) <= set(LONG), f"over {MAX_LINES} lines without a reason in LONG: {set(long) - set(LONG)}"
    assert len(LONG) <= MAX_LONG


def test_no_function_takes_more_than_eight_parameters():
    many = {name: n for name, _, n, _ in functions() if n > MAX_PARAMS}
    assert set(many) <= set(MANY), f"over {MAX_PARAMS} parameters without a reason in MANY: {many}"


def test_no_parameter_is_an_anonymous_tuple():
    bad = {name: tuples for name, _, _, tuples in functions() if tuples}
    assert bad == {}, f"parameters typed as anonymous tuples of {MAX_TUPLE + 1}+ items (name their parts): {bad}"


def test_the_count_sees_a_long_function_and_many_parameters(tmp_path, monkeypatch):
    """The counting itself, on a hand-made file: 61 lines and 9 parameters (self not counted, **kw one), an
    Unpack of a 3-field TypedDict (one field inherited) counted as 3, and anonymous tuples of 3 items found bare,
    quoted, inside list[…] and `| None`, while pairs and tuple[int, ...] pass."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    (pkg / "m.py").write_text(f"def long(a):\n{body}\n    return x0\n\n\nclass C:\n"
                              "    def many(self, a, b, c, d, e, f, g, h, **kw):\n        pass\n")
    (pkg / "u.py").write_text(
        "from typing import TypedDict, Unpack\n\n\nclass Base(TypedDict):\n    x: int\n\n\n"
        "class More(Base, total=False):\n    y: int\n    z: str\n\n\n"
        "def seven(a, b, c, d, e, f, **kw: Unpack[More]):\n    pass\n\n\n"
        "def six(a, b, c, d, e, **kw: 'Unpack[More]'):\n    pass\n\n\n"
        "def bare(t: tuple[int, str, float], q: 'tuple[int, int, int]', ok: tuple[int, int], v: tuple[int, ...]):\n"
        "    pass\n\n\n"
        "def inside(s: list[tuple[float, float, int]], o: tuple[str, int, int] | None = None):\n    pass\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    got = {name: (lines, n, tuples) for name, lines, n, tuples in functions()}
    assert got == {"pkg/m.py:long": (61, 1, []), "pkg/m.py:C.many": (2, 9, []),
                   "pkg/u.py:seven": (2, 9, []), "pkg/u.py:six": (2, 8, []),
                   "pkg/u.py:bare": (2, 4, ["t: tuple[int, str, float]", "q: tuple[int, int, int]"]),
                   "pkg/u.py:inside": (2, 2, ["s: tuple[float, float, int]", "o: tuple[str, int, int]"])}


def test_the_counts():
    """Issue 48's counts (tests/counts.py), each within its limit in counts.LIMITS."""
    import counts

    got = counts.measure()
    bad = {name: [f"{got[name].value} > {counts.LIMITS[name]}"] + got[name].what[:20] for name in counts.over(got)}
    assert bad == {}, "\n".join(f"{name}: " + "\n    ".join(lines) for name, lines in bad.items())


PLANTED = {  # one of each thing tests/counts.py counts, in a hand-made tree
    "measure/__init__.py": "",
    "measure/core/__init__.py": "",
    "measure/core/a.py": "from typing import Any\n\n\ndef f(args, engine, header, p):\n"
                         "    if engine == \"llama\":\n        return getattr(args, 'x', None)\n"
                         "    d: dict[str, Any] = {'k': header.get('x'), 'j': header['y']}\n"
                         "    return open(p), p.read_text(), p.stat(), p.glob('*'), d\n",
    "measure/core/b.py": "from measure.core.c import _hidden\n\n\ndef g():\n    from measure.core import a\n"
                         "    return a, _hidden\n",
    "measure/core/c.py": "import measure.core.b\n\n_hidden = 1\n\n\ndef h():\n    return measure.core.b._x\n",
    "measure/core/tr.py": "\"\"\"mooncake\"\"\"\n\n\nclass Mooncake:\n    name = \"mooncake\"\n\n\n"
                          "KINDS = (\"mooncake\", \"azure\")\n",
    "measure/control/__init__.py": "",
    "measure/control/tune.py": "from typing import Any\n\nX: dict[str, Any] = {}\n\n\ndef f():\n    return X\n\n\n"
                               "def free_port():\n    return 0\n\n\ndef d(plan):\n    return declared(plan.engine), declared(plan)\n",
    "tui/__init__.py": "",
    "tui/cli.py": "def main(args):\n    from measure.core import a, b\n    return getattr(args, 'x'), a, b\n",
    "engines/__init__.py": "class Row:\n    pass\n",
    "presets/__init__.py": "",
    "benchmarks/b.py": "import tui.cli\n\n\ndef run():\n    from tui import cli\n    return cli\n\n\n"
                       "def free_port():\n    return 1\n",
    "tests/t.py": "class Row:\n    pass\n",
    "measure/machine/r.py": "class A:\n    pass\n\n\nclass B:\n    pass\n\n\ndef place(ray, cls):\n"
                            "    return ray.remote(cls)\n\n\ndef go(ray, a):\n    place(ray, A)\n"
                            "    return ray.remote(B), a.take.remote(), a.clock.remote(a)\n",
}


def test_the_counts_see_each_planted_thing(tmp_path):
    """Each counter on a hand-made tree: one circle (b ↔ c; b's import of a inside g adds none), private names
    imported two ways (`from c import _hidden`, `measure.core.b._x`), getattr(args outside tui/ only, one engine
    comparison, "mooncake" written twice (in its class and in a tuple; the docstring not counted), four file
    reads, two header reads, dict[str, Any] once in tune and twice in measure/, a module over the lines, tui
    imported twice by benchmarks/ (at the top and in a function); tui/cli.py's 3 lines and its 2 project imports
    (inside its function), free_port defined twice (tune.py, benchmarks/), and `f` defined in measure/core and in
    measure/control: a homonym across them (tests/ not in the tree: its Row is not engines' Row's second); two Ray
    actor classes (A through place's parameter, B given to ray.remote; `a.clock.remote(a)` is a method's call),
    one module polling actors and one engine looked up by a plan's name (`declared(plan)` is not)."""
    import counts

    for rel, text in PLANTED.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "measure/core/big.py").write_text("x = 1\n" * (counts.MAX_MODULE_LINES + 1))
    got = {name: c.value for name, c in counts.measure(tmp_path).items()}
    assert got == dict(zip(counts.LIMITS, [1, 2, 1, 1, 1, 2, 4, 2, 1, 2, 0, 0, 0, 2, 3, 2, 2, 1, 1, 2, 1, 1],
                                          strict=True))
    circles = counts.import_circles(counts.Tree(tmp_path)).what
    assert circles == ["measure.core.b → measure.core.c → measure.core.b"]
    assert counts.over(counts.measure(tmp_path)) == [name for name, limit in counts.LIMITS.items()
                                                     if got[name] > limit]


def test_the_counter_finds_a_circle_only_a_function_level_import_closes(tmp_path):
    """x imports y at its top; y imports x only inside a function: a circle all the same."""
    import counts

    (tmp_path / "measure").mkdir()
    (tmp_path / "measure/__init__.py").write_text("")
    (tmp_path / "measure/x.py").write_text("from measure import y\n")
    (tmp_path / "measure/y.py").write_text("def f():\n    from . import x\n    return x\n")
    assert counts.import_circles(counts.Tree(tmp_path)).what == ["measure.x → measure.y → measure.x"]
    (tmp_path / "measure/y.py").write_text("def f():\n    return 1\n")
    assert counts.import_circles(counts.Tree(tmp_path)).value == 0


def test_the_count_script_runs_and_fails_when_a_count_is_over():
    """`python tests/counts.py` prints every count with its limit; its exit status says whether one is over."""
    import counts

    out = subprocess.run([sys.executable, str(ROOT / "tests" / "counts.py")], capture_output=True, text=True,
                         cwd=ROOT)
    lines = [line for line in out.stdout.splitlines() if line[:4] in ("ok  ", "OVER")]
    assert [line.split(None, 4)[-1] for line in lines] == list(counts.LIMITS)
    assert out.returncode == (1 if any(line.startswith("OVER") for line in lines) else 0), out.stdout + out.stderr


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, stack = {start}, [start]
    while stack:
        for w in graph[stack.pop()] - seen:
            seen.add(w)
            stack.append(w)
    return seen


def test_the_circle_finder_reports_each_circle_once_as_a_real_path():
    """counts._cycles on random graphs: one entry per set of modules that reach each other (more than one), its
    path a circle of real imports inside that set (by brute force: v and w together when each reaches the other)."""
    from hypothesis import given, settings, strategies as st

    import counts

    nodes = [f"m{i}" for i in range(7)]

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(nodes), st.sampled_from(nodes)), max_size=14))
    def check(edges):
        graph = {v: {b for a, b in edges if a == v and b != v} for v in nodes}
        reach = {v: _reach(graph, v) for v in nodes}
        comps = {frozenset(w for w in nodes if w in reach[v] and v in reach[w]) for v in nodes}
        got = counts._cycles(graph)
        assert {frozenset(comp) for _, comp in got} == {c for c in comps if len(c) > 1}
        for path, comp in got:
            assert path[0] == path[-1] and set(path) <= set(comp)
            assert all(b in graph[a] for a, b in zip(path, path[1:]))

    check()
