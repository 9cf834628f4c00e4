"""docs/cli.md is generated from the argparse definitions (`python -m bertkit.cli.reference > docs/cli.md`) and
must agree with `bertkit COMMAND --help`: a flag added, renamed or re-described without regenerating fails here."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from bertkit.cli import build_parser
from bertkit.cli.reference import _subcommands, reference

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "cli.md"
REGENERATE = "docs/cli.md is stale: run `python -m bertkit.cli.reference > docs/cli.md`"


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## bertkit (.+)$", text, flags=re.M)
    return {name: body for name, body in zip(parts[1::2], parts[2::2])}


def test_every_command_and_flag_is_on_the_page():
    """Whatever Python renders the help: each command has its section, each of its flags is in it."""
    page = sections(PAGE.read_text(encoding="utf-8"))
    commands = dict(_subcommands(build_parser()))
    assert set(page) == set(commands), REGENERATE
    for name, parser in commands.items():
        for action in parser._actions:
            for flag in action.option_strings:
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", page[name]), \
                    f"bertkit {name} {flag}: {REGENERATE}"


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the page is rendered by Python 3.11's argparse "
                                                           "(3.10 and 3.13 word the help differently)")
def test_the_page_is_exactly_the_help_text():
    assert PAGE.read_text(encoding="utf-8") == reference(), REGENERATE


def test_a_changed_flag_is_caught(monkeypatch):
    """The check can fail: a help text changed after generation differs from the page."""
    import bertkit.cli.reference as module

    real = module.build_parser

    def changed():
        parser = real()
        parser.add_argument("--a-new-global-flag", help="not on the page")
        return parser

    monkeypatch.setattr(module, "build_parser", changed)
    assert PAGE.read_text(encoding="utf-8") != reference()
