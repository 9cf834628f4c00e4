"""TASKS: every fine-tuning task by name -> its reader, its task object, its head, its prediction formatter and
the metric that picks the best model. The one place that routes on a task name: the jobs, predict, the server
and the command line read this table instead of `if task == ...` chains.

The task objects (SequenceTask, NERTask, QATask) share one shape: encode(examples) -> features,
make_targets(features, length), loss(logits, targets), evaluate(model, features, examples) -> metrics,
predict(model, features, examples) -> one dict per example, label_names. Prompt classification (PET / P-tuning),
seq2seq (UniLM) and rerank (a cross-encoder) are trained by their own jobs (finetune/prompt/, finetune/seq2seq/,
finetune/rerank.py), which build their own model (build is None), but read, save and format through this table.

A new task: one entry here (+ its reader, task object or job module). options.FINETUNE_TASKS, the names the
command line offers without importing torch, is checked equal to the entries trained by `finetune`
(tests/finetune/test_task_registry.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence

from bertkit.data.labels import LabelMap
from bertkit.data.ner_readers import read_tagged_sentences
from bertkit.data.readers import ReadOptions, label_map_for, read_text_examples
from bertkit.data.squad import read_squad
from bertkit.finetune.config import TaskOptions
from bertkit.errors import BertkitError, InputFileError
from bertkit.finetune.classification import SequenceTask
from bertkit.finetune.ner import NERTask
from bertkit.finetune.predictions import entity_prediction, sequence_predictions
from bertkit.finetune.qa import QATask
from bertkit.finetune.seq2seq.pairs import read_pairs
from bertkit.finetune.triples import read_triples


# --- readers: (path, labels, require_labels, options) -> examples, each bad row naming file:line ---------------

def _read_sequence(task: str, pairs: bool = False):
    """Texts (pairs: every row with a text_pair) labelled as TASKS[task].labels says."""
    def read(path: str | Path, labels: Optional[LabelMap], require_labels: bool, options: ReadOptions) -> list:
        examples = read_text_examples(path, TASKS[task].labels, labels, require_labels, options)  # type: ignore[arg-type]
        if pairs and any(ex.text_pair is None for ex in examples):
            missing = next(ex.line for ex in examples if ex.text_pair is None)
            raise BertkitError(f"{path}:{missing}: pair-classification needs a text_pair in every row "
                               "(JSONL text_pair, or a third TSV column / a text_pair header column)")
        return examples
    return read


def _read_ner(path, labels, require_labels, options) -> list:
    return read_tagged_sentences(path, labels, require_labels, options)


def _read_qa(path, labels, require_labels, options) -> list:
    return read_squad(path, require_labels, options)


def _read_pairs(path, labels, require_labels, options) -> list:
    return read_pairs(path, options.encoding, require_labels)


def _read_triples(path, labels, require_labels, options) -> list:
    return read_triples(path, options.encoding)


# --- builders: the task object that encodes, scores and predicts -------------------------------------------------

def _build_sequence(task: str):
    def build(tokenizer, label_names, options: TaskOptions, train_examples, class_weights):
        return SequenceTask(task, tokenizer, label_names or [], options.max_length, options.long_texts, class_weights)
    return build


def _build_ner(tokenizer, label_names, options: TaskOptions, train_examples, class_weights):
    return NERTask(tokenizer, label_names or [], options.max_length, options.ner_stride)


def _build_qa(tokenizer, label_names, options: TaskOptions, train_examples, class_weights):
    negative = options.with_negative
    if negative is None:
        negative = bool(train_examples) and any(ex.is_impossible for ex in train_examples)
    return QATask(tokenizer, options.max_length, options.doc_stride, options.max_question_length,
                  options.max_answer_length, options.n_best, negative, options.null_threshold)


def _generated(texts: Sequence[str]) -> list[dict]:
    """seq2seq outputs -> {"generated": text} per input."""
    return [{"generated": text} for text in texts]


def _similar(found: Sequence) -> list[dict]:
    """simbert's similar texts (text, cosine to the input) -> one dict each."""
    return [{"text": item.text, "cosine": float(item.cosine)} for item in found]


def _sequence_format(task: str) -> Callable[..., list[dict]]:
    def format_logits(logits, labels) -> list[dict]:
        return sequence_predictions(logits, task, labels)
    return format_logits


# What trains a task (TaskKind.job): the module, its config class and its runner, imported by the command line when
# the task runs (so a new job is one row here, and a new task of it one TASKS entry).
JOBS: dict[str, tuple[str, str, str]] = {
    "finetune": ("bertkit.finetune.job", "FinetuneConfig", "run_finetune"),
    "prompt": ("bertkit.finetune.prompt.job", "PromptConfig", "run_prompt_finetune"),
    "seq2seq": ("bertkit.finetune.seq2seq.job", "Seq2SeqConfig", "run_seq2seq_finetune"),
    "rerank": ("bertkit.finetune.rerank", "RerankConfig", "run_rerank_finetune"),
    "simbert": ("bertkit.finetune.seq2seq.simbert", "SimBertConfig", "run_simbert_finetune"),
}


