"""Classification and regression metrics: accuracy, macro-F1, MCC, Pearson, Spearman (numpy only).

They match scikit-learn / scipy on the same inputs (MCC is the multi-class R_K of Gorodkin 2004, as
sklearn computes it; Spearman ranks ties by their average, as scipy does).
"""
from __future__ import annotations

import numpy as np


def accuracy(gold, predicted) -> float:
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    return float((gold == predicted).mean()) if gold.size else 0.0


def _confusion(gold, predicted, num_labels: int) -> np.ndarray:
    matrix = np.zeros((num_labels, num_labels), dtype=np.int64)
    np.add.at(matrix, (np.asarray(gold, dtype=np.int64), np.asarray(predicted, dtype=np.int64)), 1)
    return matrix                                             # rows: gold, columns: predicted


def macro_f1(gold, predicted, num_labels: int | None = None) -> float:
    """Mean F1 over the classes present in gold or predictions (sklearn's average="macro")."""
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    num_labels = num_labels or int(max(gold.max(initial=0), predicted.max(initial=0))) + 1
    matrix = _confusion(gold, predicted, num_labels)
    true_pos = np.diag(matrix).astype(float)
    support, guessed = matrix.sum(axis=1), matrix.sum(axis=0)
    present = (support + guessed) > 0
    denominator = support + guessed
    f1 = np.divide(2 * true_pos, denominator, out=np.zeros_like(true_pos), where=denominator > 0)
    return float(f1[present].mean()) if present.any() else 0.0


def matthews_corrcoef(gold, predicted, num_labels: int | None = None) -> float:
    gold, predicted = np.asarray(gold), np.asarray(predicted)
    num_labels = num_labels or int(max(gold.max(initial=0), predicted.max(initial=0))) + 1
    matrix = _confusion(gold, predicted, num_labels).astype(float)
    t, p = matrix.sum(axis=1), matrix.sum(axis=0)
    correct, total = np.trace(matrix), matrix.sum()
    numerator = correct * total - t @ p
    denominator = np.sqrt((total ** 2 - p @ p) * (total ** 2 - t @ t))
    return float(numerator / denominator) if denominator > 0 else 0.0


def pearson(x, y) -> float:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    x, y = x - x.mean(), y - y.mean()
    denominator = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denominator) if denominator > 0 else 0.0


def _average_ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=float)
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + end - 1) / 2 + 1   # ties share their mean rank
            start = end
    return ranks


def spearman(x, y) -> float:
    return pearson(_average_ranks(np.asarray(x, dtype=float)), _average_ranks(np.asarray(y, dtype=float)))


def classification_metrics(gold, predicted, num_labels: int) -> dict[str, float]:
    return {"accuracy": accuracy(gold, predicted), "macro_f1": macro_f1(gold, predicted, num_labels),
            "mcc": matthews_corrcoef(gold, predicted, num_labels)}


def mean_cross_entropy(logits, gold) -> float:
    """The unweighted mean cross-entropy (nats) of (N, K) logits against N gold labels: the dev loss that breaks a
    tie in accuracy between two evaluations (a dev set of a few hundred texts often scores two epochs the same)."""
    logits, gold = np.asarray(logits, dtype=np.float64), np.asarray(gold, dtype=np.int64)
    if not len(gold):
        return float("nan")
    top = logits.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
    return float((log_norm - logits[np.arange(len(gold)), gold]).mean())


def multilabel_metrics(gold: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """gold, predicted: (N, L) 0/1. Exact-match (subset) accuracy, micro-F1 and macro-F1 over labels."""
    gold, predicted = np.asarray(gold, dtype=bool), np.asarray(predicted, dtype=bool)
    true_pos = (gold & predicted).sum(axis=0).astype(float)
    denominator = (gold.sum(axis=0) + predicted.sum(axis=0)).astype(float)
    per_label = np.divide(2 * true_pos, denominator, out=np.zeros_like(true_pos), where=denominator > 0)
    present = denominator > 0
    micro_denominator = denominator.sum()
    return {"subset_accuracy": float((gold == predicted).all(axis=1).mean()),
            "micro_f1": float(2 * true_pos.sum() / micro_denominator) if micro_denominator else 0.0,
            "macro_f1": float(per_label[present].mean()) if present.any() else 0.0}


def regression_metrics(gold, predicted) -> dict[str, float]:
    gold, predicted = np.asarray(gold, dtype=float), np.asarray(predicted, dtype=float)
    return {"pearson": pearson(gold, predicted), "spearman": spearman(gold, predicted),
            "mse": float(((gold - predicted) ** 2).mean())}
