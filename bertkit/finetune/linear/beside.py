"""The hook at the end of `finetune` (classification, pairs, regression; every --method): fit the TF-IDF
baseline on the same train / dev split, print both side by side (and, paired on the same dev texts, whether
the difference is more than noise), and say so when the model loses or collapses. The comparison goes into
the run's metrics.json (`baseline`) and run/log.jsonl, and the baseline model into OUTPUT/run/baseline (a
model folder: `bertkit evaluate --model OUTPUT/run/baseline`).
A baseline that cannot be fitted (scikit-learn missing, no repeated terms) is reported and skipped: it
never fails the run it accompanies.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bertkit.atomic_write import write_json
from bertkit.checkpoints import load_checkpoint
from bertkit.data.readers import TextExample
from bertkit.errors import BertkitError
from bertkit.finetune.inference import forward_features, stack
from bertkit.finetune.linear.baseline import BaselineConfig, FittedBaseline, run_baseline
from bertkit.finetune.linear.report import Comparison, compare
from bertkit.finetune.linear.splits import Splits
from bertkit.finetune.linear.training import Targets, targets
from bertkit.finetune.model import model_from_checkpoint
from bertkit.train.saved_score import METRICS_FILE
from bertkit.train.log import JsonlLog
from bertkit.train.loop import say

BASELINE_FOLDER = Path("run") / "baseline"


def splits_of(task: str, train: Sequence[TextExample], dev: Sequence[TextExample],
              label_names: Optional[Sequence[str]]) -> Splits:
    names = list(label_names or [])
    return Splits(task, list(train), list(dev), None, names, Targets(targets(task, train, names),
                                                                      targets(task, dev, names)))


def best_dev_predictions(output: Path, task: str, label_names: Sequence[str], dev_features: Sequence,
                         pad_id: int, batch_size: int) -> np.ndarray:
    """Class indices the saved (best) fine-tuned model predicts for the dev features."""
    net = model_from_checkpoint(load_checkpoint(output), task, list(label_names))
    return stack(forward_features(net.eval(), dev_features, pad_id, batch_size)).argmax(-1)


def report_beside(output: Path, name: str, splits: Splits, model_dev: dict, predicted: Optional[np.ndarray] = None,
                  seed: int = 0, prefit: Optional[FittedBaseline] = None,
                  advice: Optional[str] = None) -> Optional[Comparison]:
    """Fit (unless `prefit`) and save the baseline, print the side-by-side table and any warning (with `advice`:
    what to try, see report.compare), record them in the run."""
    try:
        result = run_baseline(BaselineConfig(task=splits.task, output=str(output / BASELINE_FOLDER), seed=seed),
                              splits, prefit=prefit)
    except BertkitError as err:
        say(f"TF-IDF baseline skipped: {err}")
        return None
    baseline_predicted = None if predicted is None else result.model.scores(splits.dev).argmax(-1)
    comparison = compare(splits.task, name, model_dev, result.dev, result.seconds, predicted,
                         None if predicted is None else splits.y.dev, splits.label_names, advice, baseline_predicted)
    for line in comparison.table():
        say(line)
    for warning in comparison.warnings:
        say(f"warning: {warning}")
    _record(output, comparison)
    return comparison


def _record(output: Path, comparison: Comparison) -> None:
    path = output / METRICS_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        record = {}
    write_json(path, {**(record if isinstance(record, dict) else {}), "baseline": comparison.record()})
    log = JsonlLog(output / "run")          # the run's log.jsonl, appended like the training loop's records
    log.write({"event": "baseline", **comparison.record()})
    log.close()
