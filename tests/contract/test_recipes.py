"""CONTRIBUTING.md's four recipes ("Four paths a newcomer takes": an engine, a chip preset, a trace format, a
panel), each applied for real to a copy of the tracked tree (issue 60's acceptance: "adding a fake engine, trace
format, chip and panel by CONTRIBUTING's recipe, each in a test, touches the files it says and no others").

Each test copies `git ls-files` into tmp_path, makes exactly the edits its recipe's steps name (the files it edits
must be ones the recipe's text names), then runs the copy's own code in a subprocess (this interpreter, the copy
first on sys.path and as the working folder) to show the addition works through the entry the recipe promises:
`--engine NAME` and a worker building it from its declaration; `plan --chip NAME`'s prediction; `--workload
NAME:FILE`'s rows; the dashboard composing and filling the new panel. Last, the copy's files are hashed again: the
files that changed are exactly the ones the recipe named, and running the addition wrote into none of them."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
SKIP_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def recipe(title: str) -> str:
    """The text of the recipe headed **A new TITLE**, up to the next recipe or section."""
    start = TEXT.index(f"**A new {title}**")
    ends = [i for i in (TEXT.find("**A new ", start + 1), TEXT.find("\n## ", start)) if i > 0]
    return TEXT[start:min(ends)]


def named(text: str) -> set[str]:
    """The repository files and folders (`tests/data/`) a recipe names (its placeholder NAME filled by the
    caller)."""
    return set(re.findall(r"(?<![\w./-])((?:engines|measure|presets|tui|tests|docs)/(?:[\w./-]*\.\w+|[\w/-]*/))",
                          text))


def copy_tree(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in files.decode().split("\0"):
        if rel and (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    return dest


def hashes(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in tree.rglob("*") if p.is_file() and not SKIP_PARTS & set(p.relative_to(tree).parts)}


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def run_copy(tree: Path, code: str, timeout: float = 60) -> str:
    """`code` run by this interpreter in the copy (its folder first on sys.path); its stdout (an assertion on a
    non-zero exit, with its stderr)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "tests")]),
           "PYTHONDONTWRITEBYTECODE": "1"}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tree, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def edit(tree: Path, rel: str, old: str, new: str) -> None:
    p = tree / rel
    text = p.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{rel}: the anchor {old!r} is not there once"
    p.write_text(text.replace(old, new), encoding="utf-8")


def append(tree: Path, rel: str, text: str) -> None:
    p = tree / rel
    p.write_text(p.read_text(encoding="utf-8").rstrip("\n") + "\n\n" + textwrap.dedent(text).lstrip("\n"),
                 encoding="utf-8")


@pytest.fixture
def tree(tmp_path):
    t = copy_tree(tmp_path / "tree")
    return t, hashes(t)


def check_touched(tree: Path, before: dict[str, str], edited: set[str], text: str) -> None:
    """The files edited are the ones the recipe names, and nothing else in the copy changed (running it
    included)."""
    names = named(text)
    unnamed = {p for p in edited if p not in names and not any(n.endswith("/") and p.startswith(n) for n in names)}
    assert unnamed == set(), f"edited where the recipe does not say: {unnamed} (it names {sorted(names)})"
    assert changed(before, hashes(tree)) == edited


# ---- a new engine ------------------------------------------------------------------------------------------------

FAKE_ENGINE = '''\
"""A fake engine, only in tests/contract/test_recipes.py's copy of the tree: CONTRIBUTING's engine recipe applied to an
engine of GGUF models (as llama's declaration says) whose tokens come on a fixed schedule, without reading the
model."""
from __future__ import annotations

import time

from engines.base import EngineSpec, Prompt, TokenStream
from engines.spec import EngineDecl

FAKE = EngineDecl("fakeeng", "fake engine", "in-process", model_kind="gguf", work_model="gguf", gpu="layers",
                  factory="engines.fakeeng:FakeEngine")


class FakeEngine:
    name = "fakeeng"

    def __init__(self, spec: EngineSpec):
        self.spec = spec

    def load(self) -> None:
        pass

    def warmup(self) -> None:
        for _ in self.generate(self.tokenize(Prompt("warmup", text="Warm up.")), 2, True):
            pass

    def tokenize(self, prompt: Prompt) -> list[int]:
        return [1] * (prompt.synthetic_tokens or len((prompt.text or "x").split()))

    def generate(self, tokens: list[int], max_tokens: int, ignore_eos: bool) -> TokenStream:
        for i in range(max_tokens):
            time.sleep(0.001)
            yield 100 + i, time.perf_counter_ns()

    def set_threads(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass
'''


