"""The baseline beside every result: finetune prints both on dev and records them; --no-baseline skips it; a model
that loses or collapses gets one plain line with what to try; bad training files stop with one line (exit 2)."""
from __future__ import annotations

import json

import pytest

from bertkit.job_config import job_config
from bertkit.cli import main
from bertkit.finetune import FinetuneConfig, run_finetune
from bertkit.finetune.linear.report import collapse_note, compare, mcnemar

from linear_data import keyword_rows, write_jsonl

pytest.importorskip("sklearn")

BASELINE = {"accuracy": 0.647, "macro_f1": 0.51, "mcc": 0.6}


def test_collapse_onto_frequent_classes_is_named():
    names = ["a", "b", "c", "d", "e"]
    gold = [0] * 30 + [1] * 20 + [2] * 20 + [3] * 15 + [4] * 15      # the top two gold classes hold 50%
    collapsed = [0] * 70 + [1] * 25 + [2] * 5                         # 95% of predictions in two classes
    note = collapse_note(collapsed, gold, names)
    assert note is not None and "95%" in note and "(a, b)" in note and "50%" in note
    assert collapse_note(gold, gold, names) is None                   # predictions as spread as the gold labels
    skewed_gold = [0] * 80 + [1] * 12 + [2] * 8                       # gold itself is concentrated: no collapse
    assert collapse_note([0] * 92 + [1] * 8, skewed_gold, names[:3]) is None
    binary = collapse_note([1] * 95 + [0] * 5, [0] * 50 + [1] * 50, ["neg", "pos"])
    assert binary is not None and "95% of them fall in 1 class (pos)" in binary


def test_warnings_say_what_to_try():
    loses = compare("classification", "fine-tuned", {"accuracy": 0.62, "macro_f1": 0.48}, BASELINE, 2.0)
    assert len(loses.warnings) == 1 and "loses to the TF-IDF baseline" in loses.warnings[0]
    assert "--method hybrid" in loses.warnings[0] and "0.620 vs 0.647" in loses.warnings[0]
    far_below = compare("classification", "fine-tuned", {"accuracy": 0.529, "macro_f1": 0.15}, BASELINE, 2.0)
    assert len(far_below.warnings) == 1 and "collapse" in far_below.warnings[0]   # issue 19's held-out run
    wins = compare("classification", "hybrid", {"accuracy": 0.70, "macro_f1": 0.52}, BASELINE, 2.0)
    assert wins.warnings == [] and wins.table()[1].split()[-2:] == ["0.7000", "0.5200"]
    regression = compare("regression", "fine-tuned", {"spearman": 0.3, "pearson": 0.3, "mse": 2.0},
                         {"spearman": 0.5, "pearson": 0.5, "mse": 1.0}, 1.0)
    assert len(regression.warnings) == 1 and "Spearman 0.300 vs 0.500" in regression.warnings[0]
    assert "\n" not in "".join(loses.warnings + far_below.warnings + regression.warnings)   # one line each


def test_a_losing_hybrid_is_not_told_to_try_the_hybrid():
    # chnsenticorp_like, hybrid over a weak fine-tune: dev 0.871 vs TF-IDF 0.872 was told "try --method hybrid"
    loses = compare("classification", "hybrid", {"accuracy": 0.871, "macro_f1": 0.871}, BASELINE | {"accuracy": 0.872,
                    "macro_f1": 0.872}, 2.0)
    assert len(loses.warnings) == 1 and "loses to the TF-IDF baseline" in loses.warnings[0]
    assert "--method hybrid" not in loses.warnings[0] and "fine-tuned on these labels" in loses.warnings[0]
    probe = compare("classification", "linear-probe", {"accuracy": 0.60, "macro_f1": 0.45}, BASELINE, 2.0)
    assert "--method hybrid" in probe.warnings[0] and "--epochs" not in probe.warnings[0]


