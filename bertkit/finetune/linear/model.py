"""A linear model: one or more parts (features -> linear layer) and, for the hybrid, a stacker over them.

- tfidf: one part, TF-IDF features -> logistic (ridge) regression;
- linear-probe: one part, the frozen model's vectors -> logistic (ridge) regression;
- hybrid: both parts, and a stacker: one more logistic (ridge) regression over the parts' log-probabilities
  (values), fitted on out-of-fold predictions for the training rows (see hybrid.py);
- hybrid over a fine-tuned model: the TF-IDF part and the fine-tuned head's probabilities (a part whose layer
  only reorders the logits), pooled by a stacker fitted on dev (see hybrid.py).
Vectors (or logits) are computed by the caller (they need the encoder) and passed in; everything here is numpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from bertkit.data.readers import TextExample
from bertkit.finetune.linear.features import FeatureSpec, VectorBlock
from bertkit.finetune.linear.layer import LinearLayer
from bertkit.finetune.predictions import class_predictions, sequence_predictions
from bertkit.finetune.tasks import SINGLE_LABEL_TASKS

LINEAR_TASKS = SINGLE_LABEL_TASKS     # one label or one value per text
PROBABILITY_FLOOR = 1e-12          # log(p) of a part's probabilities, so a stacker never sees -inf


@dataclass
class LinearPart:
    features: FeatureSpec
    layer: LinearLayer

    def scores(self, examples: Sequence[TextExample], vectors: Optional[np.ndarray] = None) -> np.ndarray:
        return self.layer.scores(self.features.blocks(examples, vectors))


@dataclass
class LinearModel:
    method: str                        # tfidf | linear-probe | hybrid
    task: str                          # classification | pair-classification | regression
    label_names: list[str]
    pairs: bool
    parts: list[LinearPart]
    stack: Optional[LinearLayer] = None

    @property
    def vector_block(self) -> Optional[VectorBlock]:
        """How the frozen model's vectors are encoded, when a part reads them (None for TF-IDF only)."""
        return next((p.features.vectors for p in self.parts if p.features.vectors is not None), None)

    @property
    def reads_logits(self) -> bool:
        """A part reads the folder's fine-tuned head's logits (the hybrid over a fine-tuned model)."""
        return any(p.features.logits for p in self.parts)

    def scores(self, examples: Sequence[TextExample], vectors: Optional[np.ndarray] = None) -> np.ndarray:
        """(N, K) probabilities, or (N, 1) values for regression."""
        return self.combine([part.scores(examples, vectors) for part in self.parts])

    def combine(self, outputs: Sequence[np.ndarray]) -> np.ndarray:
        """The model's scores from its parts' scores (one per part, in order): the stack's, or the one part's."""
        if self.stack is None:
            return outputs[0]
        return self.stack.scores([stack_inputs(outputs, self.parts[0].layer.output)])

    def describe(self, scores: np.ndarray) -> list[dict]:
        """One prediction dict per row, as the fine-tuned models' predict gives them."""
        if self.task == "regression":
            return sequence_predictions(scores, "regression", None)
        return class_predictions(scores, self.label_names)


def log_probabilities(p: np.ndarray) -> np.ndarray:
    """log p with p floored at PROBABILITY_FLOOR: what a stacker or a pooling reads of a part."""
    return np.log(np.maximum(p, PROBABILITY_FLOOR))


def stack_inputs(outputs: Sequence[np.ndarray], output: str) -> np.ndarray:
    """The stacker's features: the parts' log-probabilities (classification) or values (regression)."""
    if output == "softmax":
        return np.hstack([log_probabilities(o) for o in outputs])
    return np.hstack(list(outputs))
