"""The default fine-tuning recipe as a pure function of the data and the model, over data and model sizes."""
from __future__ import annotations

import pytest

from bertkit.finetune.recipe import (DataProfile, ModelProfile, Requested, choose_recipe, class_weights_for,
                                     default_lr, describe)

MINILM = ModelProfile(hidden_size=384, num_layers=6, max_positions=512, fast_bf16=True)
BASE = ModelProfile(hidden_size=768, num_layers=12, max_positions=512, fast_bf16=False)
TINY = ModelProfile(hidden_size=128, num_layers=2, max_positions=128, fast_bf16=False)


def classification(rows: int, counts=(1, 1), length: int = 12, long_tail: int = 0) -> DataProfile:
    """`rows` texts of `length` tokens (plus `long_tail` of 2000), labels in the proportions of `counts`."""
    labels = []
    for label, share in enumerate(counts):
        labels += [label] * round(rows * share / sum(counts))
    labels = (labels + [0] * rows)[:rows]
    lengths = [length] * (rows - long_tail) + [2000] * long_tail
    return DataProfile.of("classification", lengths, labels, len(counts))


def test_lr_follows_the_model_width():
    assert default_lr(384) == pytest.approx(1.5e-4)     # MiniLM-L6: best dev on the proxy and chnsenticorp_like
    assert default_lr(768) == pytest.approx(5.3e-5)     # BERT-base: at the top of the paper's 2e-5..5e-5
    assert default_lr(1024) == pytest.approx(3.4e-5)    # BERT-large
    assert default_lr(128) == pytest.approx(7.8e-4)     # tiny BERTs want ~1e-4..1e-3
    assert default_lr(16) == pytest.approx(5e-3)        # clipped


def test_token_tasks_keep_the_rate_they_were_measured_at():
    for task in ("ner", "qa"):
        assert default_lr(384, task) == pytest.approx(1e-4)
        assert default_lr(128, task) == pytest.approx(5.2e-4)
        assert default_lr(32, task) == pytest.approx(4.2e-3)      # toy widths (tests)
        recipe = choose_recipe(DataProfile.of(task, [0] * 1000), MINILM)
        assert recipe.lr == pytest.approx(1e-4) and recipe.reasons["lr"].startswith("0.0001 x (384")
    recipe = choose_recipe(classification(6000), MINILM)
    assert recipe.lr == pytest.approx(1.5e-4) and recipe.reasons["lr"].startswith("0.00015 x (384")


@pytest.mark.parametrize("rows, batch, epochs, eval_every", [
    (32, 16, 20, 0),          # few-shot: the most epochs
    (1467, 16, 11, 0),        # BBC: 92 steps an epoch
    (6000, 32, 6, 0),         # the proxy / held-out size: 188 steps an epoch
    (13889, 32, 3, 0),        # chnsenticorp_like: 435 steps an epoch
    (35635, 32, 2, 372),      # People's Daily size: 1,114 steps an epoch, evaluated 3 times an epoch
])
def test_epochs_batch_and_evaluation_follow_the_data_size(rows, batch, epochs, eval_every):
    recipe = choose_recipe(classification(rows), MINILM)
    assert (recipe.batch_size, recipe.epochs, recipe.eval_every) == (batch, epochs, eval_every)
    assert recipe.early_stopping_patience == 2 and recipe.warmup_ratio == 0.1


def test_new_head_trains_faster_than_the_encoder_and_a_saved_head_does_not():
    assert choose_recipe(classification(6000), MINILM).head_lr == pytest.approx(3e-3)   # 20 x 1.5e-4
    assert choose_recipe(classification(6000), TINY).head_lr == pytest.approx(5e-3)   # capped, still > lr
    assert choose_recipe(classification(6000), ModelProfile(16, 2, 64, False)).head_lr == pytest.approx(5e-3)
    saved = ModelProfile(384, 6, 512, True, new_head=False)
    assert choose_recipe(classification(6000), saved).head_lr is None


