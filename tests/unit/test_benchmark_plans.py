"""benchmarks/plans.py builds the plans benchmarks load without the CLI (benchmarks/ imports no tui, issue 48
item 4): each is, field by field, what `bench` makes of the options its docstring names."""
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from plans import http_plan, local_plan  # noqa: E402

from measure.control.builder import make_plan  # noqa: E402
from tui.options import build_parser, plan_options  # noqa: E402


def _differ(a, b) -> dict[str, tuple[str, str]]:
    return {f.name: (repr(getattr(a, f.name)), repr(getattr(b, f.name))) for f in dataclasses.fields(a)
            if repr(getattr(a, f.name)) != repr(getattr(b, f.name))}


def test_the_http_plan_is_benchs():
    url = "http://127.0.0.1:9/v1"
    _, bench = build_parser()
    args = bench.parse_args(["--engine", "http", "--url", url, "--rate", "12.5", "--arrivals", "poisson",
                             "--requests", "40", "--max-tokens", "64", "--tokenizer", "none",
                             "--workload", "synthetic:16", "--seed", "1", "--client-procs", "2"])
    assert _differ(make_plan(plan_options(args), default_max_tokens=64), http_plan(url, 12.5, 40, 64, 2)) == {}


def test_the_local_plan_is_benchs():
    """compare_noise.py's side: compare's null side is bench's plan of the engine the null engine stands in for
    (its declaration's plan_engine), at --max-tokens 16."""
    from engines.registry import ENGINES

    engine = ENGINES["null"].plan_engine
    _, bench = build_parser()
    args = bench.parse_args(["--engine", engine, "--max-tokens", "16"])
    assert _differ(make_plan(plan_options(args), default_max_tokens=64, progress=lambda m: None), local_plan(engine, 16)) == {}
