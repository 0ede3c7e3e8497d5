"""The tests' layers keep their rules (tests/README.md): a unit test starts no process, no server and no app and
loads no model, so `pytest tests/unit` stays the seconds-long loop mutmut runs; every test module's name is unique
across the three folders (no __init__.py: pytest imports them by name)."""
import ast
from pathlib import Path

from conftest import SLOW_FIXTURES, SLOW_LIST

TESTS = Path(__file__).resolve().parents[1]
LAYERS = ("unit", "contract", "integration")
# what a unit test may not reach for: a process, a socket, a server, the app, a cluster
NOT_IN_UNIT = ("subprocess", "multiprocessing", "socket", "http.server", "textual", "tui.app", "ray",
               "engines.null_server", "engines.llama_cpp", "engines.mlx", "measure.sources.fleet",
               "measure.sources.http", "measure.control.live.start", "measure.control.bench.start")


def _imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def _arguments(tree: ast.AST) -> set[str]:
    return {a.arg for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name.startswith("test") for a in node.args.args}


def _unit_breaks(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bad = [m for m in _imports(tree) if any(m == n or m.startswith(n + ".") for n in NOT_IN_UNIT)]
    return [f"{path.name} imports {m}" for m in sorted(bad)] + [
        f"{path.name} takes the slow fixture {f}" for f in sorted(_arguments(tree) & SLOW_FIXTURES)]


def test_a_unit_test_starts_nothing_and_loads_no_model():
    files = sorted((TESTS / "unit").glob("test_*.py"))
    assert len(files) >= 10, files
    assert [b for f in files for b in _unit_breaks(f)] == []
    listed = [ln for ln in SLOW_LIST.read_text(encoding="utf-8").splitlines() if ln.startswith("tests/unit/")]
    assert listed == [], listed  # a unit test slow enough to list belongs in another layer


def test_the_rule_catches_what_it_names(tmp_path):
    planted = tmp_path / "test_planted.py"
    planted.write_text("import subprocess\nfrom textual.app import App\n\ndef test_x(model):\n    pass\n")
    assert _unit_breaks(planted) == ["test_planted.py imports subprocess", "test_planted.py imports textual.app",
                                     "test_planted.py takes the slow fixture model"]


def test_every_test_lives_in_a_layer_under_a_name_of_its_own():
    assert sorted(TESTS.glob("test_*.py")) == []  # none left at the root
    names = [f.name for layer in LAYERS for f in (TESTS / layer).glob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert not any((TESTS / layer / "__init__.py").exists() for layer in LAYERS)