def test_mcnemar_is_the_exact_two_sided_binomial_test():
    def right(only_model, only_baseline, both=20):
        return [True] * only_model + [False] * only_baseline + [True] * both, \
            [False] * only_model + [True] * only_baseline + [True] * both
    assert mcnemar(*right(0, 10)) == {"model_only": 0, "baseline_only": 10, "p_value": 2 / 1024}
    assert mcnemar(*right(3, 8))["p_value"] == 2 * (1 + 11 + 55 + 165) / 2 ** 11      # 0.2265625
    assert mcnemar(*right(5, 5))["p_value"] == 1.0 and mcnemar(*right(0, 0))["p_value"] == 1.0
    assert mcnemar(*right(8, 3)) == {"model_only": 8, "baseline_only": 3, "p_value": mcnemar(*right(3, 8))["p_value"]}
    assert mcnemar(*right(600, 700, both=0))["p_value"] < 0.01       # large counts: exact integers, no overflow


def test_a_one_text_loss_is_called_noise_and_a_large_one_is_not():
    gold = [0, 1] * 50
    baseline = list(gold)
    baseline[:3] = [1 - g for g in gold[:3]]                             # the baseline misses rows 0-2
    model = list(gold)
    model[3:7] = [1 - g for g in gold[3:7]]                              # the model misses rows 3-6: one text behind
    close = compare("classification", "fine-tuned", {"accuracy": 0.96, "macro_f1": 0.96}, BASELINE | {
                    "accuracy": 0.97, "macro_f1": 0.97}, 2.0, model, gold, ["a", "b"], baseline_predicted=baseline)
    assert close.paired == {"model_only": 3, "baseline_only": 4, "p_value": 1.0}
    assert "3 the fine-tuned model, 4 the baseline (McNemar p = 1: within noise)" in close.table()[-1]
    assert len(close.warnings) == 1 and "within noise on this dev set (McNemar p = 1)" in close.warnings[0]
    assert close.record()["paired"] == close.paired
    far = [1 - g for g in gold[:20]] + gold[20:]                         # the model misses 20 rows
    behind = compare("classification", "fine-tuned", {"accuracy": 0.80, "macro_f1": 0.80}, BASELINE | {
                     "accuracy": 0.97, "macro_f1": 0.97}, 2.0, far, gold, ["a", "b"], baseline_predicted=baseline)
    assert behind.paired["p_value"] < 0.001 and "a real difference" in behind.table()[-1]
    assert "noise" not in behind.warnings[0]
    unpaired = compare("classification", "fine-tuned", {"accuracy": 0.96, "macro_f1": 0.96}, BASELINE, 2.0)
    assert unpaired.paired is None and "paired" not in unpaired.record() and len(unpaired.table()) == 3


@pytest.fixture
def keyword_split(tmp_path):
    return {name: write_jsonl(tmp_path / f"{name}.jsonl", keyword_rows(n, seed))
            for name, n, seed in (("train", 120, 0), ("dev", 60, 1))}


