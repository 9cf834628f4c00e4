"""The hybrid: TF-IDF + logistic regression and the frozen model's vectors + logistic regression, stacked.

Stacking (Wolpert 1992): a third logistic regression reads the two parts' log-probabilities (for
regression, ridge over their two values). It is fitted on OUT-OF-FOLD predictions for the training rows:
each part is refitted on 4/5 of train (at the C it chose on dev) and predicts the other fifth, five times,
so the stacker learns how far to trust each part on rows that part did not see. Fitted on the parts'
predictions for their own training rows instead, it would learn to trust whichever part memorized train
best. The other option, fitting the stacker on dev with cross-validation, was measured and lost: dev is
small (BBC: 210 rows; the 45-class WordNet set: 1,000) for 2K inputs, and it leaves dev without an
unbiased score. Dev picks every regularization: each part's C, and the stacker's C.

The out-of-fold parts reuse the full training set's vocabulary, idf and standardization (refitting those
per fold changes nothing measurable and would cost another pass over the texts).

Over a FINE-TUNED model (`--model` a folder fine-tuned on these labels) out-of-fold training predictions do not
exist: the model has seen every training row, so its train probabilities are near 1 and a stacker fitted on
them over-trusts it (measured: 0.735 against the fine-tune's own 0.741 on the proxy). There the stacker is
fitted on dev, which neither part was trained on, and kept to two numbers so 1,000 dev rows cannot overfit it:
log-linear pooling, scores = softmax(t * (w * log p_tfidf + (1 - w) * log p_finetuned)). A full logistic
stacker on dev (2K x K weights, C by cross-validation) was measured and lost: 0.718 on the proxy. w (the
TF-IDF share; w = 0 is the fine-tuned model alone) and t are the grid pair with the least dev log-loss, as a
logistic stacker would fit them: choosing w by dev accuracy instead picks up noise (a part with no signal got
w = 0.3 in the planted test, by flipping a few rows the right way by chance). Dev also picked the fine-tune's best epoch and
the TF-IDF part's C, a mild optimism that favours the part that is already trusted most. The dev score saved
with the model is cross-fitted (each fifth of dev scored at the w chosen on the other four), not the
in-sample one.
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

from bertkit.finetune.linear.layer import Fitted, LinearLayer, fit_classifier, fit_regressor
from bertkit.finetune.linear.model import LinearModel, log_probabilities, stack_inputs
from bertkit.finetune.metrics import classification_metrics
from bertkit.finetune.linear.training import PartFit, Targets

FOLDS = 5
STACK_C_GRID = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)      # 2K inputs of log-probabilities: strong L2 wins
STACK_ALPHA_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
POOL_SHARES = tuple(i / 20 for i in range(21))          # w, the TF-IDF part's share of the log-probabilities
POOL_TEMPERATURES = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)


def out_of_fold(task: str, data: PartFit, y: np.ndarray, num_labels: int, seed: int = 0) -> np.ndarray:
    """(N_train, K) predictions of `data`'s part for each training row by a copy fitted without its fold."""
    from sklearn.base import clone
    from sklearn.model_selection import KFold, StratifiedKFold
    from threadpoolctl import threadpool_limits

    rows = data.train_x.shape[0]
    out = np.zeros((rows, 1 if task == "regression" else num_labels))
    if task == "regression":
        folds = KFold(FOLDS, shuffle=True, random_state=seed).split(np.zeros(rows))
    else:
        with warnings.catch_warnings():   # "the least populated class has only N members": rare classes are fine
            warnings.simplefilter("ignore", UserWarning)
            folds = list(StratifiedKFold(FOLDS, shuffle=True, random_state=seed).split(np.zeros(rows), y))
    for train_rows, held_rows in folds:
        estimator = clone(data.fitted.estimator)
        if task != "regression":
            estimator.set_params(warm_start=False)
        with threadpool_limits(1), warnings.catch_warnings():
            warnings.simplefilter("ignore")             # saga's ConvergenceWarning at max_iter on a fold
            estimator.fit(data.train_x[train_rows], y[train_rows])
        held = data.train_x[held_rows]
        if task == "regression":
            out[held_rows, 0] = estimator.predict(held)
        else:                                           # a fold may lack a rare class: its column stays 0
            out[np.ix_(held_rows, estimator.classes_)] = estimator.predict_proba(held)
    return out


