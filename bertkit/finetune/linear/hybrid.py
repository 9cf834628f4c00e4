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
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

from bertkit.finetune.linear.layer import Fitted, fit_classifier, fit_regressor
from bertkit.finetune.linear.model import LinearModel, stack_inputs
from bertkit.finetune.linear.training import PartFit, Targets

FOLDS = 5
STACK_C_GRID = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)      # 2K inputs of log-probabilities: strong L2 wins
STACK_ALPHA_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)


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