def test_class_weights_only_for_skewed_labels():
    assert choose_recipe(classification(6000, counts=(1, 1, 2)), MINILM).class_weights is None
    skewed = classification(6000, counts=(100, 10, 1))
    weights = choose_recipe(skewed, MINILM).class_weights
    assert weights[0] < weights[1] < weights[2]
    assert weights[2] / weights[0] == pytest.approx((100 / 1) ** 0.5, rel=0.05)   # sqrt of the count ratio
    counts = skewed.label_counts
    assert sum(w * c for w, c in zip(weights, counts)) / sum(counts) == pytest.approx(1.0)   # loss keeps its scale
    assert choose_recipe(skewed, MINILM, Requested(class_weights="none")).class_weights is None
    assert choose_recipe(DataProfile.of("ner", [20] * 100), MINILM).class_weights is None


def test_balanced_weights_equalize_the_classes():
    weights = class_weights_for([300, 100, 0], power=1.0)
    assert weights[0] * 300 == pytest.approx(weights[1] * 100) and weights[2] == 1.0


@pytest.mark.parametrize("model, length, long_tail, expected", [
    (MINILM, 12, 0, 32),       # short texts: short rows (a multiple of 32)
    (MINILM, 70, 0, 96),
    (MINILM, 400, 10, 416),    # 10 of 6,000 very long texts do not set the length
    (MINILM, 400, 600, 512),   # 10% long texts: the model's limit (the rest keep head and tail)
    (TINY, 400, 0, 128),
])
def test_max_length_from_the_length_distribution(model, length, long_tail, expected):
    assert choose_recipe(classification(6000, length=length, long_tail=long_tail), model).max_length == expected


def test_task_defaults_for_ner_and_qa():
    assert choose_recipe(DataProfile.of("qa", [0] * 1000), MINILM).max_length == 384
    assert choose_recipe(DataProfile.of("qa", [0] * 1000), TINY).max_length == 128
    assert choose_recipe(DataProfile.of("ner", [40] * 1000), MINILM).max_length == 128


def test_precision_follows_the_hardware_unless_set():
    assert choose_recipe(classification(100), MINILM).precision == "bf16"
    assert choose_recipe(classification(100), BASE).precision == "fp32"
    assert choose_recipe(classification(100), MINILM, Requested(precision="fp32")).precision == "fp32"


def test_user_settings_win_and_are_named():
    asked = Requested(epochs=1, lr=3e-5, batch_size=8, max_length=64, early_stopping_patience=0, eval_every=5)
    recipe = choose_recipe(classification(6000, counts=(100, 1)), MINILM, asked)
    assert (recipe.epochs, recipe.lr, recipe.batch_size, recipe.max_length) == (1, 3e-5, 8, 64)
    assert recipe.early_stopping_patience is None and recipe.eval_every == 5
    assert recipe.head_lr == pytest.approx(6e-4)          # 20 x the user's lr
    assert recipe.reasons["lr"] == "set by the user" and "skewed" in recipe.reasons["class_weights"]


def test_describe_names_the_choices_and_the_data():
    data = classification(6000, counts=(100, 1), length=12, long_tail=5)
    text = describe(choose_recipe(data, MINILM), data)
    assert text.count("\n") == 1
    assert "6 epochs (at most 30m), lr 0.00015, head lr 0.003, batch 32" in text and "class-weighted" in text
    assert "5 rows longer than max_length" in text and "2 labels, 5941..59 rows each" in text


def test_time_cap_only_when_the_recipe_chose_the_epochs():
    assert choose_recipe(classification(6000), MINILM).time_budget == "30m"
    assert choose_recipe(classification(6000), MINILM, Requested(epochs=3)).time_budget is None
    assert choose_recipe(classification(6000), MINILM, Requested(time_budget="off")).time_budget is None
    assert choose_recipe(classification(6000), MINILM, Requested(time_budget="5m")).time_budget == "5m"


def test_early_stopping_waits_for_three_quarters_of_the_run_unless_the_user_set_it():
    assert choose_recipe(classification(6000), MINILM).early_stopping_start == 0.75
    assert choose_recipe(classification(6000), MINILM, Requested(early_stopping_patience=3)).early_stopping_start == 0
