"""--help in groups with every default shown, and --version (issue 45): the dashboard, bench and tune share
options; each option sits in one of tui.options.GROUPS, and each option that takes a value says its default."""
import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from tui import cli, options, tune_cmd

ROOT = Path(__file__).resolve().parents[2]
UNGROUPED_OK = {"-h", "--version"}


def parsers() -> dict[str, argparse.ArgumentParser]:
    dash, bench = options.build_parser()
    return {"inference-top": dash, "bench": bench, "tune": tune_cmd.tune_parser()}


def ungrouped(p: argparse.ArgumentParser) -> list[str]:
    """The options outside the named groups (argparse's own 'options' group holds what was added to the parser)."""
    named = {id(a) for g in p._action_groups if g.title in options.GROUPS for a in g._group_actions}
    return [a.option_strings[0] for a in p._actions
            if a.option_strings and id(a) not in named and a.option_strings[0] not in UNGROUPED_OK]


def undefaulted(p: argparse.ArgumentParser) -> list[str]:
    """The options that take a value and whose help, as --help prints it, says no default."""
    fmt = p._get_formatter()
    return [a.option_strings[0] for a in p._actions
            if a.option_strings and a.nargs != 0 and a.option_strings[0] not in UNGROUPED_OK
            and "default" not in fmt._expand_help(a)]


@pytest.mark.parametrize("name", ["inference-top", "bench", "tune"])
def test_every_option_is_in_a_group_and_says_its_default(name):
    p = parsers()[name]
    assert ungrouped(p) == []
    assert undefaulted(p) == []
    shown = [g.title for g in p._action_groups if g._group_actions and g.title in options.GROUPS]
    assert shown == [t for t in options.GROUPS if t in shown]  # in GROUPS' order
    assert len(shown) >= 4


def test_the_checks_catch_an_option_outside_a_group_and_a_default_unsaid():
    p = options.OneLineParser(prog="x")
    p.group(options.LOAD).add_argument("--said", type=int, default=3, help="a number")
    p.group(options.LOAD).add_argument("--unsaid", help="a name")
    p.add_argument("--loose", help="no group (default: none)")
    assert ungrouped(p) == ["--loose"]
    assert undefaulted(p) == ["--unsaid"]
    assert "a number (default: 3)" in " ".join(p.format_help().split())


def test_help_lists_the_groups_with_their_defaults():
    dash, bench = options.build_parser()
    text = " ".join(dash.format_help().split())
    for title in ("engine and model:", "load and workload:", "SLO, cost and power:", "display:", "recording:",
                  "cluster:"):
        assert title in text
    assert "--ctx CTX context length per worker (tokens) (default: 2048)" in text
    assert "tokens generated per request (default 128)" in text
    assert "tokens generated per request (default 256)" in " ".join(bench.format_help().split())


def test_version_is_the_package_metadata():
    from importlib.metadata import version

    r = subprocess.run([sys.executable, "-m", "tui.cli", "--version"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"inference-top {version('inference-top')}"


def test_http_without_aiohttp_is_one_line(monkeypatch, capsys):
    """pip install inference-top without the http extra: --engine http says what to install, at once (the HTTP
    source's thread died at its first stream, and the bench waited 30 s for a warmup that never came)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "aiohttp" else real(name, *a))
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--engine", "http", "--url", "http://127.0.0.1:9/v1", "--tokenizer", "none",
                  "--requests", "1"])
    assert exc.value.code == options.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["inference-top: error: --engine http needs aiohttp, which is not installed: pip install "
                   "'inference-top[http]'"]


def test_a_closed_pipe_ends_quietly():
    """`inference-top plan | grep -q KV`: grep leaves at its first match; plan's later print met the closed pipe and
    printed a BrokenPipeError traceback (CI's wheel smoke, stop 50). Now it ends as a tool killed by SIGPIPE does:
    status 141, nothing on stderr. The reader closes before plan writes, so the pipe is always broken here."""
    p = subprocess.Popen([sys.executable, "-m", "tui.cli", "plan", "--preset", "llama-3.1-8b"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == cli.EXIT_BROKEN_PIPE, err
    assert err == ""
