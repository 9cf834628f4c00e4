"""Mistakes on the command line, as a user trial made them: a mistyped flag is named (with the closest known
spelling) before anything else, in one line, exit 2; `--help` shows each field's comment without source pragmas or
a comment cut at its line's end; `bertkit --version`."""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from typing import Optional

import pytest

from bertkit.cli import _leaf_parsers, build_parser, main
from bertkit.cli.flags import field_comments
from bertkit.cli.reference import _help, _subcommands

FINETUNE = ["finetune", "--task", "classification", "--model", "M", "--train", "t.jsonl", "--dev", "d.jsonl",
            "--output", "o"]


def _error_line(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def test_a_mistyped_flag_of_a_job_command_is_named_with_the_closest_flag(capsys):
    assert _error_line(capsys, [*FINETUNE, "--lr-rate", "1e-4"]) == \
        "bertkit: error: finetune: unknown flag --lr-rate (did you mean --lr?)"
    assert _error_line(capsys, [*FINETUNE, "--batch_size", "8"]) == \
        "bertkit: error: finetune: unknown flag --batch_size (did you mean --batch-size?)"
    assert _error_line(capsys, [*FINETUNE, "--train.progress-bar", "false"]) == \
        "bertkit: error: finetune: --train.progress-bar takes its value after '=': --train.progress-bar=VALUE"


def test_a_flag_after_the_double_dash_is_named_as_such(capsys):
    assert _error_line(capsys, ["encode", "--", "--model", "m"]) == \
        "bertkit: error: encode: --model comes after '--', which ends the flags; put the flags before it"


def test_a_mistyped_dotted_override_still_lists_the_valid_keys(capsys):
    assert main([*FINETUNE, "--train.lr-rat=1"]) == 2
    assert capsys.readouterr().err.startswith("bertkit: error: unknown key train.lr-rat; valid keys here: ")


def test_an_unknown_flag_wins_over_a_missing_required_one(capsys):
    assert _error_line(capsys, ["encode", "--inptu", "texts.txt", "--output", "v.npy", "--model", "M"]) == \
        "bertkit: error: encode: unknown flag --inptu (did you mean --input?)"
    assert _error_line(capsys, ["prune-heads", "--model", "M", "--output", "o", "--dev", "d", "--fractoin", "0.3"]) \
        == "bertkit: error: prune-heads: unknown flag --fractoin (did you mean --fraction?)"


def test_every_command_names_an_unknown_flag_first(capsys):
    for parser in _leaf_parsers(build_parser()):
        command = parser.prog.removeprefix("bertkit ")
        line = _error_line(capsys, [*command.split(), "--no-such-flag", "x"])
        assert line.startswith(f"bertkit: error: {command}: unknown flag --no-such-flag"), line


def test_a_missing_required_flag_alone_is_still_reported(capsys):
    assert _error_line(capsys, ["encode", "--output", "v.npy", "--model", "M"]) == \
        "bertkit encode: error: the following arguments are required: --input (see bertkit encode --help)"


@dataclass
class Commented:
    batch_size: Optional[int] = None  # type: ignore[assignment]  # None: the recipe's
    lr: float = 1e-3  # noqa: E501
    start: float = 0.0          # fraction of the run (Keras'
                                # start_from_epoch): the rest
    # steps between saves
    every: int = 0


def test_help_from_comments_drops_pragmas_and_joins_continued_lines():
    assert field_comments(Commented) == {"batch_size": "None: the recipe's",
                                         "start": "fraction of the run (Keras' start_from_epoch): the rest",
                                         "every": "steps between saves"}


def test_no_help_text_shows_a_pragma_or_an_unclosed_parenthesis():
    parser = build_parser()
    for name, command in [("", parser), *_subcommands(parser)]:
        for entry in re.split(r"\n  (?=-)", _help(command)):
            text = " ".join(entry.split())
            assert not re.search(r"type: ?ignore|noqa", text), f"bertkit {name}: {text}"
            assert text.count("(") == text.count(")"), f"bertkit {name}: {text}"


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"bertkit {metadata.version('bertkit')}\n"
