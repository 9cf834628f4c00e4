"""/rerank and /similarity, as Text Embeddings Inference answers them.

/rerank scores (query, text) pairs with a cross-encoder: a folder fine-tuned for pair-classification (two
labels, the relevant one named "relevant", "positive", "1" or "true", else the second) or for regression (one
output), as `bertkit finetune --task rerank` saves it. The relevance logit is logit(relevant) - logit(other)
(one output: the output itself), and its probability the sigmoid of that: for two labels, exactly the softmax
probability /predict gives for the relevant label. /similarity is the cosine of the source sentence's vector
with each sentence's (the model's own sentence path, normalized).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from bertkit.finetune.predictions import sigmoid

RERANK_TASKS = ("pair-classification", "regression")
RELEVANT_NAMES = ("relevant", "positive", "1", "true", "yes")


def relevant_label(label_names: Sequence[str], num_outputs: int) -> Optional[int]:
    """Index of the relevant label of a two-label head; None for a one-output head."""
    if num_outputs == 1:
        return None
    lowered = [name.lower() for name in label_names]
    for name in RELEVANT_NAMES:
        if name in lowered:
            return lowered.index(name)
    return 1


def rerank_problem(task: Optional[str], num_outputs: Optional[int]) -> Optional[str]:
    """Why the served folder cannot rerank (the 409 message), or None when it can."""
    if task not in RERANK_TASKS or num_outputs not in (1, 2):
        return (f"this model is not a cross-encoder (bertkit.json task {task!r}"
                + (f" with {num_outputs} outputs" if num_outputs else "") + "); serve a folder saved by "
                "`bertkit finetune --task rerank` (or a pair-classification folder with two labels) for /rerank")
    return None


def relevance(logits: np.ndarray, relevant: Optional[int]) -> float:
    """(L,) logits of one pair -> the relevance logit."""
    if relevant is None:
        return float(logits[0])
    other = 1 - relevant
    return float(logits[relevant] - logits[other])


def ranked(raw: Sequence[float], texts: Sequence[str], raw_scores: bool, return_text: bool) -> list[dict]:
    """Results sorted by score, best first (ties keep request order), as TEI's /rerank."""
    scores = np.asarray(raw, dtype=np.float64)
    shown = scores if raw_scores else sigmoid(scores)
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [{"index": i, "score": float(shown[i]), **({"text": texts[i]} if return_text else {})} for i in order]
