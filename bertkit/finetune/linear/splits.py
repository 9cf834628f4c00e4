"""Reading train / dev (/ test) for a linear model with the readers `finetune` and `evaluate` use, and the
checks that stop before fitting: a file that cannot be read, a dev or test label the training file lacks
(the readers name file and line), a training file with one class only."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

from bertkit.data.labels import LabelMap
from bertkit.data.readers import ReadOptions, TextExample
from bertkit.errors import BertkitError
from bertkit.finetune.linear.model import LINEAR_TASKS
from bertkit.finetune.linear.training import Targets, targets
from bertkit.finetune.tasks import check_training_labels, label_names_from, read_examples


class Splits(NamedTuple):
    task: str
    train: list[TextExample]
    dev: list[TextExample]
    test: Optional[list[TextExample]]
    label_names: list[str]              # [] for regression
    y: Targets

    @property
    def num_labels(self) -> int:
        return 1 if self.task == "regression" else len(self.label_names)

    def test_targets(self) -> np.ndarray:
        return targets(self.task, self.test or [], self.label_names)


def check_linear_task(task: str) -> None:
    if task not in LINEAR_TASKS:
        raise BertkitError(f"TF-IDF, linear-probe and hybrid models do --task {', '.join(LINEAR_TASKS)}, "
                           f"not {task!r}")


def read_splits(task: str, train: str | Path, dev: Optional[str | Path], test: Optional[str | Path] = None,
                read: ReadOptions = ReadOptions(), max_train: Optional[int] = None,
                max_dev: Optional[int] = None) -> Splits:
    check_linear_task(task)
    if not dev:
        raise BertkitError("a dev file is needed (--dev): the regularization is chosen on it")
    train_rows = read_examples(task, train, None, True, _rejects(read, "train"))[:max_train]
    check_training_labels(task, train, train_rows)
    names = label_names_from(task, train_rows) or []
    known = LabelMap(tuple(names)) if task != "regression" else None
    dev_rows = read_examples(task, dev, known, True, _rejects(read, "dev"))[:max_dev]
    test_rows = read_examples(task, test, known, True, _rejects(read, "test")) if test else None
    return Splits(task, train_rows, dev_rows, test_rows, names,
                  Targets(targets(task, train_rows, names), targets(task, dev_rows, names)))


def _rejects(read: ReadOptions, split: str) -> ReadOptions:
    """Each file's skipped rows go to their own rejects file (OUTPUT.rejects.jsonl for train, as `finetune`
    names it, OUTPUT.dev.rejects.jsonl, OUTPUT.test.rejects.jsonl)."""
    if read.rejects_path is None or split == "train":
        return read
    path = read.rejects_path
    return dataclasses.replace(read, rejects_path=path.with_name(path.name.replace(".rejects", f".{split}.rejects")))