def test_a_new_engine_by_the_recipe(tree):
    t, before = tree
    text = recipe("engine")
    (t / "engines/fakeeng.py").write_text(FAKE_ENGINE, encoding="utf-8")
    edit(t, "engines/registry.py", "from engines.null import NULL\n",
         "from engines.fakeeng import FAKE\nfrom engines.null import NULL\n")
    edit(t, "engines/registry.py", "MLX_SERVER, VLLM)}", "MLX_SERVER, VLLM, FAKE)}")
    assert "engines/NAME.py" in text and "engines/registry.py" in text
    out = run_copy(t, """
        import json
        from engines.base import EngineSpec
        from engines.registry import declared
        from measure.machine.model_choice import engine_label
        from measure.core.records import RunMeta
        from measure.core.workload import ClosedLoop, Load
        from measure.sources.fleet import Fleet
        import presets
        from tui.options import build_parser

        dash, bench_parser = build_parser()
        engines = [dash.parse_args(["--engine", "fakeeng"]).engine, bench_parser.parse_args(["--engine", "fakeeng"]).engine]
        src = Fleet(EngineSpec("fakeeng", ""), RunMeta("fakeeng", "none", 0, simulated=True), k=1, threads=1, b_cap=1)
        try:
            src.start()
            recs = src.run_requests(Load(presets.workload("synthetic:8"), ClosedLoop(1, total=3), 4), timeout=60)
        finally:
            src.close()
        print(json.dumps({"engine": engines, "label": [declared("fakeeng").label, engine_label("fakeeng")],
                          "tokens": [len(r.token_ns) for r in recs], "errors": [r.error for r in recs]}))
    """)
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"engine": ["fakeeng", "fakeeng"], "label": ["fake engine"] * 2, "tokens": [4, 4, 4], "errors": [None] * 3}
    check_touched(t, before, {"engines/fakeeng.py", "engines/registry.py"}, text.replace("NAME", "fakeeng"))


# ---- a new chip preset -------------------------------------------------------------------------------------------

FAKE_CHIP = """
[fakechip-x1]
name = "Fakechip X1"
backend = "cuda"
bandwidth_gbps = 512
memory_gib = [24]
fp16_tflops = 100
match = ["Fakechip X1"]
"""


def test_a_new_chip_preset_by_the_recipe(tree):
    t, before = tree
    text = recipe("chip preset")
    append(t, "presets/chips.toml", FAKE_CHIP)
    out = run_copy(t, """
        import sys
        from tui.cli import main
        sys.argv = ["inference-top", "plan", "--preset", "gemma-3-270m-q4_k_m", "--chip", "fakechip-x1",
                    "--memory", "24G"]
        main()
    """)
    assert "predicted on Fakechip X1: " in out and "no measurement of this chip: an estimate from the" in out
    row = re.search(r"^instances +1 +1 +\S+ +([\d.]+) .*range ([\d.]+)–([\d.]+) tok/s/user \(cuda family\)$", out, re.M)
    assert row, out
    low, mid, high = float(row[2]), float(row[1]), float(row[3])
    assert 0 < low < mid < high, row[0]
    check_touched(t, before, {"presets/chips.toml"}, text)


# ---- a new trace format ------------------------------------------------------------------------------------------

FAKE_FORMAT = '''@_declared
class FakeFmt(_Csv):
    """A fake trace format (tests/contract/test_recipes.py): CSV `time_ms,input,output`, times in milliseconds."""

    name = "fakefmt"
    title = "FakeFmt"
    what = "FakeFmt CSV with the header time_ms,input,output"
    columns = ("time_ms", "input", "output")
    units_per_s = 1000.0

    def row(self, r: RowReader, line: int, fields: list[str]) -> Parsed | None:
        c = r.cols
        return Parsed(r.time(line, "time_ms", fields[c["time_ms"]]) / self.units_per_s,
                      r.count(line, "input", fields[c["input"]]), r.count(line, "output", fields[c["output"]]))


'''


