"""Issue 48's counts, each with its limit, in one table (LIMITS): `python tests/counts.py` prints every count and
exits 1 when one is over its limit, naming what is over; tests/contract/test_shape.py::test_the_counts runs the same.
Counted with ast where text would miscount (comments, docstrings, help text):

- import circles among measure/, engines/, presets/, tui/ (every import, those inside functions too);
- imports of another module's `_private` names (`from m import _name`, `m._name` after `import m`);
- modules over 850 lines; `getattr(args, …)` outside tui/; `engine ==/!= "…"` and `engine in (…)` (the issue's
  grep over measure/ and tui/); each trace kind's name as a string in the tree (at most once: in its class);
- file reads in measure/core (`open(`, `.open(`, `.read_text(`, `.stat()`, `.glob(`, `.rglob(`);
- `header.get(…)` / `header["…"]`; `dict[str, Any]` in tune (measure/control/tune*) and in measure/ (the
  issue's "206 in the tree" is measure/'s count);
- functions over 60 lines (unlisted), over 8 parameters (Unpack fields counted), parameters typed as anonymous
  tuples of 3+ items (tests/contract/test_shape.py's counting); modules of benchmarks/ that import tui.

Issue 60's: tui/cli.py's lines and its fan-out (the project modules it imports, those inside functions too);
`def free_port` in the whole tree (tests/ and benchmarks/ too); public names (module-level classes and functions)
defined in two modules or more, and those of them defined in both measure/core and measure/control; the Ray
actor classes (classes whose instances `ray.remote` makes: `ray.remote(C)`, or `ray.remote(p)` of a function's
parameter p that its callers give a class) and the modules that poll client actors (`….take.remote(`), each one
since the client-group seam (measure/machine/ray_cluster.py; 2 and 2 before it); `declared(plan.engine)` in measure/ and
tui/ where plan or self is a plan (once, in RunPlan.decl: a plan carries its engine's declaration; 6 before it).
"""
from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("measure", "engines", "presets", "tui")
TRACE_KINDS = ("mooncake", "bailian", "burstgpt", "azure")
READS = ("open", "read_text", "stat", "glob", "rglob")  # calls; `Path.open` and `open` alike
ENGINE_GREP = re.compile(r'\bengine (==|!=) "|\bengine in \(')
MAX_MODULE_LINES = 850
CLI = "tui.cli"  # the command line's entry: a thin parser (issue 60)

# count → its limit (issue 48's targets)
LIMITS: dict[str, int] = {
    "import circles (function-level imports counted)": 0,
    "imports of another module's _private names": 0,
    f"modules over {MAX_MODULE_LINES} lines": 0,
    "getattr(args outside tui/": 0,
    'engine ==/!= "…" and engine in (…) in measure/, tui/': 0,
    "most writes of one trace kind's name (once: in its class)": 1,
    "file reads in measure/core": 0,
    'header.get( / header["…"]': 0,
    "dict[str, Any] in tune": 5,
    "dict[str, Any] in measure/": 110,
    "functions over 60 lines not listed in test_shape.LONG": 0,
    "functions over 8 parameters not listed in test_shape.MANY": 0,
    "parameters typed as anonymous tuples of 3+ items": 0,
    "benchmarks/ modules importing tui": 0,
    # issue 60's
    "lines of tui/cli.py": 600,
    "project modules tui/cli.py imports (fan-out)": 20,
    "definitions of free_port (tests/ and benchmarks/ too)": 1,
    # issue 60's targets are 8 and 0, met; the 7 left: Endpoint, Knee, KneeLevel, get, load, main (three entry
    # points) and write_result
    "public names defined in two modules or more": 7,
    "public names defined in both measure/core and measure/control": 0,
    "Ray actor classes (classes whose instances ray.remote makes)": 1,
    "modules that poll client actors (….take.remote()": 1,
    "declared(plan.engine) in measure/, tui/ (once: RunPlan.decl, the declaration a plan carries)": 1,
}


