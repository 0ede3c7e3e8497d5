"""Every command the README shows is one its parser takes (issue 60 item 4: its only compare example did not
parse, --a/--b against -A/-B). Each `inference-top …` line of the README's sh blocks goes through tui.cli.main up
to its parser: argparse's parse_args is wrapped to stop the command once its options are parsed, so nothing
starts; a line the parser refuses ends in SystemExit(2) and fails here with the parser's message."""
import argparse
import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def examples() -> list[str]:
    cmds = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S):
        for line in block.splitlines():
            line = re.split(r"\s+#", line, maxsplit=1)[0].strip()  # a trailing comment is not an argument
            if line.startswith("inference-top"):
                cmds.append(line)
    return cmds


class Parsed(Exception):
    """The command's options were parsed: stop here."""


def test_the_readme_shows_every_subcommand():
    subs = {shlex.split(c)[1] if len(shlex.split(c)) > 1 and not shlex.split(c)[1].startswith("-") else "dashboard"
            for c in examples()}
    assert {"dashboard", "bench", "plan", "tune", "compare", "replay", "report", "probe"} <= subs, subs


@pytest.mark.parametrize("cmd", examples())
def test_every_readme_example_parses(cmd, monkeypatch, capsys):
    from tui.cli import main

    parse = argparse.ArgumentParser.parse_args

    def parsed(self, args=None, namespace=None):
        raise Parsed(parse(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parsed)
    try:
        main(shlex.split(cmd)[1:])
    except Parsed:
        return
    except SystemExit as exc:
        pytest.fail(f"{cmd!r} does not parse (exit {exc.code}): {capsys.readouterr().err.strip()}")
    pytest.fail(f"{cmd!r} ran to its end without parsing its options through argparse")


def test_a_wrong_example_is_caught(monkeypatch, capsys):
    """The example the README had: --a/--b where compare takes -A/-B."""
    from tui.cli import main

    parse = argparse.ArgumentParser.parse_args
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args",
                        lambda self, args=None, namespace=None: (_ for _ in ()).throw(Parsed(parse(self, args, namespace))))
    with pytest.raises(SystemExit):
        main(shlex.split('compare --a "--engine llama --k 2" --b "--engine llama --b 4"'))
