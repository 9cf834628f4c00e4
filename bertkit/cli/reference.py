"""The CLI reference, generated from the argparse definitions: `python -m bertkit.cli.reference > docs/cli.md`.

Each command's section is its `--help` text (80 columns, whatever the terminal), so the page says exactly what
`bertkit COMMAND --help` says; tests/cli/test_reference.py fails when docs/cli.md drifts from it.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator

from bertkit.cli import build_parser

WIDTH = 80
HEADER = """# bertkit command-line reference

Generated from the argparse definitions by `python -m bertkit.cli.reference > docs/cli.md`; do not edit by
hand (a test fails when this page and `bertkit COMMAND --help` disagree). Exit codes: 0 success, 2 bad input
(one line naming the file, line or field), 1 an internal error, 130 interrupted. Job commands (`pretrain`,
`finetune`, `simcse`, `distill`, ...) also take `--section.key=value` overrides of their config's fields.
"""


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(name, parser) for every command, depth first, in the order they were registered."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for child, deeper in _subcommands(sub):
                    yield f"{name} {child}", deeper


def _help(parser: argparse.ArgumentParser) -> str:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)      # argparse wraps to the terminal's width; fix it
    try:
        return parser.format_help().rstrip()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def reference() -> str:
    parser = build_parser()
    commands = list(_subcommands(parser))
    lines = [HEADER, "## Commands", ""]
    lines += [f"- [`bertkit {name}`](#bertkit-{name.replace(' ', '-')})" for name, _ in commands]
    lines += ["", "## `bertkit`", "", "```text", _help(parser), "```", ""]
    for name, sub in commands:
        lines += [f"## bertkit {name}", "", "```text", _help(sub), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(reference())