@dataclass
class Count:
    value: int
    what: list[str] = field(default_factory=list)  # what makes it up, one line each


class Tree:
    """The package tree under `root` (PACKAGES), each module parsed once."""

    def __init__(self, root: Path, packages: tuple[str, ...] = PACKAGES):
        self.root = root
        self.modules: dict[str, Path] = {}  # dotted name → file
        for pkg in packages:
            for path in sorted((root / pkg).rglob("*.py")):
                parts = path.relative_to(root).with_suffix("").parts
                name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                self.modules[name] = path
        self._ast: dict[str, ast.Module] = {}

    def ast(self, name: str) -> ast.Module:
        if name not in self._ast:
            self._ast[name] = ast.parse(self.modules[name].read_text(encoding="utf-8"))
        return self._ast[name]

    def rel(self, name: str) -> str:
        return self.modules[name].relative_to(self.root).as_posix()

    def is_package(self, name: str) -> bool:
        return self.modules[name].name == "__init__.py"

    def under(self, *prefixes: str) -> Iterator[str]:
        return (m for m in self.modules if any(m == p or m.startswith(p + ".") for p in prefixes))

    def absolute(self, name: str, node: ast.ImportFrom) -> str:
        """The module an ImportFrom names, relative imports resolved from module `name`."""
        if not node.level:
            return node.module or ""
        base = name.split(".")
        base = base if self.is_package(name) else base[:-1]
        base = base[:len(base) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def imports(self, name: str) -> Iterator[tuple[str, str | None, int]]:
        """Each import of module `name` (anywhere in it): (the module imported, a name taken from it or None, line).
        `from p import m` where p.m is a module gives (p.m, None)."""
        for node in ast.walk(self.ast(name)):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name, None, node.lineno
            elif isinstance(node, ast.ImportFrom):
                mod = self.absolute(name, node)
                for alias in node.names:
                    sub = f"{mod}.{alias.name}"
                    yield (sub, None, node.lineno) if sub in self.modules else (mod, alias.name, node.lineno)


def _cycles(graph: dict[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """The strongly connected components of more than one module (or one importing itself), each as one
    shortest circle through its first module ([a, b, …, a]) and the component's modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def strong(v: str) -> None:  # Tarjan's, iterative
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        while work:
            node, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    out = []
    for comp in comps:
        if len(comp) == 1 and comp[0] not in graph[comp[0]]:
            continue
        start, members = comp[0], set(comp)
        prev: dict[str, str] = {}
        frontier, end = [start], None
        while frontier and end is None:  # breadth first inside the component, back to start
            nxt = []
            for u in frontier:
                for w in sorted(graph[u] & members):
                    if w == start:
                        end = u
                        break
                    if w not in prev:
                        prev[w] = u
                        nxt.append(w)
                if end is not None:
                    break
            frontier = nxt
        path = [start]
        u = end
        while u is not None and u != start:
            path.insert(1, u)
            u = prev.get(u)
        out.append((path + [start], comp))
    return out


def import_circles(tree: Tree) -> Count:
    graph: dict[str, set[str]] = {m: set() for m in tree.modules}
    for m in tree.modules:
        for target, _, _ in tree.imports(m):
            while target and target not in tree.modules:  # `import a.b.c` of a name inside a module: its module
                target = target.rpartition(".")[0]
            if target and target != m:
                graph[m].add(target)
    circles = _cycles(graph)
    return Count(len(circles), [" → ".join(path) + ("" if len(path) - 1 == len(comp) else
                                                    f"  (one circle of {len(comp)} modules: {', '.join(comp)})")
                                for path, comp in circles])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(tree: Tree) -> Count:
    what = []
    for m in tree.modules:
        for target, name, line in tree.imports(m):
            if name is not None and _private(name) and target in tree.modules and target != m:
                what.append(f"{tree.rel(m)}:{line}: from {target} import {name}")
        modules = {a.asname or a.name: a.name for n in ast.walk(tree.ast(m)) if isinstance(n, ast.Import)
                   for a in n.names if a.name in tree.modules}
        modules |= {a.asname or a.name: sub for n in ast.walk(tree.ast(m)) if isinstance(n, ast.ImportFrom)
                    for a in n.names if (sub := f"{tree.absolute(m, n)}.{a.name}") in tree.modules}
        for n in ast.walk(tree.ast(m)):  # `mod._name`, `pkg.mod._name` (a module's, not a package's)
            base = ast.unparse(n.value) if isinstance(n, ast.Attribute) and _private(n.attr) else None
            if base in modules and not tree.is_package(modules[base]):
                what.append(f"{tree.rel(m)}:{n.lineno}: {base}.{n.attr}")
    return Count(len(what), what)


def long_modules(tree: Tree) -> Count:
    what = [f"{tree.rel(m)}: {n} lines" for m in tree.modules
            if (n := len(tree.modules[m].read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    return Count(len(what), what)


def _calls(tree: Tree, modules: Iterator[str], match: Callable[[ast.Call], bool]) -> Count:
    what = [f"{tree.rel(m)}:{n.lineno}: {ast.unparse(n)[:80]}" for m in modules for n in ast.walk(tree.ast(m))
            if isinstance(n, ast.Call) and match(n)]
    return Count(len(what), what)


def getattr_args(tree: Tree) -> Count:
    return _calls(tree, (m for m in tree.modules if not m.startswith("tui")),
                  lambda c: isinstance(c.func, ast.Name) and c.func.id == "getattr" and bool(c.args)
                  and isinstance(c.args[0], ast.Name) and c.args[0].id == "args")


def engine_comparisons(tree: Tree) -> Count:
    what = [f"{tree.rel(m)}:{i}: {line.strip()[:80]}" for m in tree.under("measure", "tui")
            for i, line in enumerate(tree.modules[m].read_text(encoding="utf-8").splitlines(), 1)
            if ENGINE_GREP.search(line)]
    return Count(len(what), what)


def _docstrings(module: ast.Module) -> set[int]:
    return {id(n.body[0].value) for n in ast.walk(module)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def trace_kinds(tree: Tree) -> Count:
    """Each kind's name as a whole string constant (docstrings aside); the count is the most writes of one kind."""
    seen: dict[str, list[str]] = {k: [] for k in TRACE_KINDS}
    for m in tree.modules:
        docs = _docstrings(tree.ast(m))
        for n in ast.walk(tree.ast(m)):
            if isinstance(n, ast.Constant) and n.value in seen and id(n) not in docs:
                seen[n.value].append(f"{tree.rel(m)}:{n.lineno}")
    what = [f"{k}: {len(v)} ({', '.join(v)})" for k, v in seen.items() if len(v) > 1]
    return Count(max(len(v) for v in seen.values()), what)


def core_reads(tree: Tree) -> Count:
    return _calls(tree, tree.under("measure.core"),
                  lambda c: (isinstance(c.func, ast.Name) and c.func.id == "open")
                  or (isinstance(c.func, ast.Attribute) and c.func.attr in READS))


def _is_header(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "header") or \
        (isinstance(node, ast.Attribute) and node.attr == "header")


def header_reads(tree: Tree) -> Count:
    what = []
    for m in tree.modules:
        for n in ast.walk(tree.ast(m)):
            got = (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
                   and _is_header(n.func.value)) or \
                  (isinstance(n, ast.Subscript) and _is_header(n.value) and isinstance(n.slice, ast.Constant)
                   and isinstance(n.slice.value, str))
            if got:
                what.append(f"{tree.rel(m)}:{n.lineno}: {ast.unparse(n)[:80]}")
    return Count(len(what), what)


def _str_any(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        try:
            return any(_str_any(n) for n in ast.walk(ast.parse(node.value, mode="eval")))
        except SyntaxError:
            return False
    return isinstance(node, ast.Subscript) and isinstance(node.value, (ast.Name, ast.Attribute)) \
        and (getattr(node.value, "id", None) or getattr(node.value, "attr", None)) in ("dict", "Dict") \
        and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2 \
        and [ast.unparse(e) for e in node.slice.elts] in (["str", "Any"], ["str", "typing.Any"])


def str_any(tree: Tree, modules: Iterator[str]) -> Count:
    what = [f"{tree.rel(m)}:{n.lineno}" for m in modules for n in ast.walk(tree.ast(m)) if _str_any(n)]
    return Count(len(what), what)


def _is_tune(name: str) -> bool:
    return name.startswith("measure.control.tune")  # tune.py today, a package of its jobs after issue 48


def shape(tree: Tree) -> tuple[Count, Count, Count]:
    import test_shape as S

    old = S.ROOT
    S.ROOT = tree.root
    try:
        fns = list(S.functions())
    finally:
        S.ROOT = old
    long = [f"{n}: {lines} lines" for n, lines, _, _ in fns if lines > S.MAX_LINES and n not in S.LONG]
    many = [f"{n}: {k} parameters" for n, _, k, _ in fns if k > S.MAX_PARAMS and n not in S.MANY]
    tuples = [f"{n}: {t}" for n, _, _, ts in fns for t in ts]
    return Count(len(long), long), Count(len(many), many), Count(len(tuples), tuples)


def benchmarks_tui(root: Path) -> Count:
    what = []
    for path in sorted((root / "benchmarks").rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                [n.module or ""] if isinstance(n, ast.ImportFrom) and not n.level else []
            what += [f"{path.relative_to(root).as_posix()}:{n.lineno}: {x}" for x in names
                     if x == "tui" or x.startswith("tui.")]
    return Count(len(what), what)


def _targets(tree: Tree, name: str) -> set[str]:
    """The project modules module `name` imports (anywhere in it; `import a.b.c` of a name in a module: its module)."""
    out = set()
    for target, _, _ in tree.imports(name):
        while target and target not in tree.modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def cli_lines(tree: Tree) -> Count:
    if CLI not in tree.modules:
        return Count(0)
    return Count(len(tree.modules[CLI].read_text(encoding="utf-8").splitlines()), [tree.rel(CLI)])


def cli_fan_out(tree: Tree) -> Count:
    got = sorted(_targets(tree, CLI)) if CLI in tree.modules else []
    return Count(len(got), got)


def free_ports(root: Path) -> Count:
    what = []
    for path in sorted(p for d in (*PACKAGES, "tests", "benchmarks") for p in (root / d).rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "free_port":
                what.append(f"{path.relative_to(root).as_posix()}:{n.lineno}")
    return Count(len(what), what)


def homonyms(tree: Tree) -> tuple[Count, Count]:
    """Public module-level classes and functions by name: those defined in two modules or more, and those of them
    defined both in measure/core and in measure/control."""
    defs: dict[str, list[str]] = {}
    for m in tree.modules:
        for n in tree.ast(m).body:
            if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_"):
                defs.setdefault(n.name, []).append(m)
    twice = {k: v for k, v in sorted(defs.items()) if len(v) > 1}
    cross = {k: v for k, v in twice.items()
             if any(m.startswith("measure.core.") for m in v) and any(m.startswith("measure.control.") for m in v)}
    return (Count(len(twice), [f"{k}: {', '.join(v)}" for k, v in twice.items()]),
            Count(len(cross), [f"{k}: {', '.join(v)}" for k, v in cross.items()]))


def _ray_remote(node: ast.AST) -> str | None:
    """x of `ray.remote(x)` (an actor class made remote; `f.remote(…)`, an actor's method called, is not)."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "remote"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "ray" and len(node.args) == 1
            and isinstance(node.args[0], ast.Name)):
        return node.args[0].id
    return None


def _called(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def ray_actor_classes(tree: Tree) -> Count:
    """The classes of measure/ whose instances ray.remote makes: `ray.remote(C)`, or `ray.remote(p)` where p is a
    parameter of the function it is in and that function's callers give p a class."""
    modules = list(tree.under("measure"))
    classes = {n.name for m in modules for n in ast.walk(tree.ast(m)) if isinstance(n, ast.ClassDef)}
    made: dict[str, str] = {}
    passes: dict[str, int] = {}  # a function that makes actors of its parameter → that parameter's position
    for m in modules:
        for fn in ast.walk(tree.ast(m)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = [a.arg for a in fn.args.args]
            for n in ast.walk(fn):
                x = _ray_remote(n)
                if x in params:
                    passes[fn.name] = params.index(x)
                elif x in classes:
                    made.setdefault(x, f"{tree.rel(m)}:{getattr(n, 'lineno', 0)}")
    for m in modules:
        for n in ast.walk(tree.ast(m)):
            at = passes.get(_called(n) or "")
            args = n.args if isinstance(n, ast.Call) else []
            if at is not None and len(args) > at and isinstance(args[at], ast.Name) and args[at].id in classes:
                made.setdefault(args[at].id, f"{tree.rel(m)}:{getattr(n, 'lineno', 0)}")
    return Count(len(made), [f"{k}: {v}" for k, v in sorted(made.items())])


def actor_pollers(tree: Tree) -> Count:
    """The modules of measure/ that poll client actors: a call `….take.remote(…)`."""
    what = [tree.rel(m) for m in tree.under("measure") if any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "remote"
        and isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "take" for n in ast.walk(tree.ast(m)))]
    return Count(len(what), what)


def plan_lookups(tree: Tree) -> Count:
    """Calls `declared(plan.engine)` / `declared(self.engine)` in measure/ and tui/: the engine looked up by name
    where a plan (RunPlan.decl) carries its declaration (5 in measure/control/plan.py and 1 in tui/compare_cmd.py
    before it did)."""
    return _calls(tree, tree.under("measure", "tui"),
                  lambda c: isinstance(c.func, ast.Name) and c.func.id == "declared" and len(c.args) == 1
                  and isinstance(c.args[0], ast.Attribute) and c.args[0].attr == "engine"
                  and isinstance(c.args[0].value, ast.Name) and c.args[0].value.id in ("plan", "self"))


def measure(root: Path = ROOT) -> dict[str, Count]:
    """Every count of LIMITS over the tree at `root`."""
    tree = Tree(root)
    long, many, tuples = shape(tree)
    got = [import_circles(tree), private_imports(tree), long_modules(tree), getattr_args(tree),
           engine_comparisons(tree), trace_kinds(tree), core_reads(tree), header_reads(tree),
           str_any(tree, (m for m in tree.modules if _is_tune(m))), str_any(tree, tree.under("measure")),
           long, many, tuples, benchmarks_tui(root), cli_lines(tree), cli_fan_out(tree), free_ports(root),
           *homonyms(tree), ray_actor_classes(tree), actor_pollers(tree), plan_lookups(tree)]
    return dict(zip(LIMITS, got, strict=True))


def over(counts: dict[str, Count]) -> list[str]:
    """The names of the counts over their limits."""
    return [name for name, c in counts.items() if c.value > LIMITS[name]]


def main(argv: list[str] | None = None) -> int:
    verbose = "-v" in (argv if argv is not None else sys.argv[1:])
    counts = measure()
    bad = over(counts)
    for name, c in counts.items():
        print(f"{'OVER' if name in bad else 'ok  '} {c.value:5d} ≤ {LIMITS[name]:<4d} {name}")
        if verbose or name in bad:
            for line in c.what:
                print(f"             {line}")
    print(f"{len(bad)} of {len(counts)} counts over their limits" if bad else f"all {len(counts)} counts within limits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent / "contract"))  # test_shape (shape() imports it)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