def test_a_new_trace_format_by_the_recipe(tree, tmp_path):
    t, before = tree
    text = recipe("trace format")
    edit(t, "measure/core/traces.py", "@_declared\nclass BurstGPT(_Csv):", FAKE_FORMAT + "@_declared\nclass BurstGPT(_Csv):")
    (t / "tests/data/traces/fakefmt.csv").write_text("time_ms,input,output\n0,100,10\n1500,200,20\n2500,300,30\n",
                                                     encoding="utf-8")
    bad = tmp_path / "bad.csv"
    bad.write_text("time_ms,input,output\n0,100,10\n5,many,20\n", encoding="utf-8")
    out = run_copy(t, f"""
        import json
        from measure.core.datasets import DatasetError
        from measure.machine.workloads import resolve
        from tui.options import build_parser

        parser = build_parser()[1]
        args = parser.parse_args(["--workload", "fakefmt:tests/data/traces/fakefmt.csv"])
        wl = resolve(args.workload)
        rows = [(r.t, r.prompt, r.output) for r in (wl.row(i) for i in range(3))]
        try:
            resolve("fakefmt:{bad}")
            error = ""
        except DatasetError as exc:
            error = str(exc)
        helped = "fakefmt:FILE" in " ".join(parser.format_help().split())
        print(json.dumps({{"rows": rows, "error": error, "help": helped}}))
    """)
    got = json.loads(out.strip().splitlines()[-1])
    assert got["rows"] == [[0.0, 100, 10], [1.5, 200, 20], [2.5, 300, 30]]
    assert got["help"], "--workload's help does not name the new format"
    assert "bad.csv" in got["error"] and "line 3" in got["error"] and "\n" not in got["error"], got["error"]
    check_touched(t, before, {"measure/core/traces.py", "tests/data/traces/fakefmt.csv"}, text)


# ---- a new panel -------------------------------------------------------------------------------------------------

FAKE_RENDER = '''
def render_fake(s: Snapshot, v: View) -> Text:
    """A fake panel (tests/contract/test_recipes.py): the snapshot's state and level."""
    return Text(f"fake panel: {s.state}, K={s.k}")
'''


def test_a_new_panel_by_the_recipe(tree):
    t, before = tree
    text = recipe("panel")
    append(t, "tui/panels.py", FAKE_RENDER)
    edit(t, "tui/app.py", "render_workers, series_charts)\n", "render_workers, series_charts, render_fake)\n")
    edit(t, "tui/app.py", '                yield Panel(id="workers")\n',
         '                yield Panel(id="workers")\n                yield Panel(id="fake")\n')
    edit(t, "tui/app.py", '        self.query_one("#workers", Panel).set_text(workers)\n',
         '        self.query_one("#workers", Panel).set_text(workers)\n'
         '        self.query_one("#fake", Panel).set_text(render_fake(snap, view))\n')
    edit(t, "tui/app.py", 'for wid in ("gauges", "numbers", "workers"):', 'for wid in ("gauges", "numbers", "workers", "fake"):')
    edit(t, "tui/layout.py", "PAD = 2 ", "FAKE_ROWS = 3  # the fake panel's, its border included\nPAD = 2 ")
    edit(t, "tui/layout.py", "main_side = _side(body, side_panels, needs)",
         'main_side = {**_side(body - FAKE_ROWS, side_panels, needs), "fake": FAKE_ROWS}')
    append(t, "tui/app.tcss", "#fake { border: round $primary; padding: 0 1; }\n")
    out = run_copy(t, """
        import asyncio, json
        from sim import run_for, sim_controller
        from tui.app import InferenceTop

        async def main():
            c, fleet, clock = sim_controller(k=1)
            run_for(c, fleet, clock, 8)
            app = InferenceTop(c, live=False)
            async with app.run_test(size=(160, 48)) as pilot:
                app.refresh_numbers()
                await pilot.pause()
                fake, side = app.query_one("#fake"), app.query_one("#side").region
                others = [app.query_one("#" + w).region for w in ("gauges", "numbers", "workers", "log")]
                shown = (fake.display and fake.region.height == 3 and side.contains_region(fake.region)
                         and not any(fake.region.overlaps(r) for r in others))
                return {"text": str(fake.render()), "shown": bool(shown), "region": list(fake.region),
                        "side": list(side)}

        print(json.dumps(asyncio.run(main())))
    """)
    got = json.loads(out.strip().splitlines()[-1])
    assert got["text"] == "fake panel: steady, K=1" and got["shown"], got
    check_touched(t, before, {"tui/panels.py", "tui/app.py", "tui/layout.py", "tui/app.tcss"}, text)
