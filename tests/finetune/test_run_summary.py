"""What finetune prints says what ran: the recipe line under --max-steps, QA's token lengths, the epochs a run
made, and a rerun that kept the earlier model gives each run's figures apart."""
from __future__ import annotations

import json

from bertkit.checkpoints import load_checkpoint
from bertkit.cli import main as cli_main
from bertkit.data.squad import Answer, QAExample
from bertkit.finetune import FinetuneConfig, run_finetune
from bertkit.finetune.recipe import DataProfile, ModelProfile, Requested, choose_recipe, describe, profile_data
from bertkit.job_config import job_config
from test_finetune import FAST, sentiment_rows, write_jsonl

TINY = ModelProfile(hidden_size=32, num_layers=2, max_positions=64, fast_bf16=False)


def tiny_run(model_dir, tmp_path, **settings):
    train = write_jsonl(tmp_path / "train.jsonl", sentiment_rows(64, 0))    # batch 8: 8 steps an epoch
    return run_finetune(job_config(FinetuneConfig, model=str(model_dir), train=str(train),
                                   output=str(tmp_path / "m"), batch_size=8, max_length=16, progress_bar=False,
                                   baseline=False, **settings))


def test_max_steps_recipe_line_says_the_steps_and_the_epochs_fraction(finetune_model_dir, tmp_path, capsys):
    result = tiny_run(finetune_model_dir, tmp_path, max_steps=10)
    printed = capsys.readouterr().err
    # the recipe's 20 epochs (~1000 steps at 8 an epoch, at most 20) do not run: 10 steps do
    assert "recipe: 10 steps (max_steps; the recipe's 20 epochs would be 160 steps), lr" in printed
    assert "recipe: 20 epochs" not in printed
    assert result.steps == 10 and result.epochs == 1.25           # 10 of 8 steps an epoch
    metrics = json.loads((result.output / "metrics.json").read_text())
    assert (metrics["epochs"], metrics["steps"]) == (1.25, 10)
    assert result.summary()["epochs"] == 1.25
    data = DataProfile.of("classification", [12] * 64, [0, 1] * 32, 2)
    recipe = choose_recipe(data, TINY, Requested(epochs=50, batch_size=8, max_steps=3))
    assert describe(recipe, data).startswith("recipe: 3 steps (max_steps; the given 50 epochs would be 400 steps), lr")


def test_qa_length_profile_counts_question_and_context(finetune_model_dir):
    tokenizer = load_checkpoint(finetune_model_dir).tokenizer
    context = "alice went to paris . bob went to london . " * 10
    example = QAExample("q0", "where bob went to ?", context, (Answer("london", context.index("london")),), False)
    data = profile_data("qa", tokenizer, [example] * 3, [])
    question, passage = (len(tokenizer.encode_batch([text], max_length=None, truncation=None).input_ids[0]) - 2
                         for text in (example.question, context))
    assert data.token_lengths == (question + passage + 3,) * 3 == (5 + 100 + 3,) * 3
    recipe = choose_recipe(data, TINY)                          # max_length 64: each row is windowed
    assert describe(recipe, data).endswith("token length median 108 / p99 108; 3 rows longer than max_length "
                                           "(read in overlapping windows)")


def test_rerun_that_keeps_the_earlier_model_reports_each_run_apart(finetune_model_dir, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", sentiment_rows(64, 0))
    dev = write_jsonl(tmp_path / "dev.jsonl", sentiment_rows(24, 1))
    flags = ["finetune", "--model", str(finetune_model_dir), "--train", str(train), "--dev", str(dev), "--output",
             str(tmp_path / "m"), "--batch-size", "16", "--max-length", "24", "--warmup-ratio", "0",
             "--early-stopping-patience", "0", "--train.progress_bar=false", "--no-baseline"]
    assert cli_main([*flags, "--epochs", str(FAST["epochs"]), "--lr", "5e-3"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["kept"] == "this run" and first["dev"]["accuracy"] >= 0.9
    assert cli_main([*flags, "--max-steps", "2", "--lr", "1e-6"]) == 0          # learns nothing
    second = json.loads(capsys.readouterr().out)
    assert second["kept"] == "previous" and "dev" not in second and "steps" not in second
    assert second["previous"] == {"dev": first["dev"]}
    run = second["this_run"]
    assert run["steps"] == 2 and run["epochs"] == 0.5 and run["dev"]["accuracy"] < first["dev"]["accuracy"]
    saved = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert saved["dev"] == first["dev"] and saved["last_run_not_saved"]["dev"] == run["dev"]
