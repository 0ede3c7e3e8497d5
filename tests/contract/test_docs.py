"""The repo's design page is the one cited: no file points outside the repo for a definition, and every
"docs/design.md §N" names a section that exists (docs/design/shape.md). Measured figures live in
docs/measurements.md, each section with its commit; every "docs/measurements.md §N" names a section there, and
the README (a guide of at most 400 lines) and the design page carry no dated run."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"  # the index of the pages
PAGES = ROOT / "docs" / "design"
PAGE_CITE = re.compile(r"docs/design/([a-z0-9-]+)\.md")
MEASUREMENTS = ROOT / "docs" / "measurements.md"
README = ROOT / "README.md"
# spelt in pieces so this file does not match itself
OUTSIDE = ("shared/" + "DESIGN", "../" + "shared", "DESIGN " + "section", "DESIGN " + "§")
CITE = re.compile(r"docs/design\.md`?\s*(?:§|section\s+)(\d+)")
MCITE = re.compile(r"docs/measurements\.md`?\s*(?:§|section\s+)(\d+)")
DATED = re.compile(r"Dec [0-9]|quiet box|load average")  # a dated run's marks: it belongs in docs/measurements.md


SKIP_DIRS = {".git", ".venv", "__pycache__", "build", "out", ".pytest_cache", ".hypothesis"}


def tracked_text_files() -> list[Path]:
    """git's tracked files; in a copy without .git, every file outside the ignored folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                 if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts) and ".egg-info" not in str(p)]
    files = []
    for name in names:
        p = ROOT / name
        if p.is_file() and p.suffix not in (".gguf", ".png", ".svg", ".ambr", ".jsonl"):
            files.append(p)
    return files


def design_sections(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"^## (\d+)\. \S", text, flags=re.M)}


def citations(text: str, cite: re.Pattern[str] = CITE) -> list[int]:
    return [int(n) for n in cite.findall(text)]


def _read(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return ""


def test_no_file_cites_the_shared_notes_outside_the_repo():
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
           for p in tracked_text_files() if p.name != "test_docs.py"
           for i, line in enumerate(_read(p).splitlines(), 1) if any(s in line for s in OUTSIDE)]
    assert bad == [], "cite docs/design.md §N instead:\n" + "\n".join(bad)


def test_every_cited_design_page_exists_and_none_is_cited_by_number():
    pages = {p.stem for p in PAGES.glob("*.md")}
    assert {"record", "metrics", "fairness"} <= pages  # the record, the metrics, the fairness rules
    cited = {(str(p.relative_to(ROOT)), n) for p in tracked_text_files() for n in PAGE_CITE.findall(_read(p))}
    assert cited, "nothing cites a docs/design/ page"
    missing = sorted((f, n) for f, n in cited if n not in pages)
    assert missing == [], f"cited design pages that do not exist: {missing}"
    by_number = [f"{p.relative_to(ROOT)}: {m}" for p in tracked_text_files()
                 if p.name not in ("test_docs.py", "CHANGELOG.md") for m in CITE.findall(_read(p))]
    assert by_number == [], f"cite a design page by its file, not a section number: {by_number}"


def test_the_design_pages_are_short_and_indexed():
    index = DESIGN.read_text(encoding="utf-8")
    for p in PAGES.glob("*.md"):
        lines = p.read_text(encoding="utf-8").splitlines()
        assert lines[0].startswith("# ") and len(lines) <= 250, (p.name, len(lines))
        assert f"design/{p.name}" in index, f"docs/design.md does not list {p.name}"
    assert len(index.splitlines()) <= 250


def test_the_sections_other_changes_fill_are_there():
    titles = {p.read_text(encoding="utf-8").splitlines()[0][2:] for p in PAGES.glob("*.md")}
    for t in ("Achieved concurrency", "Goodput", "ITL", "The wall's naming rule", "Units", "Rate search (--find)",
              "Glossary"):
        assert t in titles


def test_the_checks_catch_a_bad_citation():
    """The rules on made-up text: a citation by number, a page cited by its file, and an outside path."""
    assert design_sections("## 1. A\ntext\n## 2. B\n") == {1, 2}
    assert citations("see docs/design.md §9 and `docs/design.md` §2, docs/design.md section 4") == [9, 2, 4]
    assert PAGE_CITE.findall("(docs/design/record.md, docs/design/wall.md)") == ["record", "wall"]
    assert any(s in "(shared/" "DESIGN.md section 4)" for s in OUTSIDE)


def test_every_cited_measurement_section_exists():
    text = MEASUREMENTS.read_text(encoding="utf-8")
    sections = design_sections(text)
    cited = {(str(p.relative_to(ROOT)), n) for p in tracked_text_files() for n in citations(_read(p), MCITE)}
    assert cited, "nothing cites docs/measurements.md"
    assert sorted((f, n) for f, n in cited if n not in sections) == []
    for body in re.split(r"^## \d+\. ", text, flags=re.M)[1:]:  # each measurement names its commit
        assert re.search(r"\b[0-9a-f]{7}\b", body), body.splitlines()[0]


def test_the_readme_is_a_guide_and_the_design_page_holds_the_rules():
    for p in (README, DESIGN, *PAGES.glob("*.md")):
        text = p.read_text(encoding="utf-8")
        dated = [line for line in text.splitlines() if DATED.search(line)]
        assert dated == [], f"{p.name}: dated measurements go to docs/measurements.md: {dated}"
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 400


def test_the_measurement_checks_catch_what_they_guard():
    assert citations("docs/measurements.md §4 and `docs/measurements.md` §2", MCITE) == [4, 2]
    assert DATED.search("on the quiet box") and DATED.search("(Dec 2, K=2)") and not DATED.search("§12 of Dec.")