def fit_stack(task: str, parts: Sequence[PartFit], y: Targets, num_labels: int, dev_outputs: Sequence[np.ndarray],
              seed: int = 0) -> Fitted:
    """The stacker over the parts' outputs: trained on out-of-fold train predictions, C chosen on dev."""
    output = parts[0].part.layer.output
    train_inputs = stack_inputs([out_of_fold(task, p, y.train, num_labels, seed) for p in parts], output)
    dev_inputs = stack_inputs(list(dev_outputs), output)
    if task == "regression":
        return fit_regressor(train_inputs, y.train, dev_inputs, y.dev, STACK_ALPHA_GRID)
    return fit_classifier(train_inputs, y.train, dev_inputs, y.dev, num_labels, STACK_C_GRID, seed)


def hybrid_model(task: str, label_names: list[str], pairs: bool, parts: Sequence[PartFit],
                 stack: Fitted) -> LinearModel:
    return LinearModel("hybrid", task, label_names, pairs, [p.part for p in parts], stack.layer)


def fit_dev_pooling(dev_outputs: Sequence[np.ndarray], dev_y: np.ndarray, num_labels: int, seed: int = 0) -> Fitted:
    """Log-linear pooling of two parts' (N_dev, K) probabilities [TF-IDF, fine-tuned], fitted on dev (above).
    The layer is the stacker over stack_inputs: weight t * [w I; (1 - w) I], bias 0."""
    tfidf_log, model_log = (log_probabilities(p) for p in dev_outputs)

    def fit_rows(rows) -> tuple[float, float]:      # (w, t) with the least log-loss on `rows`
        return min(((w, t) for w in POOL_SHARES for t in POOL_TEMPERATURES),
                   key=lambda wt: log_loss(wt[1] * (wt[0] * tfidf_log[rows] + (1 - wt[0]) * model_log[rows]),
                                           dev_y[rows]))

    everything = np.arange(len(dev_y))
    share, temperature = fit_rows(everything)
    cross_fitted = np.zeros(len(dev_y), dtype=np.int64)
    for rows, held_rows in _dev_folds(dev_y, seed):
        w, _ = fit_rows(rows)
        cross_fitted[held_rows] = (w * tfidf_log[held_rows] + (1 - w) * model_log[held_rows]).argmax(-1)
    eye = np.eye(num_labels)
    weight = (temperature * np.vstack([share * eye, (1 - share) * eye])).astype(np.float32)
    layer = LinearLayer(weight, np.zeros(num_labels), "softmax")
    grid = [(w, classification_metrics(dev_y, (w * tfidf_log + (1 - w) * model_log).argmax(-1), num_labels))
            for w in POOL_SHARES]
    return Fitted(layer, None, share, classification_metrics(dev_y, cross_fitted, num_labels), grid)


def _dev_folds(y: np.ndarray, seed: int) -> list:
    """Stratified folds of dev; plain folds when every class has fewer rows than folds (StratifiedKFold refuses
    that), one in-sample 'fold' below 2 rows."""
    from sklearn.model_selection import KFold, StratifiedKFold

    rows = np.arange(len(y))
    if len(y) < 2:
        return [(rows, rows)]
    if np.bincount(y).max() >= FOLDS:
        with warnings.catch_warnings():    # "the least populated class has only N members": rare classes are fine
            warnings.simplefilter("ignore", UserWarning)
            return list(StratifiedKFold(FOLDS, shuffle=True, random_state=seed).split(rows, y))
    return list(KFold(min(FOLDS, len(y)), shuffle=True, random_state=seed).split(rows))


def log_loss(logits: np.ndarray, y: np.ndarray) -> float:
    """Mean cross-entropy of softmax(logits) (N, K) against class indices y (N,)."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(shifted).sum(axis=1))
    return float((log_z - shifted[np.arange(len(y)), y]).mean())
