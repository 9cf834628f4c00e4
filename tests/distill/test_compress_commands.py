import json

import pytest

from bertkit.checkpoints import load_checkpoint
from bertkit.cli import main
from bertkit.finetune.predict import evaluate_file

from distill_fixtures import write_examples


def test_distill_command_with_student_layers(model_dir, tmp_path, capsys):
    data = write_examples(tmp_path / "train.jsonl", 9)
    code = main(["distill", "--teacher", str(model_dir), "--student-layers", "1", "--train", str(data),
                 "--dev", str(data), "--output", str(tmp_path / "s"), "--epochs", "1", "--batch-size", "9",
                 "--temperature", "3", "--alpha", "0.7", "--device", "cpu", "--progress_bar=false"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    # the reported dev accuracy is the saved student's, measured again through `bertkit evaluate`
    assert main(["evaluate", "--model", str(tmp_path / "s"), "--input", str(data)]) == 0
    assert printed["dev"]["accuracy"] == json.loads(capsys.readouterr().out)["accuracy"]
    assert printed["dev"] == json.loads((tmp_path / "s" / "metrics.json").read_text(encoding="utf-8"))["dev"]
    meta = load_checkpoint(tmp_path / "s").meta
    assert meta["distillation"]["temperature"] == 3.0 and meta["distillation"]["alpha"] == 0.7


def test_distill_command_needs_a_student(model_dir, tmp_path, capsys):
    data = write_examples(tmp_path / "train.jsonl", 3)
    assert main(["distill", "--teacher", str(model_dir), "--train", str(data), "--output", str(tmp_path / "s")]) == 2
    assert "--student" in capsys.readouterr().err


def test_prune_command_prints_before_and_after(model_dir, tmp_path, capsys):
    dev = write_examples(tmp_path / "dev.jsonl", 6)
    assert main(["prune-heads", "--model", str(model_dir), "--output", str(tmp_path / "p"), "--dev", str(dev),
                 "--per-layer", "1"]) == 0
    out = capsys.readouterr().out
    assert "heads per layer after pruning: [3, 3]" in out and "pruned / full speed" in out
    # the table's accuracy column is each folder's accuracy through `bertkit evaluate`
    rows = {line.split("|")[1].strip().split(" ")[0]: line.split("|") for line in out.splitlines()
            if line.startswith("| full") or line.startswith("| pruned")}
    for name, folder in (("full", model_dir), ("pruned", tmp_path / "p")):
        assert float(rows[name][4]) == pytest.approx(100 * evaluate_file(folder, dev)["accuracy"], abs=0.006)