def test_finetune_reports_the_baseline_beside_its_result(finetune_model_dir, keyword_split, tmp_path, capsys):
    # one epoch at a tiny lr: the random model stays at the prior, the baseline learns the keywords
    output = tmp_path / "ft"
    result = run_finetune(job_config(FinetuneConfig, model=str(finetune_model_dir), train=str(keyword_split["train"]),
                                         dev=str(keyword_split["dev"]), output=str(output), epochs=1, lr=1e-6,
                                         max_length=32, progress_bar=False))
    err = capsys.readouterr().err
    record = json.loads((output / "metrics.json").read_text(encoding="utf-8"))
    baseline = record["baseline"]
    assert baseline["dev"]["accuracy"] >= 0.85 and baseline["model_dev"] == result.metrics
    paired, rows = baseline["paired"], 60                                 # the two models on the same dev rows
    assert (paired["baseline_only"] - paired["model_only"]) / rows == pytest.approx(
        baseline["dev"]["accuracy"] - result.metrics["accuracy"])
    assert paired["p_value"] < 0.05 and "a real difference" in baseline["table"][-1]
    for line in baseline["table"]:                                     # printed as recorded
        assert line in err
    assert len(baseline["warnings"]) == 1 and f"warning: {baseline['warnings'][0]}" in err
    assert "--method hybrid" in baseline["warnings"][0]
    # what to try is relative to this run (1 epoch at 1e-6), not a fixed "--lr 1e-4" that the recipe already uses
    assert "(--epochs 2)" in baseline["warnings"][0] and "(--lr 2e-06)" in baseline["warnings"][0]
    events = [json.loads(line) for line in (output / "run" / "log.jsonl").read_text(encoding="utf-8").splitlines()]
    assert events[-1]["event"] == "baseline" and events[-1]["dev"] == baseline["dev"]
    assert (output / "run" / "baseline" / "linear.safetensors").is_file()     # a model folder of its own

    # evaluate --against pairs the same two saved models on the same dev file: the same counts as the table's
    assert main(["evaluate", "--model", str(output), "--input", str(keyword_split["dev"]), "--against",
                 str(output / "run" / "baseline")]) == 0
    captured = capsys.readouterr()
    scored = json.loads(captured.out)
    assert scored["accuracy"] == pytest.approx(result.metrics["accuracy"])
    assert scored["against"]["accuracy"] == pytest.approx(baseline["dev"]["accuracy"])
    assert scored["paired"] == {"model_only": paired["model_only"], "against_only": paired["baseline_only"],
                                "p_value": paired["p_value"]}
    assert "dev.jsonl rows only one saved model predicts right" in captured.err and "a real difference" in captured.err

    skipped = tmp_path / "ft_no_baseline"
    assert main(["finetune", "--model", str(finetune_model_dir), "--train", str(keyword_split["train"]), "--dev",
                 str(keyword_split["dev"]), "--output", str(skipped), "--epochs", "1", "--lr", "1e-6",
                 "--max-length", "32", "--no-baseline", "--progress_bar=false"]) == 0
    assert "baseline" not in json.loads((skipped / "metrics.json").read_text(encoding="utf-8"))
    assert not (skipped / "run" / "baseline").exists() and "TF-IDF baseline" not in capsys.readouterr().err


def test_against_refuses_a_model_that_is_not_a_classifier(keyword_split, tmp_path, capsys):
    rows = [{"text": f"{'good ' * (i % 4)}item {i}", "label": float(i % 4)} for i in range(40)]
    train, dev = write_jsonl(tmp_path / "r_train.jsonl", rows), write_jsonl(tmp_path / "r_dev.jsonl", rows[:20])
    assert main(["baseline", "--task", "regression", "--train", str(train), "--dev", str(dev), "--output",
                 str(tmp_path / "scores")]) == 0
    assert main(["baseline", "--train", str(keyword_split["train"]), "--dev", str(keyword_split["dev"]), "--output",
                 str(tmp_path / "labels")]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "labels"), "--input", str(keyword_split["dev"]),
                 "--against", str(tmp_path / "scores")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a regression model: --against pairs single-label classifiers" in err[0]


@pytest.mark.parametrize("command", ["baseline", "finetune"])
def test_bad_training_files_stop_with_one_line(command, finetune_model_dir, tmp_path, capsys):
    good = [{"text": "a vote in the city", "label": "politics"}, {"text": "the match was good", "label": "sport"}]
    cases = {
        "one_class": ([{"text": f"text {i}", "label": "pos"} for i in range(5)], good,
                      "train.jsonl: all 5 rows (lines 1-5) have the label 'pos'"),
        "unknown_dev_label": (good * 3, good + [{"text": "new words", "label": "tech"}],
                              "dev.jsonl:3: 1 bad row(s): 1 x unknown label"),
        "empty_text": (good + [{"text": "   ", "label": "sport"}] + good, good,
                       "train.jsonl:3: 1 bad row(s): 1 x empty text"),
    }
    for case, (train_rows, dev_rows, expected) in cases.items():
        folder = tmp_path / case
        folder.mkdir()
        train, dev = write_jsonl(folder / "train.jsonl", train_rows), write_jsonl(folder / "dev.jsonl", dev_rows)
        output = folder / "out"
        argv = [command, "--train", str(train), "--dev", str(dev), "--output", str(output)]
        if command == "finetune":
            argv += ["--model", str(finetune_model_dir), "--epochs", "1"]
        assert main(argv) == 2, case
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("bertkit: error: ") and expected in err[0], (case, err)
        assert not output.exists(), case                                 # nothing written
