"""Bad flags and outputs that would overwrite what the user has: one line, exit 2, and the file or folder that was
there is still there, byte for byte (found by a bad-input trial: a negative batch size ran forever and replaced a
trained model; `predict --output` equal to the input replaced the texts; `baseline --output FILE` moved the file)."""
from __future__ import annotations

import hashlib

import pytest

from bertkit.cli import main

pytest.importorskip("sklearn")


def _digest(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def baseline_dir(tmp_path_factory, keyword_files):
    out = tmp_path_factory.mktemp("kept") / "tfidf"
    assert main(["baseline", "--train", str(keyword_files["train"]), "--dev", str(keyword_files["dev"]),
                 "--output", str(out)]) == 0
    return out


def _one_line_error(capsys, code, *fragments):
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err


@pytest.mark.parametrize("flag, message", [
    ("--lr=-1", "train: lr must be a number > 0, got -1.0"),
    ("--lr=nan", "lr must be a number > 0, got nan"),
    ("--batch-size=-4", "data: batch_size must be a number >= 1, got -4"),
    ("--grad-accum=0", "train: grad_accum must be a number >= 1, got 0"),
    ("--max-length=1", "data: max_length must be a number >= 3, got 1"),
    ("--train.warmup-ratio=2", "warmup_ratio must be a number >= 0 and <= 1, got 2.0"),
])
def test_a_bad_number_into_an_existing_model_folder_changes_nothing(baseline_dir, keyword_files, capsys, flag,
                                                                    message):
    before = _digest(baseline_dir)
    code = main(["finetune", "--model", str(baseline_dir), "--train", str(keyword_files["train"]), "--dev",
                 str(keyword_files["dev"]), "--output", str(baseline_dir), "--no-baseline", flag])
    _one_line_error(capsys, code, message)
    assert _digest(baseline_dir) == before


def test_predict_never_writes_over_its_input(baseline_dir, keyword_files, tmp_path, capsys):
    texts = tmp_path / "in.jsonl"
    texts.write_bytes(keyword_files["test"].read_bytes())
    before = texts.read_bytes()
    code = main(["predict", "--model", str(baseline_dir), "--input", str(texts), "--output", str(texts)])
    _one_line_error(capsys, code, "is the input file")
    assert texts.read_bytes() == before


@pytest.mark.parametrize("command", ["baseline", "predict"])
def test_an_output_of_the_wrong_kind_is_refused_and_kept(baseline_dir, keyword_files, tmp_path, capsys, command):
    if command == "baseline":     # a folder output given an existing file
        target = tmp_path / "notes.txt"
        target.write_text("precious")
        argv = ["baseline", "--train", str(keyword_files["train"]), "--dev", str(keyword_files["dev"])]
        message = "is a file, not a folder"
    else:                         # a file output given an existing folder
        target = tmp_path / "folder"
        target.mkdir()
        (target / "keep.txt").write_text("precious")
        argv = ["predict", "--model", str(baseline_dir), "--input", str(keyword_files["dev"])]
        message = "is a folder; name a file to write"
    before = _digest(tmp_path)
    _one_line_error(capsys, main([*argv, "--output", str(target)]), message)
    assert _digest(tmp_path) == before and not list(tmp_path.glob(".*"))


@pytest.mark.parametrize("argv, message", [
    (["evaluate", "--batch-size", "0"], "argument --batch-size: must be >= 1, got 0"),
    (["predict", "--batch-size=-3", "--output", "x.jsonl"], "argument --batch-size: must be >= 1, got -3"),
])
def test_a_bad_count_flag_is_one_line(baseline_dir, keyword_files, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main([argv[0], "--model", str(baseline_dir), "--input", str(keyword_files["dev"]), *argv[1:]])
    _one_line_error(capsys, exit_.value.code, message, f"(see bertkit {argv[0]} --help)")
