"""Head outputs -> what /predict answers: labels with probabilities, values, or entity spans in the text."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from bertkit.finetune.entity_metrics import entities


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def _names(labels: Sequence[str], count: int) -> list[str]:
    return list(labels) if len(labels) == count else [str(i) for i in range(count)]


def describe_sequence(logits: np.ndarray, task: str, labels: Sequence[str]) -> dict:
    """(L,) logits of one text -> {"label", "score", "scores"} | {"labels", "scores"} | {"value"}."""
    if task == "regression":
        return {"value": float(logits[0])}
    names = _names(labels, logits.shape[-1])
    if task == "multi-label":
        probabilities = 1.0 / (1.0 + np.exp(-logits))
        return {"labels": [n for n, p in zip(names, probabilities) if p >= 0.5],
                "scores": {n: round(float(p), 6) for n, p in zip(names, probabilities)}}
    probabilities = _softmax(logits)
    best = int(probabilities.argmax())
    return {"label": names[best], "score": round(float(probabilities[best]), 6),
            "scores": {n: round(float(p), 6) for n, p in zip(names, probabilities)}}


def describe_entities(logits: np.ndarray, offsets: Sequence[tuple[int, int]], text: str,
                      labels: Sequence[str]) -> dict:
    """(T, L) token logits -> entity spans with character offsets into `text` (special tokens ignored)."""
    names = _names(labels, logits.shape[-1])
    probabilities = _softmax(logits)
    best = probabilities.argmax(axis=-1)
    tags = [names[int(b)] if end > start else "O" for b, (start, end) in zip(best, offsets)]
    found = []
    for entity in entities(tags):
        start, end = offsets[entity.start][0], offsets[entity.end][1]
        score = float(probabilities[np.arange(entity.start, entity.end + 1), best[entity.start:entity.end + 1]].mean())
        found.append({"type": entity.type, "text": text[start:end], "start": int(start), "end": int(end),
                      "score": round(score, 6)})
    return {"entities": found}
