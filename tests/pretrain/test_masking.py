import numpy as np
import pytest

from bertkit.pretrain.masking import IGNORE_INDEX, MaskingConfig, mask_row, row_rng, word_units

MASK, CLS, SEP, PAD = 4, 2, 3, 0
RANDOM_IDS = np.arange(10, 1000)


def sample_row(length=128, pad=16):
    ids = np.concatenate([[CLS], np.arange(100, 100 + length - 2 - pad), [SEP], np.full(pad, PAD)])
    maskable = (ids != CLS) & (ids != SEP) & (ids != PAD)
    words = np.ones(len(ids), dtype=bool)
    words[np.arange(len(ids)) % 3 == 1] = False   # words of 3 tokens: start, ##, ##
    return ids, maskable, words


@pytest.mark.parametrize("strategy", ["token", "whole-word", "span"])
def test_rates_and_never_special_or_padding(strategy):
    ids, maskable, words = sample_row()
    chosen = masked = randomized = kept = 0
    for i in range(400):
        row = mask_row(ids, maskable, MaskingConfig(strategy=strategy), row_rng(1, 0, i), MASK, RANDOM_IDS, words)
        predicted = row.labels != IGNORE_INDEX
        assert not predicted[~maskable].any()                      # never [CLS], [SEP] or padding
        assert (row.input_ids[~maskable] == ids[~maskable]).all()
        assert (row.labels[predicted] == ids[predicted]).all()
        chosen += predicted.sum()
        masked += (row.input_ids[predicted] == MASK).sum()
        kept += (row.input_ids[predicted] == ids[predicted]).sum()
        randomized += ((row.input_ids[predicted] != MASK) & (row.input_ids[predicted] != ids[predicted])).sum()
    rate = chosen / (400 * maskable.sum())
    assert rate == pytest.approx(0.15, abs=0.01)
    # per-unit decisions: words/spans make the token shares noisier, hence the wider tolerance
    tolerance = 0.02 if strategy == "token" else 0.04
    assert masked / chosen == pytest.approx(0.8, abs=tolerance)
    assert randomized / chosen == pytest.approx(0.1, abs=tolerance)
    assert kept / chosen == pytest.approx(0.1, abs=tolerance)


def test_whole_word_is_decided_once_per_word():
    ids, maskable, words = sample_row()
    for i in range(200):
        row = mask_row(ids, maskable, MaskingConfig(strategy="whole-word"), row_rng(0, 0, i), MASK, RANDOM_IDS, words)
        for unit in word_units(maskable, words):
            predicted = row.labels[unit] != IGNORE_INDEX
            assert predicted.all() or not predicted.any()          # the whole word or none of it
            if predicted.all():
                is_mask = row.input_ids[unit] == MASK
                is_kept = row.input_ids[unit] == ids[unit]
                # one decision for the word: all [MASK], all kept, or all random (random may hit the original)
                assert is_mask.all() or not is_mask.any()
                assert not (is_mask.any() and is_kept.any())


def test_span_lengths_are_bounded_whole_words():
    ids, maskable, words = sample_row(length=512, pad=0)
    config = MaskingConfig(strategy="span")
    for i in range(50):
        row = mask_row(ids, maskable, config, row_rng(0, 0, i), MASK, RANDOM_IDS, words)
        predicted = np.flatnonzero(row.labels != IGNORE_INDEX)
        runs = np.split(predicted, np.flatnonzero(np.diff(predicted) > 1) + 1)
        starts = {int(u[0]) for u in word_units(maskable, words)}
        ends = {int(u[-1]) for u in word_units(maskable, words)}
        for run in runs:
            assert run[0] in starts and run[-1] in ends            # spans are made of whole words
        assert max(len(r) for r in runs) <= 2 * 10 * 3            # two adjacent spans of <= 10 words at most


def test_masks_depend_only_on_seed_epoch_and_instance():
    ids, maskable, words = sample_row()
    a = mask_row(ids, maskable, MaskingConfig(), row_rng(5, 2, 17), MASK, RANDOM_IDS, words)
    b = mask_row(ids, maskable, MaskingConfig(), row_rng(5, 2, 17), MASK, RANDOM_IDS, words)
    c = mask_row(ids, maskable, MaskingConfig(), row_rng(5, 3, 17), MASK, RANDOM_IDS, words)
    assert (a.input_ids == b.input_ids).all() and (a.labels == b.labels).all()
    assert (a.labels != c.labels).any()                            # dynamic: a new mask next epoch


def test_nothing_maskable_gives_no_labels():
    ids = np.array([CLS, SEP, PAD])
    row = mask_row(ids, np.zeros(3, dtype=bool), MaskingConfig(), row_rng(0, 0, 0), MASK, RANDOM_IDS)
    assert (row.labels == IGNORE_INDEX).all() and (row.input_ids == ids).all()
