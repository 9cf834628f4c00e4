"""Sequence-head logits -> predictions: the one place where logits become a label, a score or labels.

`Model.predict` / `bertkit predict`, the server's /predict, prompt classifiers and ONNX models all call
`sequence_predictions`, so an offline predictions file and a server answer for the same folder cannot drift:
- classification, pair-classification, prompt-classification: {"label", "score", "scores"} (softmax);
- multi-label: {"labels", "scores"} (sigmoid per label; a label is on when its probability > 0.5, the same
  decision `evaluate` scores);
- regression: {"score"} (the head's one output);
- NER (`entity_prediction`): {"tokens", "tags", "entities"}, each word tagged from its first sub-token.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from bertkit.finetune.entity_metrics import entities

MULTI_LABEL_THRESHOLD = 0.5   # sigmoid probability above which a label is predicted (logit > 0)
REGRESSION, MULTI_LABEL = "regression", "multi-label"


def softmax(logits: np.ndarray) -> np.ndarray:
    """Over the last axis, shifted by the row maximum so large logits do not overflow."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-logits))


def multi_label_decisions(logits: np.ndarray) -> np.ndarray:
    """(N, L) logits -> (N, L) booleans: which labels a multi-label model predicts."""
    return sigmoid(logits) > MULTI_LABEL_THRESHOLD


def label_names_for(labels: Optional[Sequence[str]], count: int) -> list[str]:
    """The saved label names, or "0".."count-1" when the folder has none (or a list of the wrong length)."""
    return [str(n) for n in labels] if labels is not None and len(labels) == count else [str(i) for i in range(count)]


def sequence_predictions(logits: np.ndarray, task: Optional[str], labels: Optional[Sequence[str]]) -> list[dict]:
    """(N, L) logits of N texts -> one prediction dict per text (see the module docstring for the keys).
    Any task other than regression and multi-label is read as single-label classification."""
    logits = np.asarray(logits, dtype=np.float64)
    if len(logits) == 0:
        return []
    if logits.ndim != 2:
        raise ValueError(f"expected (texts, labels) logits, got shape {logits.shape}")
    if task == REGRESSION:
        return [{"score": float(row[0])} for row in logits]
    names = label_names_for(labels, logits.shape[-1])
    if task == MULTI_LABEL:
        probabilities, decisions = sigmoid(logits), multi_label_decisions(logits)   # the decision evaluate scores
        return [{"labels": [n for n, on in zip(names, row_on) if on],
                 "scores": {n: float(p) for n, p in zip(names, row)}} for row, row_on in zip(probabilities, decisions)]
    return class_predictions(softmax(logits), names)


def class_predictions(probabilities: np.ndarray, names: Sequence[str]) -> list[dict]:
    """(N, L) class probabilities (a softmax, or a linear model's predict_proba) -> {"label", "score", "scores"}."""
    return [{"label": names[int(row.argmax())], "score": float(row.max()),
             "scores": {n: float(p) for n, p in zip(names, row)}} for row in probabilities]


def entity_prediction(words: Sequence[str], tags: Sequence[str], probabilities: Sequence[float],
                      spans: Optional[Sequence[tuple[int, int]]] = None, text: Optional[str] = None) -> dict:
    """One text's word tags (BIO/BIOES) -> {"tokens", "tags", "entities"}. Each entity: type, its words
    [start_word, end_word), text, the mean probability of its words' tags as score, and with `spans` and `text`
    its character span [start, end) in the text (text = text[start:end]); else text is its words joined."""
    found = []
    for entity in entities(tags):
        item = {"type": entity.type, "start_word": entity.start, "end_word": entity.end + 1,
                "text": " ".join(words[entity.start:entity.end + 1]),
                "score": float(np.mean(probabilities[entity.start:entity.end + 1]))}
        if spans is not None and text is not None:
            start, end = spans[entity.start][0], spans[entity.end][1]
            item.update(start=int(start), end=int(end), text=text[start:end])
        found.append(item)
    return {"tokens": list(words), "tags": list(tags), "entities": found}
