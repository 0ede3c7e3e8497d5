"""benchmarks/mutation.py's guard on its equivalents: each listed mutant's change is read from mutmut's mutants
file (the lines of the mutant's function that differ from the original's) and a name whose mutant changes something
else than the [changed] line recorded (mutmut renumbered it after an edit) is stale: scored as the mutant it is."""
from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import mutation as M  # noqa: E402

MODULE = "measure/core/units.py"  # its SCOPE is "*": every mutant of the fake file is in scope
PREFIX = "measure.core.units."
MUTANTS = '''\
def x_f__mutmut_orig(a, b=1):
    """Sum, doubled."""
    c = a + b
    return c * 2

def x_f__mutmut_1(a, b=2):
    """Sum, doubled."""
    c = a + b
    return c * 2

def x_f__mutmut_2(a, b=1):
    """Sum, doubled."""
    c = a - b
    return c * 2

class C:
    def xǁCǁm__mutmut_orig(self,
        x):
        return [x,
# a column-0 comment inside the function
                x]
    def xǁCǁm__mutmut_1(self,
        x):
        return [x,
# a column-0 comment inside the function
                None]
'''


def _tree(tmp_path: Path, codes: dict[str, int]) -> Path:
    (tmp_path / "mutants" / MODULE).parent.mkdir(parents=True)
    (tmp_path / "mutants" / MODULE).write_text(MUTANTS)
    (tmp_path / "mutants" / (MODULE + ".meta")).write_text(json.dumps({"exit_code_by_key": codes}))
    return tmp_path


def test_the_change_is_the_mutants_differing_lines(tmp_path):
    now = M.current_changes(_tree(tmp_path, {}), MODULE, [PREFIX + "x_f__mutmut_1", PREFIX + "x_f__mutmut_2",
                                                          PREFIX + "xǁCǁm__mutmut_1", PREFIX + "x_f__mutmut_9"])
    assert now == {PREFIX + "x_f__mutmut_1": "def x_f(a, b=2):",  # the def line, mutmut's suffix off
                   PREFIX + "x_f__mutmut_2": "c = a - b",
                   PREFIX + "xǁCǁm__mutmut_1": "None]",  # past the comment at column 0, to the function's end
                   PREFIX + "x_f__mutmut_9": None}  # no such mutant in the file
    assert M.mutant_change(["def f():", "  a", "  b", "  c"], ["def f():", "  A", "  b"]) == "A ⏎ − c"
    text = 'def g__mutmut_orig():\n    s = """\nx\n"""\n    return s\n\ny = 1\n'  # a string's line at column 0
    assert M.function_lines(text, {"g__mutmut_orig"}) == {"g__mutmut_orig": text.splitlines()[:5]}  # parsed whole


def test_a_renumbered_name_is_stale_and_scored_as_the_survivor_it_is(tmp_path):
    """mutant 1 was judged equivalent when it changed `c = a - b`; mutmut renumbered: that one is 2 now, and the
    name 1 points at the default b=2, which survives. Mutant 2 (listed with no [changed] line) counts, named apart."""
    tree = _tree(tmp_path, {PREFIX + "x_f__mutmut_1": 0, PREFIX + "x_f__mutmut_2": 0, PREFIX + "xǁCǁm__mutmut_1": 1})
    equiv = {PREFIX + "x_f__mutmut_1": "a - b is never read", PREFIX + "x_f__mutmut_2": "likewise"}
    counted, stale, bare = M.vet(tree, [MODULE], equiv, {PREFIX + "x_f__mutmut_1": "c = a - b"})
    assert (stale, bare) == ([PREFIX + "x_f__mutmut_1"], [PREFIX + "x_f__mutmut_2"])
    out = M.score(tree, [MODULE], counted)
    assert (out["survived"], out["equivalent"], out["killed"]) == (1, 1, 1)
    assert out["survivors"] == [PREFIX + "x_f__mutmut_1"]
    assert M.vet(tree, [MODULE], equiv, {PREFIX + "x_f__mutmut_1": "def x_f(a, b=2):"})[1] == []  # fingerprinted again


def test_the_changed_table_is_written_after_the_equivalents_kept_byte_for_byte(tmp_path, monkeypatch):
    head = '# why\n[equivalent]\n# a comment\n"a.x_f__mutmut_1" = "reason"   # kept as written\n'
    monkeypatch.setattr(M, "EQUIVALENTS", tmp_path / "e.toml")
    M.EQUIVALENTS.write_text(head)
    M.write_changes({"a.x_f__mutmut_1": 'x = "q" ⏎ y'})
    M.write_changes({"a.x_f__mutmut_1": "z"})  # written again: the table replaced, not appended
    text = M.EQUIVALENTS.read_text()
    assert text.startswith(head + "\n[changed]\n") and text.count("[changed]") == 1
    assert tomllib.loads(text)["changed"] == M.recorded_changes() == {"a.x_f__mutmut_1": "z"}
