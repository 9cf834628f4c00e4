"""`bertkit quickstart`: a --quick run end to end on a tiny synthetic BBC-like folder, the output folder
rules, the report table and the CLI's arguments."""
import dataclasses
import json

import pytest

import bertkit
from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.quickstart import quick_plan, run_quickstart, with_minutes
from bertkit.quickstart.plan import default_plan
from bertkit.quickstart.report import FinetuneRow, clock, format_table

TOPICS = {
    "business": "market shares profit bank economy prices trade firms growth investors",
    "sports": "match goal team player season coach win league cup champion",
    "tech": "software computer phone internet users digital network data chip games",
}


def write_topic_folder(root, per_label=10):
    for label, words in TOPICS.items():
        (root / label).mkdir(parents=True)
        words = words.split()
        for i in range(per_label):
            sentences = [" ".join(words[(i + k + j) % len(words)] for j in range(8)) + "." for k in range(6)]
            text = f"{words[i % len(words)]} news {i}\n\n" + " ".join(sentences[:3]) + "\n\n" + " ".join(sentences[3:])
            (root / label / f"{i + 1:03d}.txt").write_text(text + "\n", encoding="utf-8")
    return root


@pytest.fixture
def tiny_plan(tiny_model_dir):
    plan = quick_plan()
    return dataclasses.replace(plan, reference_model=str(tiny_model_dir), per_label=None,
                               pretrain=dataclasses.replace(plan.pretrain, vocab_size=200, max_steps=4, eval_every=2))


def test_quick_run_end_to_end(tmp_path, tiny_plan):
    folder = write_topic_folder(tmp_path / "bbc")
    lines = []
    result = run_quickstart(tmp_path / "run", tiny_plan, data_folder=folder, echo=lines.append)
    out = tmp_path / "run"
    names = [row.name for row in result.rows]
    assert names[0] == "random init" and names[1].startswith("pre-trained here (") and names[2] == "tiny"
    test_rows = [json.loads(line) for line in (out / "data" / "test.jsonl").read_text(encoding="utf-8").splitlines()]
    for row in result.rows:
        # the table's accuracy is what the saved folder predicts for the test articles (Model.predict's path)
        predicted = [p["label"] for p in bertkit.load(row.folder).predict([r["text"] for r in test_rows])]
        correct = sum(p == r["label"] for p, r in zip(predicted, test_rows))
        assert row.test["accuracy"] == pytest.approx(correct / len(test_rows)) and row.steps > 0
        assert (row.folder / "config.json").is_file() and (row.folder / "metrics.json").is_file()
    assert result.rows[2].train_examples == 16 and result.rows[2].max_length == 32   # the reference's subset
    printed = "\n".join(lines)
    for stage in range(1, 7):
        assert f"[{stage}/6]" in printed
    assert "about" in printed and result.table in printed
    assert "test split: 6 articles, 3 topics" in result.table
    record = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert record["data"]["train"] == 21 and record["pretraining"]["steps"] == 4
    assert set(record["stage_seconds"]) == {"data", "vocabulary", "pretraining", "finetune_scratch",
                                            "finetune_pretrained", "finetune_minilm"}
    assert (out / "table.txt").read_text(encoding="utf-8").strip() == result.table
    assert (out / "pretrain" / "log.jsonl").is_file() and (out / "vocab" / "vocab.txt").is_file()
    if result.loss_curve is not None:
        assert result.loss_curve == out / "pretrain" / "loss.png" and result.loss_curve.stat().st_size > 0

    # the same folder again: the earlier run is replaced, not mixed in (one pre-training log, not two)
    run_quickstart(out, tiny_plan, data_folder=folder, echo=lines.append)
    steps = [json.loads(line)["step"] for line in (out / "pretrain" / "log.jsonl").open(encoding="utf-8")]
    assert steps.count(1) == 1


def test_output_folder_must_be_new_or_a_quickstart_run(tmp_path, tiny_plan):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(BertkitError, match="not empty"):
        run_quickstart(tmp_path / "mine", tiny_plan, data_folder=tmp_path, echo=lambda line: None)
    assert (tmp_path / "mine" / "notes.txt").read_text(encoding="utf-8") == "keep me"
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(BertkitError, match="is a file"):
        run_quickstart(tmp_path / "file", tiny_plan, data_folder=tmp_path, echo=lambda line: None)


def test_plans():
    plan = default_plan()
    assert plan.pretrain.minutes == 5 and plan.pretrain.max_steps is None
    assert plan.reference.max_length < plan.tiny.max_length <= plan.encoder.max_position_embeddings
    shorter = with_minutes(quick_plan(), 0.5)
    assert shorter.pretrain.minutes == 0.5 and shorter.pretrain.max_steps is None


def test_clock_and_table():
    assert [clock(s) for s in (0, 59.6, 61, 3725)] == ["0:00", "1:00", "1:01", "1:02:05"]
    rows = [FinetuneRow("random init", None, 128, 1467, 6, 276, 65.0, 80.0,
                        {"accuracy": 0.5, "macro_f1": 0.4, "mcc": 0.3}),
            FinetuneRow("all-MiniLM-L6-v2", None, 64, 1467, 2, 184, 130.0, 150.0,
                        {"accuracy": 0.95, "macro_f1": 0.949, "mcc": 0.93})]
    table = format_table(rows, 419, 5)
    lines = table.splitlines()
    assert lines[0] == "BBC News test split: 419 articles, 5 topics (chance 0.200)"
    assert "test accuracy" in lines[2] and len({len(line) for line in lines[1:]}) == 1
    assert "1,467" in table and "2:10" in table and "0.950" in table


def test_cli_rejects_bad_minutes(capsys):
    assert main(["quickstart", "--minutes", "0"]) == 2
    assert "--minutes" in capsys.readouterr().err
