"""One place that knows, per task, which reader reads its files and which task object encodes and scores them.

The task objects (SequenceTask, NERTask, QATask) share one shape: encode(examples) -> features,
make_targets(features, length), loss(logits, targets), evaluate(model, features, examples) -> metrics,
predict(model, features, examples) -> one dict per example, label_names, main_metric.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from bertkit.data.labels import LabelMap
from bertkit.data.ner_readers import read_tagged_sentences
from bertkit.data.readers import ReadOptions, label_map_for, read_text_examples
from bertkit.data.squad import read_squad
from bertkit.finetune.config import TaskOptions
from bertkit.finetune.classification import SequenceTask, label_kind_for
from bertkit.finetune.model import TASKS
from bertkit.finetune.ner import NERTask
from bertkit.finetune.qa import QATask
from bertkit.errors import BertkitError, InputFileError


def check_task(task: str) -> None:
    if task not in TASKS:
        raise BertkitError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


def read_examples(task: str, path: str | Path, labels: Optional[LabelMap], require_labels: bool,
                  options: ReadOptions) -> list:
    check_task(task)
    if task == "ner":
        return read_tagged_sentences(path, labels, require_labels, options)
    if task == "qa":
        return read_squad(path, require_labels, options)
    examples = read_text_examples(path, label_kind_for(task), labels, require_labels, options)  # type: ignore[arg-type]
    if task == "pair-classification" and any(ex.text_pair is None for ex in examples):
        missing = next(ex.line for ex in examples if ex.text_pair is None)
        raise BertkitError(f"{path}:{missing}: pair-classification needs a text_pair in every row "
                           "(JSONL text_pair, or a third TSV column / a text_pair header column)")
    return examples


def check_training_labels(task: str, path: str | Path, examples: Sequence) -> None:
    """A training file whose rows all carry one label (one value, for regression) gives nothing to learn:
    stop before training, naming the file and the lines."""
    if task not in ("classification", "pair-classification", "regression") or not examples:
        return
    values = {ex.label for ex in examples}
    if len(values) > 1:
        return
    lines = f"lines {examples[0].line}-{examples[-1].line}" if len(examples) > 1 else f"line {examples[0].line}"
    what = "value" if task == "regression" else "label"
    need = "regression needs varying values" if task == "regression" else f"{task} needs at least 2 classes"
    raise InputFileError(path, f"all {len(examples)} rows ({lines}) have the {what} {next(iter(values))!r}; "
                               f"{need} in the training file")


def label_names_from(task: str, examples: Sequence) -> Optional[list[str]]:
    """The label map of the training data (None for regression and QA)."""
    if task in ("regression", "qa"):
        return None
    if task == "ner":
        return list(LabelMap.from_tags(tag for s in examples for tag in s.tags).names)
    return list(label_map_for(examples, label_kind_for(task)).names)  # type: ignore[arg-type, union-attr]


def build_task(task: str, tokenizer, label_names: Optional[Sequence[str]], options: TaskOptions,
               train_examples: Optional[Sequence] = None, class_weights: Optional[Sequence[float]] = None):
    """The task object; class_weights (one per label, classification and pairs) weight the training loss."""
    check_task(task)
    if task == "ner":
        return NERTask(tokenizer, label_names or [], options.max_length, options.ner_stride)
    if task == "qa":
        negative = options.with_negative
        if negative is None:
            negative = bool(train_examples) and any(ex.is_impossible for ex in train_examples)
        return QATask(tokenizer, options.max_length, options.doc_stride, options.max_question_length,
                      options.max_answer_length, options.n_best, negative, options.null_threshold)
    return SequenceTask(task, tokenizer, label_names or [], options.max_length, options.long_texts, class_weights)
