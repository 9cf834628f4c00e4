"""Fitting the parts of a linear model on a training split, with regularization chosen on dev.

`fit_tfidf_part` is the TF-IDF baseline's whole model; `fit_vector_part` the linear probe's; the hybrid
stacks both (hybrid.py). Each returns the part to save and what scikit-learn fitted (the reference a
test holds the saved part against).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Sequence

import numpy as np

from bertkit.data.readers import TextExample
from bertkit.errors import BertkitError
from bertkit.finetune.linear.features import FeatureSpec, VectorBlock
from bertkit.finetune.linear.layer import ALPHA_GRID, C_GRID, Fitted, fit_classifier, fit_regressor, to_scipy
from bertkit.finetune.linear.model import LinearPart
from bertkit.finetune.linear.tfidf import default_analyzers, fit_tfidf_blocks

# Standardized 384-768-dimensional vectors want much stronger L2 than sparse TF-IDF features.
VECTOR_C_GRID = (0.003, 0.01, 0.03, 0.1, 0.3)     # MiniLM: 0.01-0.03 on BBC and the WordNet set; 1 always lost
VECTOR_ALPHA_GRID = (1.0, 10.0, 100.0, 1000.0, 10000.0)


@dataclass(frozen=True)
class TfidfOptions:
    min_df: int = 2                       # terms in fewer training texts are dropped: they cannot generalize,
                                          # and dropping them shrinks the vocabulary 3-5x (BBC: 165k of 1.1M)
    max_features: Optional[int] = None    # keep only the most frequent terms per analyzer


def training_versions() -> dict[str, str]:
    """The versions that decide the fitted numbers (scikit-learn) and the features (jieba), for bertkit.json."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("scikit-learn", "jieba"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


class Targets(NamedTuple):
    train: np.ndarray
    dev: np.ndarray


def targets(task: str, examples: Sequence[TextExample], label_names: Sequence[str]) -> np.ndarray:
    """Class indices (in label_names order) or float values."""
    if task == "regression":
        return np.asarray([float(ex.label) for ex in examples], dtype=np.float64)
    index = {name: i for i, name in enumerate(label_names)}
    return np.asarray([index[ex.label] for ex in examples], dtype=np.int64)


class PartFit(NamedTuple):
    part: LinearPart
    fitted: Fitted
    train_x: object             # the training feature matrix (scipy CSR), for the hybrid's out-of-fold refits
    dev_scores: np.ndarray      # the part's scores on dev, from the dev features the fit already built


def fit_part(task: str, features: FeatureSpec, train_blocks: list, dev_blocks: list, y: Targets,
             num_labels: int, grid: Sequence[float], seed: int = 0) -> PartFit:
    train_x, dev_x = to_scipy(train_blocks), to_scipy(dev_blocks)
    if task == "regression":
        fitted = fit_regressor(train_x, y.train, dev_x, y.dev, grid)
    else:
        fitted = fit_classifier(train_x, y.train, dev_x, y.dev, num_labels, grid, seed)
    return PartFit(LinearPart(features, fitted.layer), fitted, train_x, fitted.layer.scores(dev_blocks))


class TfidfFit(NamedTuple):
    part: LinearPart
    fitted: Fitted
    train_x: object
    dev_scores: np.ndarray
    vectorizers: list           # the fitted scikit-learn TfidfVectorizers, one per analyzer

    def reference_scores(self, examples: Sequence[TextExample]) -> np.ndarray:
        """The same scores computed by scikit-learn alone (vectorizers, scipy, the estimator): what the
        saved part must reproduce."""
        import scipy.sparse as sp

        texts = [ex.text for ex in examples]
        blocks = []
        for vectorizer in self.vectorizers:
            first = vectorizer.transform(texts)
            if not self.part.features.pairs:
                blocks.append(first)
                continue
            second = vectorizer.transform([ex.text_pair or "" for ex in examples])
            product = first.multiply(second)
            blocks += [first, second, product, sp.csr_matrix(np.asarray(product.sum(axis=1)))]
        x = sp.hstack(blocks, format="csr")
        estimator = self.fitted.estimator
        if self.part.layer.output == "identity":
            return np.asarray(estimator.predict(x), dtype=np.float64)[:, None]
        return estimator.predict_proba(x)


def fit_tfidf_part(task: str, train: Sequence[TextExample], dev: Sequence[TextExample], y: Targets,
                   num_labels: int, options: TfidfOptions = TfidfOptions(), seed: int = 0) -> TfidfFit:
    pairs = task == "pair-classification"
    texts = [ex.text for ex in train] + ([ex.text_pair or "" for ex in train] if pairs else [])
    try:
        blocks, vectorizers = fit_tfidf_blocks(default_analyzers(texts), texts, options.min_df,
                                               options.max_features)
    except ValueError:          # scikit-learn: "empty vocabulary", "After pruning, no terms remain", ...
        raise BertkitError(f"TF-IDF: one of its feature sets (word or character n-grams) has no term that occurs "
                           f"in {options.min_df} or more of the {len(train)} training texts (min_df "
                           f"{options.min_df}); the training file needs more texts, or texts that share words"
                           ) from None
    spec = FeatureSpec(blocks, pairs)
    grid = ALPHA_GRID if task == "regression" else C_GRID
    fit = fit_part(task, spec, spec.tfidf_blocks(train), spec.tfidf_blocks(dev), y, num_labels, grid, seed)
    return TfidfFit(*fit, vectorizers)


def fit_vector_part(task: str, train_vectors: np.ndarray, dev_vectors: np.ndarray, y: Targets, num_labels: int,
                    encoding: VectorBlock, seed: int = 0) -> PartFit:
    """`encoding`: the pooling / normalize / max_length the vectors were made with (its mean and scale are
    replaced by the training vectors' own)."""
    block = VectorBlock.fit(encoding.pooling, encoding.normalize, encoding.max_length, train_vectors)
    spec = FeatureSpec([], False, block)
    grid = VECTOR_ALPHA_GRID if task == "regression" else VECTOR_C_GRID
    return fit_part(task, spec, [block.apply(train_vectors)], [block.apply(dev_vectors)], y, num_labels, grid, seed)
