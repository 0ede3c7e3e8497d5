"""benchmarks/mutation.py's scope agrees with pyproject's [tool.mutmut] and with the code: the modules mutated are the
same in both, every test file mutmut runs exists, and every glob of a module's scope names a function or method the
module defines (a renamed function would otherwise drop out of the score without a word)."""
from __future__ import annotations

import ast
import fnmatch
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import mutation as M  # noqa: E402


def _mutmut() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]


def _names(path: Path) -> list[str]:
    """The names mutmut gives a module's functions and methods: x_NAME, xǁCLASSǁNAME."""
    tree = ast.parse(path.read_text())
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(f"x_{node.name}__mutmut_1")
        elif isinstance(node, ast.ClassDef):
            out += [f"xǁ{node.name}ǁ{f.name}__mutmut_1" for f in node.body
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return out


def test_the_modules_mutated_are_the_same_in_both() -> None:
    assert sorted(_mutmut()["only_mutate"]) == sorted(M.MODULES) == sorted(M.SCOPE)  # type: ignore[arg-type]


def test_every_test_file_mutmut_runs_exists() -> None:
    for rel in _mutmut()["pytest_add_cli_args_test_selection"]:  # type: ignore[union-attr]
        assert (ROOT / str(rel)).is_file(), rel


def test_every_glob_names_a_function_of_its_module() -> None:
    for module, globs in M.SCOPE.items():
        names = _names(ROOT / module)
        for g in globs:
            assert any(fnmatch.fnmatchcase(n, g) for n in names), f"{module}: {g} names nothing there"
