"""`bertkit quickstart`: a --quick run end to end on a tiny synthetic BBC-like folder, the output folder
rules, the report table and the CLI's arguments."""
import dataclasses
import json

import pytest

import bertkit
from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.finetune import evaluate_file
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
    assert names[0] == "TF-IDF baseline" and names[1] == "random init" and names[2].startswith("pre-trained here (")
    assert names[3] == "tiny" and names[4].startswith("hybrid: TF-IDF + ")
    test_rows = [json.loads(line) for line in (out / "data" / "test.jsonl").read_text(encoding="utf-8").splitlines()]
    for row in result.rows:
        # the table's accuracy is what the saved folder predicts for the test articles (Model.predict's path)
        predicted = [p["label"] for p in bertkit.load(row.folder).predict([r["text"] for r in test_rows])]
        correct = sum(p == r["label"] for p, r in zip(predicted, test_rows))
        assert row.test["accuracy"] == pytest.approx(correct / len(test_rows))
        assert (row.folder / "metrics.json").is_file()
        if row is result.rows[4]:                           # the hybrid: no steps of its own, an encoder folder
            assert row.steps == 0 and (row.folder / "linear.safetensors").is_file()
        elif row is not result.rows[0]:                     # the TF-IDF baseline: no steps, no encoder config
            assert row.steps > 0 and (row.folder / "config.json").is_file()
    assert result.rows[3].train_examples == 16 and result.rows[3].max_length == 32   # the reference's subset
    # the baseline row: the planted topic words make TF-IDF exact on the 6 test articles, and its folder scores
    # the same through `bertkit evaluate`'s code
    baseline = result.rows[0]
    assert baseline.test["accuracy"] == 1.0 and baseline.max_length is None and baseline.epochs is None
    assert evaluate_file(baseline.folder, out / "data" / "test.jsonl") == baseline.test
    printed = "\n".join(lines)
    for stage in range(1, 9):
        assert f"[{stage}/8]" in printed
    # the hybrid reads the fine-tuned model with the best dev accuracy (its metrics.json), named in its row
    dev = {row.folder: json.loads((row.folder / "metrics.json").read_text(encoding="utf-8"))["dev"]["accuracy"]
           for row in result.rows[1:4]}
    chosen = max(result.rows[1:4], key=lambda row: (dev[row.folder], -result.rows.index(row)))
    hybrid_meta = json.loads((result.rows[4].folder / "bertkit.json").read_text(encoding="utf-8"))
    assert hybrid_meta["trained_from"] == str(chosen.folder) and names[4].endswith(chosen.name)
    # "next:" names the folder of the row with the best test accuracy (checked above against Model.predict)
    best = max(result.rows, key=lambda row: (row.test["accuracy"], row.test["macro_f1"], -result.rows.index(row)))
    assert f"bertkit predict --model {best.folder} " in lines[-1] and lines[-1].startswith("next")
    assert "about" in printed and result.table in printed
    assert "test split: 6 articles, 3 topics" in result.table
    record = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert record["data"]["train"] == 21 and record["pretraining"]["steps"] == 4
    assert set(record["stage_seconds"]) == {"data", "baseline", "vocabulary", "pretraining", "finetune_scratch",
                                            "finetune_pretrained", "finetune_minilm", "hybrid"}
    assert table_row(result.table, "TF-IDF baseline")[1:4] == ["all", "21", "-"]
    assert (out / "table.txt").read_text(encoding="utf-8").strip() == result.table
    assert (out / "pretrain" / "run" / "log.jsonl").is_file() and (out / "vocab" / "vocab.txt").is_file()
    if result.loss_curve is not None:
        assert result.loss_curve == out / "pretrain" / "run" / "loss.png" and result.loss_curve.stat().st_size > 0

    # the same folder again: the earlier run is replaced, not mixed in (one pre-training log, not two)
    run_quickstart(out, tiny_plan, data_folder=folder, echo=lines.append)
    steps = [json.loads(line)["step"] for line in (out / "pretrain" / "run" / "log.jsonl").open(encoding="utf-8")]
    assert steps.count(1) == 1


def table_row(table: str, name: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(name))
    return [name] + line[len(name):].split()


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
