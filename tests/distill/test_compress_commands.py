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


@pytest.mark.parametrize("command", [["prune-heads", "--model", "{m}", "--output", "{m}", "--dev", "{d}", "--per-layer",
                                      "1"],
                                     ["distill", "--teacher", "{m}", "--student-layers", "1", "--train", "{d}",
                                      "--output", "{m}", "--max-steps", "1"],
                                     ["quantize", "--model", "{m}/", "--output", "{m}", "--dev", "{d}"]])
def test_output_into_the_source_folder_is_refused_and_the_source_kept(model_dir, tmp_path, capsys, command):
    """prune-heads and distill wrote the pruned model or the student over the fine-tuned model they came from."""
    data = write_examples(tmp_path / "data.jsonl", 6)
    before = {p.name: p.read_bytes() for p in model_dir.iterdir() if p.is_file()}
    assert main([arg.format(m=model_dir, d=data) for arg in command]) == 2
    assert f"is the --{'teacher' if command[0] == 'distill' else 'model'} folder" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in model_dir.iterdir() if p.is_file()} == before
    assert load_checkpoint(model_dir).config.num_layers == 2


@pytest.mark.parametrize("command", [["prune-heads", "--model", "{q}", "--output", "{o}", "--dev", "{d}", "--per-layer",
                                      "1"],
                                     ["distill", "--teacher", "{q}", "--student-layers", "1", "--train", "{d}",
                                      "--output", "{o}", "--max-steps", "1"],
                                     ["distill", "--teacher", "{m}", "--student", "{q}", "--train", "{d}",
                                      "--output", "{o}", "--max-steps", "1"]])
def test_an_int8_folder_is_refused_as_a_source_naming_its_float_folder(model_dir, tmp_path, capsys, command):
    """Pruning an int8 folder was a RuntimeError traceback (its int8 layers take no gradient), distilling from
    one a state-dict traceback."""
    data = write_examples(tmp_path / "data.jsonl", 6)
    assert main(["quantize", "--model", str(model_dir), "--output", str(tmp_path / "q"), "--dev", str(data),
                 "--max-accuracy-drop", "100", "--min-mean-cosine", "0", "--min-cosine", "0"]) == 0
    capsys.readouterr()
    args = [arg.format(m=model_dir, q=tmp_path / "q", d=data, o=tmp_path / "out") for arg in command]
    assert main(args) == 2
    assert f"is an int8 folder; {'prune' if command[0] == 'prune-heads' else 'distill'}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_prune_says_when_heads_were_scored_on_the_dev_file_it_reports(model_dir, tmp_path, capsys):
    """The accuracy after pruning is measured on the file the heads were chosen on unless --importance-data names
    another: the table says so then, and not when another file scored them."""
    dev, other = write_examples(tmp_path / "dev.jsonl", 6), write_examples(tmp_path / "train.jsonl", 9)
    note = "heads were scored on --dev itself"
    for extra, said in (([], True), (["--importance-data", str(dev)], True),
                        (["--importance-data", str(other)], False)):
        assert main(["prune-heads", "--model", str(model_dir), "--output", str(tmp_path / "p"), "--dev", str(dev),
                     "--per-layer", "1", *extra]) == 0
        assert (note in capsys.readouterr().out) == said


@pytest.mark.parametrize("command", ["prune-heads", "quantize"])
@pytest.mark.parametrize("limit", ["0", "-2"])
def test_max_dev_examples_below_one_is_one_line(model_dir, tmp_path, capsys, command, limit):
    """prune-heads --max-dev-examples 0 was a numpy ValueError traceback, and -2 measured all rows but the last
    two without a word (quantize too)."""
    dev = write_examples(tmp_path / "dev.jsonl", 6)
    amount = ["--per-layer", "1"] if command == "prune-heads" else []
    assert main([command, "--model", str(model_dir), "--output", str(tmp_path / "o"), "--dev", str(dev),
                 "--max-dev-examples", limit, *amount]) == 2
    assert f"--max-dev-examples must be >= 1, got {limit}" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
