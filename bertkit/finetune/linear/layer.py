"""The linear layer of the TF-IDF baseline, the linear probe and the hybrid: scores = features @ W + b.

Classification: a multinomial logistic regression (softmax over K classes; scikit-learn's binary model, one
weight column z, is stored as the two columns [0, z], whose softmax is exactly [1 - sigmoid(z), sigmoid(z)]).
Regression: ridge regression (one output, the value). Weights are float32 on disk (half the size; the
probabilities move by < 1e-7), the bias float64; scores are computed in float64.

Fitting uses scikit-learn (needed for training only), picking the regularization on dev from a small grid:
C for LogisticRegression (warm-started along the grid; solver saga for sparse TF-IDF, which is several times
faster than lbfgs on 10^5-10^6 features, lbfgs for dense vectors), alpha for Ridge.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import numpy as np

from bertkit.errors import BertkitError
from bertkit.finetune.metrics import classification_metrics, mean_cross_entropy, regression_metrics
from bertkit.finetune.predictions import softmax

C_GRID = (1.0, 3.0, 10.0, 30.0, 100.0)          # inverse L2 strength of LogisticRegression
ALPHA_GRID = (0.1, 0.3, 1.0, 3.0, 10.0)         # L2 strength of Ridge
SAGA_TOL = 1e-3                                   # same test accuracy as 1e-4 on BBC and the WordNet set, 2-5x faster


@dataclass
class LinearLayer:
    weight: np.ndarray                            # (F, K) float32
    bias: np.ndarray                              # (K,) float64
    output: Literal["softmax", "identity"]

    def scores(self, blocks: Sequence) -> np.ndarray:
        """Blocks (SparseRows or (N, F_i) arrays) side by side = the feature matrix -> (N, K) probabilities
        (softmax) or values (identity)."""
        widths = [block.width if hasattr(block, "width") else block.shape[1] for block in blocks]
        if sum(widths) != self.weight.shape[0]:
            raise BertkitError(f"the features have {sum(widths)} columns but the saved linear layer expects "
                               f"{self.weight.shape[0]}; the model folder's files do not belong together")
        logits = np.tile(self.bias.astype(np.float64), (_rows(blocks[0]), 1))
        start = 0
        for block, width in zip(blocks, widths):
            part = self.weight[start:start + width]
            logits += block.dot(part) if hasattr(block, "width") else block.astype(np.float64) @ part.astype(np.float64)
            start += width
        return softmax(logits) if self.output == "softmax" else logits


def _rows(block) -> int:
    return len(block.indptr) - 1 if hasattr(block, "indptr") else block.shape[0]


def to_scipy(blocks: Sequence):
    """The blocks as one scipy CSR matrix (training only: scipy comes with scikit-learn)."""
    import scipy.sparse as sp

    parts = [sp.csr_matrix((b.data, b.indices, b.indptr), shape=(len(b.indptr) - 1, b.width))
             if hasattr(b, "width") else sp.csr_matrix(np.asarray(b, dtype=np.float64)) for b in blocks]
    return sp.hstack(parts, format="csr")


@dataclass
class Fitted:
    layer: LinearLayer
    estimator: object                             # the scikit-learn model (the reference for the saved layer)
    regularization: float                         # the chosen C or alpha
    dev_metrics: dict                             # at the chosen value
    grid: list                                    # (value, dev metrics) for every value tried


def _sklearn():
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise BertkitError("fitting the TF-IDF baseline, the linear probe or the hybrid needs scikit-learn: "
                           "pip install 'scikit-learn>=1.3'") from None


def fit_classifier(train_x, train_y: np.ndarray, dev_x, dev_y: np.ndarray, num_labels: int,
                   grid: Sequence[float] = C_GRID, seed: int = 0) -> Fitted:
    """Multinomial logistic regression; C with the best dev accuracy (then macro-F1, then the smaller C)."""
    _sklearn()
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    import scipy.sparse as sp

    # saga for sparse TF-IDF (scipy's L-BFGS-B is slow on 10^5-10^6 variables), lbfgs for dense vectors and
    # stacker inputs (saga converges 10x slower there: 257 s against 27 s on 6,000 x 384 MiniLM vectors)
    solver = dict(solver="saga", tol=SAGA_TOL) if sp.issparse(train_x) else dict(solver="lbfgs")
    model = LogisticRegression(max_iter=1000, warm_start=True, random_state=seed, **solver)
    best, tried = None, []
    with threadpool_limits(1):      # the solver is single-threaded; BLAS threads only contend with it
        for c in sorted(grid):
            model.set_params(C=c)
            model.fit(train_x, train_y)
            metrics = classification_metrics(dev_y, _predicted(model, dev_x), num_labels)
            tried.append((c, metrics))
            if best is None or (metrics["accuracy"], metrics["macro_f1"]) > (best[1]["accuracy"], best[1]["macro_f1"]):
                best = (c, metrics, copy.deepcopy(model))
    return Fitted(_layer_of(best[2], num_labels), best[2], best[0], best[1], tried)


def _predicted(model, x) -> np.ndarray:
    return np.asarray(model.predict(x), dtype=np.int64)


def _layer_of(model, num_labels: int) -> LinearLayer:
    coef = np.asarray(model.coef_, dtype=np.float64)             # (K, F), or (1, F) for two classes
    intercept = np.asarray(model.intercept_, dtype=np.float64)
    if list(model.classes_) != list(range(num_labels)):
        raise BertkitError(f"the training data has {len(model.classes_)} of the {num_labels} labels; every label "
                           "needs at least one training row")
    if coef.shape[0] == 1:                                       # binary: the two columns [0, z]
        coef = np.vstack([np.zeros_like(coef), coef])
        intercept = np.array([0.0, intercept[0]])
    return LinearLayer(coef.T.astype(np.float32), intercept, "softmax")


def fit_regressor(train_x, train_y: np.ndarray, dev_x, dev_y: np.ndarray,
                  grid: Sequence[float] = ALPHA_GRID) -> Fitted:
    """Ridge regression; alpha with the best dev Spearman (the regression task's main metric), then Pearson."""
    _sklearn()
    from sklearn.linear_model import Ridge

    best, tried = None, []
    for alpha in grid:
        model = Ridge(alpha=alpha).fit(train_x, train_y)
        metrics = regression_metrics(dev_y, model.predict(dev_x))
        tried.append((alpha, metrics))
        if best is None or (metrics["spearman"], metrics["pearson"]) > (best[1]["spearman"], best[1]["pearson"]):
            best = (alpha, metrics, model)
    model = best[2]
    layer = LinearLayer(np.asarray(model.coef_, dtype=np.float32).reshape(-1, 1),
                        np.asarray([model.intercept_], dtype=np.float64).reshape(1), "identity")
    return Fitted(layer, model, best[0], best[1], tried)


def scores_metrics(task: str, scores: np.ndarray, gold: Sequence, num_labels: Optional[int]) -> dict:
    """The metrics `bertkit evaluate` reports, from probabilities (classification: the loss is the mean
    cross-entropy, as a fine-tuned folder reports it) or values (regression)."""
    if task == "regression":
        return regression_metrics(np.asarray(gold, dtype=float), scores[:, 0])
    gold = np.asarray(gold, dtype=np.int64)
    log_probabilities = np.log(np.clip(np.asarray(scores, dtype=np.float64), 1e-300, None))
    return {**classification_metrics(gold, scores.argmax(-1), num_labels or scores.shape[1]),
            "loss": mean_cross_entropy(log_probabilities, gold)}
