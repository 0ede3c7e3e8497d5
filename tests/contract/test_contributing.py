"""CONTRIBUTING.md's recipes name files that exist (issue 60 item 2: it named the wrong files for adding an engine):
every repository path it writes in backquotes, and every `folder/file.ext` it names, is there."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
PATH = re.compile(r"(?<![\w./-])((?:engines|measure|presets|tui|tests|benchmarks|build-aux|docs)/[\w./-]*\w)")


def named_paths(text: str) -> set[str]:
    out = set()
    for p in PATH.findall(text):
        if "NAME" in p or "X." in p:  # a placeholder: engines/NAME.py, tests/test_X.py
            continue
        out.add(p)
    return out


def test_every_path_contributing_names_exists():
    names = named_paths(TEXT)
    assert len(names) >= 20, names
    missing = sorted(p for p in names if not (ROOT / p).exists())
    assert missing == [], f"CONTRIBUTING.md names what is not in the tree: {missing}"


def test_the_engine_recipe_names_the_declaration_and_the_registry():
    recipe = TEXT[TEXT.index("**A new engine**"):TEXT.index("**A new chip preset**")]
    assert "EngineDecl" in recipe and "engines/registry.py" in recipe and "engines/spec.py" in recipe
    from engines.registry import ENGINES
    from engines.spec import EngineDecl

    assert all(isinstance(d, EngineDecl) for d in ENGINES.values())


def test_a_wrong_path_is_caught():
    assert named_paths("see `engines/nothere.py` and tests/test_X.py") == {"engines/nothere.py"}


def table_rows(text: str) -> dict[str, set[str]]:
    """The layout table: each row's folder → the files it names (backquoted `name.py`, `name.tcss`, `name.sh`), each
    in the sub-folder the row named last before it (`live/` (`controller.py` …)), else in the folder itself."""
    rows: dict[str, set[str]] = {}
    for folder, rest in re.findall(r"^\| `([\w/-]+/)` \|(.*)\|\s*$", text, flags=re.M):
        sub, found = "", set()
        for token in re.findall(r"`([\w-]+/|[\w-]+\.(?:py|tcss|sh))`", rest):
            if token.endswith("/"):
                sub = token
                continue
            found.add(folder + sub + token if (ROOT / folder / sub / token).exists() else folder + token)
        rows[folder] = found
    return rows


def test_every_file_the_layout_table_names_exists_and_every_module_is_named():
    rows = table_rows(TEXT)
    names = set().union(*rows.values())
    assert len(names) >= 60, len(names)
    missing = sorted(p for p in names if not (ROOT / p).exists())
    assert missing == [], f"CONTRIBUTING.md's layout table names what is not in its folder: {missing}"
    unnamed = sorted(str(p.relative_to(ROOT)) for folder in rows if rows[folder]  # a row naming no file: a folder
                     for p in (ROOT / folder).rglob("*.py")
                     if p.name != "__init__.py" and str(p.relative_to(ROOT)) not in names
                     and not any(str(p.relative_to(ROOT)).startswith(f) for f in rows if f != folder and f.startswith(folder)))
    assert unnamed == [], f"modules the layout table does not name: {unnamed}"
