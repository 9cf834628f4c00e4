"""The features a linear model reads, block by block: TF-IDF of the texts, a frozen model's vectors, or a
fine-tuned model's logits.

Single texts: one TF-IDF block per analyzer, and the standardized sentence vector.
Pairs (text, text_pair): per analyzer T(a), T(b), their elementwise product T(a) * T(b) (the words both
share, weighted) and its sum, the cosine of the two L2-normalized vectors, as one more column; vectors as
[u, v, |u - v|, u * v] (Reimers & Gurevych 2019, Sentence-BERT's classification features).
Vectors are standardized with the training set's mean and standard deviation, times the block's weight
(the hybrid's balance between TF-IDF and vectors, chosen on dev); both are saved with the model.
Logits: the (N, K) outputs of the folder's own fine-tuned classification head, as they are (the hybrid over a
fine-tuned model: its part's layer maps them onto the linear model's label order).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from bertkit.data.readers import TextExample
from bertkit.finetune.linear.tfidf import SparseRows, TfidfBlock


@dataclass
class VectorBlock:
    """How the frozen model's vectors enter the features (the encoding options and the standardization)."""
    pooling: str
    normalize: bool
    max_length: Optional[int]
    mean: np.ndarray                  # (C,) float64: training mean (of u, or of [u, v, |u-v|, u*v] for pairs)
    scale: np.ndarray                 # (C,) float64: block weight / training standard deviation

    @classmethod
    def fit(cls, pooling: str, normalize: bool, max_length: Optional[int], train: np.ndarray,
            weight: float = 1.0) -> "VectorBlock":
        deviation = train.std(axis=0)
        deviation[deviation < 1e-8] = 1.0            # a constant column stays constant (zero after centering)
        return cls(pooling, normalize, max_length, train.mean(axis=0), weight / deviation)

    def with_weight(self, weight: float, previous: float = 1.0) -> "VectorBlock":
        return VectorBlock(self.pooling, self.normalize, self.max_length, self.mean, self.scale * weight / previous)

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        return (vectors.astype(np.float64) - self.mean) * self.scale


def pair_vectors(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """(N, C) x 2 -> (N, 4C): [u, v, |u - v|, u * v]."""
    return np.hstack([first, second, np.abs(first - second), first * second])


@dataclass
class FeatureSpec:
    tfidf: list[TfidfBlock] = field(default_factory=list)
    pairs: bool = False
    vectors: Optional[VectorBlock] = None
    logits: int = 0                   # K: the part reads the fine-tuned head's K logits (0: it does not)

    def tfidf_blocks(self, examples: Sequence[TextExample]) -> list:
        """SparseRows blocks (and, for pairs, one (N, 1) cosine column per analyzer)."""
        blocks: list = []
        firsts = [ex.text for ex in examples]
        for block in self.tfidf:
            first = block.transform(firsts)
            if not self.pairs:
                blocks.append(first)
                continue
            second = block.transform([ex.text_pair or "" for ex in examples])
            product = first.multiply(second)
            blocks += [first, second, product, product.row_sums()[:, None]]
        return blocks

    def blocks(self, examples: Sequence[TextExample], vectors: Optional[np.ndarray] = None) -> list:
        """Every block, in the order the weight rows follow. `vectors`: what the encoder gives for the texts
        when the spec reads it: the frozen model's (N, C) vectors (pairs: pair_vectors of the two sides), or
        the fine-tuned head's (N, K) logits."""
        blocks = self.tfidf_blocks(examples)
        if self.vectors is not None or self.logits:
            if vectors is None:
                raise ValueError("this linear model reads the model's vectors or logits; pass them")
            blocks.append(self.vectors.apply(vectors) if self.vectors is not None else vectors.astype(np.float64))
        return blocks

    def widths(self) -> list[int]:
        per_block = [3 * b.width + 1 if self.pairs else b.width for b in self.tfidf]
        return per_block + ([len(self.vectors.mean)] if self.vectors is not None else []) + \
            ([self.logits] if self.logits else [])


def block_width(block) -> int:
    return block.width if isinstance(block, SparseRows) else block.shape[1]
