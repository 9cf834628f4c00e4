"""Metrics against hand-computed values (and sklearn / scipy where installed)."""
from __future__ import annotations

import numpy as np
import pytest

from bertkit.finetune.entity_metrics import Entity, entities, entity_scores
from bertkit.finetune.metrics import (accuracy, macro_f1, matthews_corrcoef, mean_cross_entropy, multilabel_metrics,
                                      pearson, spearman)
from bertkit.finetune.squad_metrics import exact_match, f1, normalize_answer, squad_scores

GOLD = [0, 1, 2, 2, 1, 0, 2, 1]
PRED = [0, 2, 2, 2, 1, 0, 1, 1]


def test_classification_metrics_by_hand():
    assert accuracy(GOLD, PRED) == 6 / 8
    # per class F1: 0 -> 1.0, 1 -> 2*2/(3+3)=2/3, 2 -> 2*2/(3+3)=2/3
    assert macro_f1(GOLD, PRED) == pytest.approx((1 + 2 / 3 + 2 / 3) / 3)
    assert matthews_corrcoef([0, 0, 1, 1], [0, 0, 1, 1]) == 1.0
    assert matthews_corrcoef([0, 1, 0, 1], [1, 1, 1, 1]) == 0.0


def test_mean_cross_entropy_by_hand_and_against_sklearn():
    assert mean_cross_entropy(np.zeros((3, 4)), [0, 1, 3]) == pytest.approx(np.log(4))   # uniform over 4 classes
    assert mean_cross_entropy([[1000.0, 0.0]], [0]) == pytest.approx(0.0)                  # no overflow
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    logits, gold = rng.normal(size=(50, 3)) * 3, rng.integers(0, 3, 50)
    probabilities = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert mean_cross_entropy(logits, gold) == pytest.approx(metrics.log_loss(gold, probabilities, labels=[0, 1, 2]))


def test_against_sklearn_and_scipy():
    metrics = pytest.importorskip("sklearn.metrics")
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    gold, pred = rng.integers(0, 4, 200), rng.integers(0, 4, 200)
    assert macro_f1(gold, pred, 4) == pytest.approx(metrics.f1_score(gold, pred, average="macro"))
    assert matthews_corrcoef(gold, pred, 4) == pytest.approx(metrics.matthews_corrcoef(gold, pred))
    x, y = rng.normal(size=50), rng.integers(0, 5, 50).astype(float)   # ties in y
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0])


def test_multilabel_metrics():
    gold = np.array([[1, 0, 1], [0, 1, 0]])
    pred = np.array([[1, 0, 0], [0, 1, 0]])
    result = multilabel_metrics(gold, pred)
    assert result["subset_accuracy"] == 0.5 and result["micro_f1"] == pytest.approx(2 * 2 / (3 + 2))


def test_entities_bio_bioes_and_seqeval_rules():
    assert entities(["B-PER", "I-PER", "O", "B-LOC"]) == [Entity("PER", 0, 1), Entity("LOC", 3, 3)]
    assert entities(["S-PER", "B-LOC", "I-LOC", "E-LOC", "O"]) == [Entity("PER", 0, 0), Entity("LOC", 1, 3)]
    # seqeval's default mode: an I- tag after O starts an entity; a type change ends one.
    assert entities(["O", "I-PER", "I-PER", "I-LOC"]) == [Entity("PER", 1, 2), Entity("LOC", 3, 3)]
    assert entities(["U-ORG", "B-PER", "L-PER"]) == [Entity("ORG", 0, 0), Entity("PER", 1, 2)]


def test_entity_scores():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "B-LOC"]]
    result = entity_scores(gold, pred)
    assert result["precision"] == pytest.approx(2 / 3) and result["recall"] == pytest.approx(2 / 3)
    assert result["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    seqeval = pytest.importorskip("seqeval.metrics")
    assert result["f1"] == pytest.approx(seqeval.f1_score(gold, pred))


def test_squad_normalization_as_the_official_script():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert exact_match("the Paris", "Paris.") == 1
    assert f1("in Paris France", "Paris") == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))
    assert f1("", "") == 1.0 and f1("x", "") == 0.0


def test_squad_scores_v2_split():
    result = squad_scores({"a": "Paris", "b": "", "c": "London"}, {"a": ["Paris", "in Paris"], "b": [], "c": []})
    assert result["exact_match"] == pytest.approx(200 / 3)
    assert result["has_answer_exact_match"] == 100.0 and result["no_answer_exact_match"] == 50.0
