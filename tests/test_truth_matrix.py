"""A seeded sample of the truth matrix (benchmarks/truth_matrix.py; docs/design.md §22): combinations of source,
load, client processes, endpoints and segments drawn with Hypothesis (a failure shrinks to its smallest case),
every --find search over one and two endpoints, and live K/B steps with a warmup recorded and reported. The whole
matrix is `python benchmarks/truth_matrix.py`."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import truth_matrix as T  # noqa: E402


@pytest.fixture(scope="module")
def servers():
    s = T.NullServers(2)
    yield s
    s.close()


combos = st.builds(
    T.Combo,
    source=st.sampled_from(("http", "pool", "fleet", "batch")),
    load=st.sampled_from(("closed", "constant", "poisson", "gamma", "ramp", "trace", "sessions")),
    users=st.sampled_from((1, 3)),
    b=st.sampled_from((1, 2, 4)),
    k=st.sampled_from((1, 2)),
    procs=st.sampled_from((1, 2)),
    segments=st.sampled_from((1, 2)),
    cap=st.booleans(),
).filter(lambda c: c.valid())


@settings(max_examples=14, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much,
                                 HealthCheck.too_slow])
@given(c=combos)
def test_bench_cells_keep_every_invariant(servers, c):
    r = T.run_combo(c, servers)
    assert r.checked >= 5 and not r.failures, f"{r.combo}: " + "; ".join(r.failures)


@pytest.mark.parametrize("what,endpoints", [("users", 2), ("rate", 1)])
def test_find_never_names_a_knee_where_the_server_has_none(servers, what, endpoints):
    r = T.run_find(what, endpoints, servers)
    assert r.checked >= 4 and not r.failures, "; ".join(r.failures)


@pytest.mark.parametrize("steps,warmup", T.LIVE)
def test_live_steps_with_a_warmup_keep_one_row_per_level_and_the_report_agrees(steps, warmup):
    r = T.run_live(steps, warmup)
    assert r.checked >= 5 and not r.failures, "; ".join(r.failures)


def test_the_matrix_covers_every_option_a_user_can_combine():
    """The full matrix names every source, load, endpoint count, process count, segment count and the cap."""
    cs = T.all_combos()
    assert {c.source for c in cs} == set(T.SOURCES) and {c.load for c in cs} == set(T.LOADS)
    assert {c.k for c in cs} == {1, 2} and {c.procs for c in cs} == {1, 2} and {c.segments for c in cs} == {1, 2}
    assert any(c.cap for c in cs) and len(cs) > 300 and len(set(cs)) == len(cs)


@pytest.mark.parametrize("name,extra", T.CLI)
def test_the_command_line_says_what_ran(servers, name, extra):
    r = T.run_cli(name, extra, servers)
    assert r.checked >= 4 and not r.failures, "; ".join(r.failures)
