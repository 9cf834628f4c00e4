"""The default recipe end to end on a tiny model: it learns a planted long-tailed signal, class weights raise
the recall of a rare class, the recipe is printed and recorded, and head+tail truncation keeps exact ends."""
from __future__ import annotations

import json
import random

import pytest

from bertkit.job_config import job_config
from bertkit.finetune import FinetuneConfig, evaluate_file, predict, run_finetune
from bertkit.finetune.classification import SequenceTask
from bertkit.tokenizer.encoding import head_tokens
from bertkit.tokenizer import Tokenizer

# Six classes with a long tail (160 rows down to 5); each class has its own keyword, among filler words.
KEYWORDS = ("good", "bad", "paris", "london", "alice", "bob")
TAIL_COUNTS = (160, 80, 40, 20, 10, 5)
FILLER = "the a is was movie film book went to in city".split()


def planted_rows(counts, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for keyword, count in zip(KEYWORDS, counts):
        for _ in range(count):
            words = rng.sample(FILLER, 2)
            words.insert(rng.randrange(3), keyword)
            rows.append({"text": " ".join(words), "label": keyword})
    rng.shuffle(rows)
    return rows


def ambiguous_rows(counts: dict[str, int], seed: int) -> list[dict]:
    """Two distinct texts only, "paris paris paris" (the cue) and "movie film book", so nothing but P(label | cue)
    can be learned. 'rare' rows hold the cue 90% of the time, 'common' rows 10%. Among rows with the cue,
    P(rare) = 0.9 n_rare / (0.9 n_rare + 0.1 n_common): with 300 common and 20 rare training rows about 0.375, so
    the unweighted Bayes decision is 'common' for both texts; a loss weighted by sqrt(300 / 20) ~ 3.9 tips the cue
    text to 'rare' (weighted posterior ~0.70)."""
    rng = random.Random(seed)
    rows = []
    for label, count in counts.items():
        cue_rate = 0.9 if label == "rare" else 0.1
        rows += [{"text": "paris paris paris" if rng.random() < cue_rate else "movie film book", "label": label}
                 for _ in range(count)]
    rng.shuffle(rows)
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_default_recipe_learns_a_long_tailed_planted_signal(finetune_model_dir, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", planted_rows(TAIL_COUNTS, 0))
    dev = write_jsonl(tmp_path / "dev.jsonl", planted_rows((8,) * 6, 1))
    test = write_jsonl(tmp_path / "test.jsonl", planted_rows((20,) * 6, 2))
    # no settings beyond model and data (progress_bar only silences the bar)
    result = run_finetune(job_config(FinetuneConfig, model=str(finetune_model_dir), train=str(train), dev=str(dev),
                                         output=str(tmp_path / "m"), progress_bar=False))
    scores = evaluate_file(result.output, test)
    # A random-init 2 x 32 model (no pre-training): the keyword is the only signal. Majority-class guessing gives
    # macro-F1 0.05 on this balanced test set; 0.78-0.83 were measured (all classes but the rarest, 5 rows).
    assert scores["macro_f1"] >= 0.75, scores
    printed = capsys.readouterr().err
    assert "recipe: 20 epochs (at most 30m), lr 0.005, head lr 0.005, batch 16" in printed
    assert "class-weighted loss" in printed
    recorded = json.loads((result.output / "run" / "recipe.json").read_text())
    weights = dict(zip(sorted(KEYWORDS), recorded["class_weights"]))
    assert recorded["epochs"] == 20 and weights["bob"] > weights["london"] > weights["good"]   # 5, 20, 160 rows
    effective = json.loads((result.output / "run" / "config.effective.json").read_text())
    assert (effective["train"]["lr"], effective["train"]["head_lr"], effective["data"]["batch_size"]) == (5e-3, 5e-3, 16)
    # the kept model: the best dev accuracy, and among evaluations equal in it the lowest dev loss
    log = [json.loads(line) for line in (result.output / "run" / "log.jsonl").read_text().splitlines()]
    evals = [row["eval"] for row in log if "eval" in row]
    top = max(e["accuracy"] for e in evals)
    assert result.metrics["loss"] == min(e["loss"] for e in evals if e["accuracy"] == top), evals
    # the steps, not the 30-minute cap, drove this run's schedule: nothing said (a first step slowed by start-up
    # may put the clock a hair ahead; the line needs 5% of the run)
    assert "followed the" not in printed
    assert json.loads((result.output / "metrics.json").read_text()).get("schedule_clock_lead", 0.0) < 0.05


def test_a_run_whose_schedule_the_time_cap_drove_says_so(finetune_model_dir, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", planted_rows(TAIL_COUNTS, 0))
    dev = write_jsonl(tmp_path / "dev.jsonl", planted_rows((8,) * 6, 1))
    # 100,000 planned steps cannot fit in one second: the clock leads the steps by ~100% of the run
    result = run_finetune(job_config(FinetuneConfig, model=str(finetune_model_dir), train=str(train), dev=str(dev),
                                     output=str(tmp_path / "m"), max_steps=100_000, time_budget="1s",
                                     early_stopping_patience=0, progress_bar=False, baseline=False))
    assert result.stop_reason == "time_budget" and result.steps < 50_000
    assert json.loads((result.output / "metrics.json").read_text())["schedule_clock_lead"] > 0.5
    printed = capsys.readouterr().err
    assert "the lr schedule followed the 1s time cap, not the planned steps" in printed
    assert "--time-budget off makes the schedule follow the steps" in printed


@pytest.mark.slow
def test_class_weights_raise_the_recall_of_a_rare_class(finetune_model_dir, tmp_path, seed=0):
    train = write_jsonl(tmp_path / "train.jsonl", ambiguous_rows({"common": 300, "rare": 20}, seed))
    rare_test = ambiguous_rows({"rare": 200}, seed + 20)
    recall = {}
    for weights in ("auto", "none"):
        result = run_finetune(job_config(FinetuneConfig, model=str(finetune_model_dir), train=str(train),
                                             output=str(tmp_path / weights), class_weights=weights,
                                             early_stopping_patience=0, seed=seed, progress_bar=False))
        predicted = predict(str(result.output), [row["text"] for row in rare_test])
        recall[weights] = sum(p["label"] == "rare" for p in predicted) / len(rare_test)
    # No dev set: the final models are compared (picking the best dev epoch would pick a lucky early epoch of the
    # unweighted run). Bayes-optimal recall of 'rare' is 0 unweighted and ~0.9 (the cue rate) weighted; measured
    # with seeds 0, 1, 2: weighted 0.900, 0.895, 0.885, unweighted 0.0 each.
    assert recall["none"] <= 0.05 and recall["auto"] >= 0.8, recall


def test_head_plus_tail_keeps_exactly_the_first_and_last_tokens(finetune_model_dir):
    tokenizer = Tokenizer.from_folder(finetune_model_dir)
    words = "good great fine nice bad awful poor sad movie film book the a is was what word means paris".split()
    text = " ".join(words * 3)                          # 57 single-token words
    for max_length in (12, 24, 40):
        task = SequenceTask("classification", tokenizer, ["x"], max_length=max_length, long_texts="head+tail")
        row = task.encode([type("E", (), {"text": text, "text_pair": None, "label": None})()], quiet=True)[0]
        body = [tokenizer.token_to_id(w) for w in words * 3]
        head = head_tokens(max_length - 2)
        assert row.input_ids == [tokenizer.cls_id, *body[:head], *body[len(body) - (max_length - 2 - head):],
                                 tokenizer.sep_id]
        assert row.token_type_ids == [0] * max_length
    assert head_tokens(510) == 128                      # Sun et al. 2019: first 128 + last 382 tokens
    short = SequenceTask("classification", tokenizer, ["x"], max_length=64, long_texts="head+tail")
    row = short.encode([type("E", (), {"text": "good movie", "text_pair": None, "label": None})()], quiet=True)[0]
    assert row.input_ids == [tokenizer.cls_id, tokenizer.token_to_id("good"), tokenizer.token_to_id("movie"),
                             tokenizer.sep_id]
