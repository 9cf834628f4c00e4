"""One CLI vocabulary: deprecated spellings parse to the new flag and warn once; every command takes the same
output flags (--quiet, --progress / --no-progress); the exit codes are documented in `bertkit --help`."""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from bertkit import progress
from bertkit.cli import _leaf_parsers, build_parser, main
from bertkit.errors import BertkitWarning

ROOT = Path(__file__).resolve().parents[2]

# (old command line, new command line): both must parse to the same namespace; the old one warns once
DEPRECATED = [
    (["evaluate", "--model", "M", "--data", "t.jsonl"], ["evaluate", "--model", "M", "--input", "t.jsonl"], "--data",
     "--input"),
    (["vocab", "train", "--input", "a.txt", "b.txt", "--output", "O"],
     ["vocab", "train", "--corpus", "a.txt", "b.txt", "--output", "O"], "--input", "--corpus"),
    (["pretrain", "--corpus", "c.txt", "--output", "O", "--init", "M"],
     ["pretrain", "--corpus", "c.txt", "--output", "O", "--model", "M"], "--init", "--model"),
    (["vocab-bpe", "--input", "a.txt", "--output", "O"], ["vocab-bpe", "--corpus", "a.txt", "--output", "O"],
     "--input", "--corpus"),
    # the training commands' own --progress-bar field flag: now the global --progress / --no-progress
    (["finetune", "--model", "M", "--train", "t.jsonl", "--output", "O", "--no-progress-bar"],
     ["finetune", "--model", "M", "--train", "t.jsonl", "--output", "O", "--no-progress"], "--no-progress-bar",
     "--no-progress"),
    (["simcse", "--model", "M", "--train", "c.txt", "--output", "O", "--progress-bar"],
     ["simcse", "--model", "M", "--train", "c.txt", "--output", "O", "--progress"], "--progress-bar", "--progress"),
    (["distill", "--teacher", "T", "--train", "t.jsonl", "--output", "O", "--no-progress-bar"],
     ["distill", "--teacher", "T", "--train", "t.jsonl", "--output", "O", "--no-progress"], "--no-progress-bar",
     "--no-progress"),
]


def _parse(argv):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = build_parser().parse_args(argv)
    return vars(args), [str(w.message) for w in caught if issubclass(w.category, BertkitWarning)]


@pytest.mark.parametrize("old,new,old_flag,new_flag", DEPRECATED)
def test_deprecated_spelling_parses_like_the_new_one_and_warns_once(old, new, old_flag, new_flag):
    old_args, old_warnings = _parse(old)
    new_args, new_warnings = _parse(new)
    old_args.pop("func"), new_args.pop("func")
    assert old_args == new_args
    assert old_warnings == [f"{old_flag} is deprecated; use {new_flag}"] and new_warnings == []


def test_deprecation_prints_one_bertkit_warning_line(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\n" * 20, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "bertkit", "vocab", "train", "--input", str(corpus), "--output",
                           str(tmp_path / "v"), "--vocab-size", "200"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == "bertkit: warning: --input is deprecated; use --corpus"
    assert done.stderr.count("deprecated") == 1
    assert (tmp_path / "v" / "vocab.txt").is_file()


def test_missing_required_input_is_one_line_exit_2(capsys):
    assert main(["evaluate", "--model", "M"]) == 2
    assert capsys.readouterr().err.strip() == "bertkit: error: evaluate needs --input FILE (the labeled file to score)"


def test_every_command_takes_the_output_flags():
    leaves = _leaf_parsers(build_parser())
    assert len(leaves) >= 25
    for parser in leaves:
        flags = {s for action in parser._actions for s in action.option_strings}
        assert {"--quiet", "--progress", "--no-progress"} <= flags, parser.prog


def test_help_documents_the_exit_codes():
    with contextlib.redirect_stdout(io.StringIO()) as out, pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = " ".join(out.getvalue().split())
    assert "Exit codes: 0 ok; 2 bad input" in text and "1 internal error" in text


def test_quiet_and_progress_reach_the_progress_bars_and_lines(capsys):
    from bertkit.progress import progress_bar as _progress
    from bertkit.train.loop import say
    try:
        progress.configure(quiet=True)
        say("hidden")
        assert _progress(5000, True) is None
        progress.configure(progress=False)
        assert _progress(5000, True) is None
        progress.configure(progress=True)
        bar = _progress(5000, False)
        assert bar is not None
        bar.close()
        progress.configure()
        say("shown")
        assert _progress(5000, False) is None
    finally:
        progress.configure()
    err = capsys.readouterr().err
    assert "bertkit: hidden" not in err and "bertkit: shown" in err


def test_main_sets_the_console_for_each_command(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c\n" * 5, encoding="utf-8")
    main(["vocab-bpe", "--corpus", str(corpus), "--output", str(tmp_path / "b"), "--vocab-size", "300", "--quiet"])
    assert progress.quiet()
    main(["vocab-bpe", "--corpus", str(corpus), "--output", str(tmp_path / "b2"), "--vocab-size", "300"])
    assert not progress.quiet()
    assert isinstance(build_parser(), argparse.ArgumentParser)


@pytest.mark.parametrize("command", ["finetune", "simcse", "distill"])
def test_training_commands_have_one_progress_flag(command):
    """--progress / --no-progress only (the old --progress-bar spellings are deprecated aliases of them)."""
    parser = next(p for p in _leaf_parsers(build_parser()) if p.prog == f"bertkit {command}")
    owners = {a.dest for a in parser._actions if {"--progress", "--progress-bar", "--no-progress-bar"} &
              set(a.option_strings)}
    assert owners == {"progress"}


def test_vocab_train_never_replaces_a_models_own_vocabulary(tiny_model_dir, tmp_path, capsys):
    """A new vocabulary written into a model folder would silently no longer match its weights."""
    import shutil
    folder = shutil.copytree(tiny_model_dir, tmp_path / "model")
    before = (folder / "vocab.txt").read_bytes()
    (tmp_path / "c.txt").write_text("the cat sat on the mat\n" * 20, encoding="utf-8")
    code = main(["vocab", "train", "--vocab-size", "200", "--corpus", str(tmp_path / "c.txt"), "--output", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and "holds a model" in err and err.count("\n") == 1, err
    assert (folder / "vocab.txt").read_bytes() == before


@pytest.mark.parametrize("flag, message", [("--min-frequency=-1", "--min-frequency must be >= 0, got -1"),
                                           ("--limit-alphabet=0", "--limit-alphabet must be >= 1, got 0")])
def test_vocab_train_counts_out_of_range_are_one_line(tmp_path, capsys, flag, message):
    (tmp_path / "c.txt").write_text("the cat sat on the mat\n", encoding="utf-8")
    code = main(["vocab", "train", "--corpus", str(tmp_path / "c.txt"), "--output", str(tmp_path / "v"), flag])
    err = capsys.readouterr().err
    assert code == 2 and message in err and not (tmp_path / "v").exists(), err