@dataclass(frozen=True)
class TaskKind:
    """One task. head: the HEADS key it trains and its folder holds. job: which job trains it ("finetune":
    bertkit.finetune.job with the task object; the others their own module). saved_as: the task bertkit.json
    records (rerank folders are pair-classification folders). predicted: `bertkit predict / evaluate` read its
    folders (simbert's are read by `generate --similar`). labels: what a row's label is, as the data readers
    name it: "class" (one of a label set), "multi" (a set of them), "score" (a number: regression), "tags" (NER),
    "none" (qa, seq2seq, rerank's fixed two labels)."""
    read: Callable[..., list]
    build: Optional[Callable[..., Any]]
    head: str
    format: Callable[..., list[dict]]
    main_metric: str
    labels: Literal["class", "multi", "score", "tags", "none"]
    job: Literal["finetune", "prompt", "seq2seq", "rerank", "simbert"] = "finetune"
    saved_as: str = ""
    predicted: bool = True


def _sequence(task: str, metric: str, labels: Literal["class", "multi", "score"] = "class",
              pairs: bool = False) -> TaskKind:
    return TaskKind(_read_sequence(task, pairs), _build_sequence(task), "classifier", _sequence_format(task), metric,
                    labels)


TASKS: dict[str, TaskKind] = {
    "classification": _sequence("classification", "accuracy"),
    "pair-classification": _sequence("pair-classification", "accuracy", pairs=True),
    "multi-label": _sequence("multi-label", "micro_f1", "multi"),
    "regression": _sequence("regression", "spearman", "score"),
    "ner": TaskKind(_read_ner, _build_ner, "token_classifier", entity_prediction, "f1", "tags"),
    "qa": TaskKind(_read_qa, _build_qa, "qa", QATask.answers, "f1", "none"),
    # PET / P-tuning over the MLM head: single texts with a class label, predictions as a classifier's
    "prompt-classification": TaskKind(_read_sequence("classification"), None, "mlm",
                                      _sequence_format("classification"), "accuracy", "class", "prompt"),
    # UniLM sequence-to-sequence over the MLM head: {source, target} pairs
    "seq2seq": TaskKind(_read_pairs, None, "mlm", _generated, "loss", "none", "seq2seq"),
    # a cross-encoder for /rerank, saved as a two-label pair-classification folder
    "rerank": TaskKind(_read_triples, None, "classifier", _sequence_format("pair-classification"), "mrr", "none",
                       "rerank", saved_as="pair-classification"),
    # SimBERT: seq2seq generation of the pair's other text + in-batch retrieval (finetune/seq2seq/simbert.py)
    "simbert": TaskKind(_read_pairs, None, "mlm", _similar, "loss", "none", "simbert", predicted=False),
}
# the tasks bertkit.finetune.job trains with a task object (FinetuneModel = encoder + HEADS[head])
HEAD_TASKS: tuple[str, ...] = tuple(name for name, kind in TASKS.items() if kind.job == "finetune")
# the head tasks whose rows carry one label or one value (class weights, the one-label check, linear models)
SINGLE_LABEL_TASKS: tuple[str, ...] = tuple(name for name in HEAD_TASKS if TASKS[name].labels in ("class", "score"))
# the sequence tasks: one label set (or value) per text, the "classifier" head over the summary vector
SEQUENCE_TASKS: tuple[str, ...] = tuple(name for name in HEAD_TASKS if TASKS[name].head == "classifier")
# the tasks a saved folder can hold (bertkit.json "task"): all but those saved as another
SAVED_TASKS: tuple[str, ...] = tuple(name for name, kind in TASKS.items() if not kind.saved_as and kind.predicted)


def check_task(task: str) -> None:
    if task not in HEAD_TASKS:
        raise BertkitError(f"unknown task {task!r}; choose one of {', '.join(HEAD_TASKS)}")


def read_examples(task: str, path: str | Path, labels: Optional[LabelMap], require_labels: bool,
                  options: ReadOptions) -> list:
    check_task(task)
    return TASKS[task].read(path, labels, require_labels, options)


def check_training_labels(task: str, path: str | Path, examples: Sequence) -> None:
    """A training file whose rows all carry one label (one value, for regression) gives nothing to learn:
    stop before training, naming the file and the lines. So does an NER file with no entity (every tag O)."""
    if task == "ner" and examples and all(tag == "O" for ex in examples for tag in (ex.tags or ())):
        raise InputFileError(path, f"all {len(examples)} sentences (lines {examples[0].line}-{examples[-1].line}) "
                                   "are tagged O: ner needs entities (B-/I- tags) in the training file")
    if task not in SINGLE_LABEL_TASKS or not examples:
        return
    values = {ex.label for ex in examples}
    if len(values) > 1:
        return
    lines = f"lines {examples[0].line}-{examples[-1].line}" if len(examples) > 1 else f"line {examples[0].line}"
    score = TASKS[task].labels == "score"
    what = "value" if score else "label"
    need = f"{task} needs varying values" if score else f"{task} needs at least 2 classes"
    raise InputFileError(path, f"all {len(examples)} rows ({lines}) have the {what} {next(iter(values))!r}; "
                               f"{need} in the training file")


def label_names_from(task: str, examples: Sequence) -> Optional[list[str]]:
    """The label map of the training data (None for regression and QA)."""
    kind = TASKS[task].labels
    if kind in ("score", "none"):
        return None
    if kind == "tags":
        return list(LabelMap.from_tags(tag for s in examples for tag in s.tags).names)
    return list(label_map_for(examples, kind).names)  # type: ignore[arg-type, union-attr]


def build_task(task: str, tokenizer, label_names: Optional[Sequence[str]], options: TaskOptions,
               train_examples: Optional[Sequence] = None, class_weights: Optional[Sequence[float]] = None):
    """The task object; class_weights (one per label, classification and pairs) weight the training loss."""
    check_task(task)
    return TASKS[task].build(tokenizer, label_names, options, train_examples, class_weights)
