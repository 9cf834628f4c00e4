"""Using a fine-tuned model folder: predict on texts (the API), evaluate a labeled file, predict a file.

The task, label names and encoding options come from the folder's bertkit.json, so predictions use the
exact pipeline the model was trained with. Folders of the bertkit.generate jobs (prompt-based classification,
UniLM seq2seq) are handed to those jobs' loaders, which rebuild the model from the saved folder; linear
models' folders (TF-IDF baseline, linear probe, hybrid) to bertkit.finetune.linear's predictor.
"""
from __future__ import annotations

import os

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from bertkit.atomic_write import write_jsonl
from bertkit.data.labels import LabelMap
from bertkit.data.ner_readers import RawText, TaggedSentence, read_raw_texts
from bertkit.data.readers import ReadOptions, TextExample
from bertkit.data.squad import QAExample
from bertkit.errors import BertkitError, CheckpointError
from bertkit.finetune.classification import examples_from_inputs
from bertkit.finetune.linear.predictor import linear_predictor_of
from bertkit.finetune.loaded import OWN_MODEL_TASKS, checkpoint_of as _checkpoint_of, device_of, finetuned_model
from bertkit.finetune.loop_job import saved_task as _saved_task
from bertkit.finetune.model import FinetuneModel
from bertkit.finetune.ner import sentences_of_texts
from bertkit.finetune.prompt.job import evaluate_prompt_file, label_scores, load_prompt_classifier, predict_prompt_file
from bertkit.finetune.seq2seq.job import Seq2SeqGenerator, evaluate_seq2seq_file, predict_seq2seq_file
from bertkit.finetune.tasks import TASKS, read_examples
from bertkit.tokenizer.coverage import texts_of, warn_unknown
from bertkit.tokenizer.tokenizer import EMPTY_TEXT, InvalidTextError


def _own_model_folder(model: Any) -> Optional[tuple[str, Path]]:
    """(task, folder) when `model` (a folder path, or a loaded model) was saved by a job with a model of its own
    (TASKS[task].build is None: prompt classification, seq2seq), else None. A path is read from its bertkit.json
    alone, so the job's own loader is the only one that loads its weights."""
    if isinstance(model, (str, Path)) and Path(model).is_dir():
        task = _saved_task(model)
        return (task, Path(model)) if task in OWN_MODEL_TASKS else None
    return _generate_job_folder(_checkpoint_of(model))


def _generate_job_folder(checkpoint) -> Optional[tuple[str, Path]]:
    """(task, folder) when the checkpoint was saved by a bertkit.generate job, else None."""
    saved_task = (checkpoint.meta or {}).get("task")
    if saved_task not in OWN_MODEL_TASKS:
        return None
    folder = getattr(checkpoint, "path", None)
    if folder is None:
        raise CheckpointError(f"this {saved_task} model was not loaded from a folder; save it and load the folder")
    return saved_task, Path(folder)


def predict(model: Any, inputs: Sequence[Union[str, tuple, dict]], batch_size: int = 32) -> list[dict]:
    """Predictions for texts or (text, text_pair) pairs; NER: entities with character offsets into each text;
    QA: (question, context) pairs or {"question", "context"} dicts -> answer spans with character offsets."""
    if isinstance(inputs, (str, tuple, dict)):
        raise TypeError("predict takes a list of inputs; wrap a single one in a list")
    _check_inputs(inputs)
    linear = linear_predictor_of(model)
    if linear is not None:
        return linear.predict(inputs, batch_size)
    generate_job = _generate_job_folder(_checkpoint_of(model))
    if generate_job is not None:
        return _predict_generate_job(*generate_job, device_of(_checkpoint_of(model)), inputs, batch_size)
    net, task = finetuned_model(model)
    if net.task == "ner":
        return _predict_ner_texts(net, task, [str(x) for x in inputs], batch_size)
    if net.task == "qa":
        examples = [_qa_input(item, i) for i, item in enumerate(inputs)]
        features = task.encode(examples)
    else:
        examples = examples_from_inputs(inputs)
        features = task.encode(examples, quiet=True)
    warn_unknown(task.tokenizer, texts_of(examples), "predict", [f.input_ids for f in features])
    return task.predict(net, features, examples, batch_size)


def _check_inputs(inputs: Sequence) -> None:
    """The rule of encode and the server: an empty or whitespace-only text, or side of a pair (or QA question or
    context), is refused with InvalidTextError naming its index, never given a label."""
    for index, item in enumerate(inputs):
        if isinstance(item, dict):
            sides = [("question", item.get("question")), ("context", item.get("context"))]
        elif isinstance(item, tuple):
            sides = [("first text", side) for side in item[:1]] + [("second text", side) for side in item[1:]]
        else:
            sides = [("", item)]
        for name, side in sides:
            if isinstance(side, str) and not side.strip():
                raise InvalidTextError(index, f"({name}) {EMPTY_TEXT}" if name else EMPTY_TEXT)


def _predict_ner_texts(net: FinetuneModel, task, texts: list[str], batch_size: int) -> list[dict]:
    """Raw texts: split into words (split_words: CJK characters one word each, else runs of word characters
    and single punctuation marks), tagged, entities with character offsets into each text."""
    sentences, spans = sentences_of_texts(texts)
    features = task.encode(sentences)
    warn_unknown(task.tokenizer, texts, "predict", [f.input_ids for f in features])
    return task.predict(net, features, sentences, batch_size, spans, texts)


def _predict_generate_job(task: str, folder: Path, device: Optional[str], inputs: Sequence,
                          batch_size: int) -> list[dict]:
    """Prompt classifiers: label, score and per-label scores (as classifiers give); seq2seq: generated text."""
    texts, kind = [str(x) for x in inputs], TASKS[task]
    if kind.job == "seq2seq":
        return kind.format(Seq2SeqGenerator(folder, device).decode(texts))
    classifier = load_prompt_classifier(folder, device)
    labels = classifier.verbalizer.labels
    scores = label_scores(classifier, texts, batch_size) if texts else np.zeros((0, len(labels)))
    return kind.format(scores, labels)


def _qa_input(item, index: int) -> QAExample:
    if isinstance(item, dict):
        question, context, qid = item.get("question"), item.get("context"), str(item.get("id", index))
    elif isinstance(item, (tuple, list)) and len(item) == 2:
        (question, context), qid = item, str(index)
    else:
        raise TypeError(f"QA input {index}: expected (question, context) or {{'question', 'context'}}")
    if not isinstance(question, str) or not isinstance(context, str):
        raise TypeError(f"QA input {index}: question and context must be strings")
    return QAExample(qid, question, context, (), False)


def evaluate_file(model: Any, data: str | Path, encoding: str = "utf-8", batch_size: int = 64,
                  task: Optional[str] = None) -> dict:
    rows = _rows_predictor(model)
    if rows is not None:
        _check_linear_task(task, rows)
        known = LabelMap(tuple(rows.label_names)) if rows.task != "regression" else None
        return rows.evaluate_examples(read_examples(rows.task or "classification", data, known, True,
                                                    ReadOptions(encoding)), batch_size)
    generate_job = _own_model_folder(model)
    if generate_job is not None:
        _check_task(task, generate_job)
        if TASKS[generate_job[0]].job == "seq2seq":
            return evaluate_seq2seq_file(generate_job[1], data, encoding, batch_size)
        return evaluate_prompt_file(generate_job[1], data, encoding, batch_size)
    net, task_object = finetuned_model(model, task)
    known = LabelMap(tuple(net.label_names)) if TASKS[net.task].labels not in ("score", "none") else None
    examples = read_examples(net.task, data, known, True, ReadOptions(encoding))
    return task_object.evaluate(net, task_object.encode(examples), examples, batch_size)


PAIRED_TASKS = ("classification", "pair-classification")      # evaluate --against: one label per row


def classified_rows(model: Any, data: str | Path, encoding: str = "utf-8", batch_size: int = 64,
                    task: Optional[str] = None) -> tuple[list[str], list[str]]:
    """(gold, predicted) label names of a single-label classifier on a labeled file: a fine-tuned folder, a
    TF-IDF / linear-probe / hybrid folder or an ONNX export (what `evaluate --against` pairs, after scoring each
    model with evaluate_file: a second pass over the file, kept apart so every folder kind's metrics stay its own)."""
    rows = _rows_predictor(model)
    if rows is not None:
        _check_linear_task(task, rows)
        kind, names = rows.task or "classification", rows.label_names
    elif _own_model_folder(model) is not None:
        raise BertkitError(f"{model}: --against pairs fine-tuned, TF-IDF, hybrid, linear-probe or ONNX classifiers; "
                           "this folder's job has a model of its own")
    else:
        net, task_object = finetuned_model(model, task)
        kind, names = net.task, net.label_names
    if kind not in PAIRED_TASKS:
        raise BertkitError(f"{_label_of(model)} is a {kind} model: --against pairs single-label classifiers "
                           f"({', '.join(PAIRED_TASKS)})")
    examples = read_examples(kind, data, LabelMap(tuple(names)), True, ReadOptions(encoding))
    if rows is not None:
        predictions = rows.predict_examples(examples, batch_size)
    else:
        # quiet: evaluate_file has just encoded (and reported the truncation of) the same rows
        predictions = task_object.predict(net, task_object.encode(examples, quiet=True), examples, batch_size)
    return [ex.label for ex in examples], [prediction["label"] for prediction in predictions]


def _label_of(model: Any) -> str:
    return str(model) if isinstance(model, (str, Path)) else str(getattr(model, "path", "the model"))


def predict_file(model: Any, input_path: str | Path, output_path: str | Path, encoding: str = "utf-8",
                 batch_size: int = 64, task: Optional[str] = None,
                 generation: Optional[Mapping[str, float]] = None) -> int:
    """Write one JSON line per input row (the row's own fields plus the prediction); returns the count.
    generation: seq2seq folders' decoding settings (max_new_tokens, num_beams, no_repeat_ngram_size,
    repetition_penalty)."""
    if Path(output_path).exists() and Path(input_path).exists() and os.path.samefile(output_path, input_path):
        raise BertkitError(f"--output {output_path} is the input file; the predictions would replace the texts "
                           "(name another file)")
    rows = _rows_predictor(model)
    if rows is not None:
        _check_linear_task(task, rows)
        examples = _without_gold(read_examples(rows.task or "classification", input_path, None, False,
                                               ReadOptions(encoding)))
        return _write_predictions(output_path, examples, rows.predict_examples(examples, batch_size))
    generate_job = _own_model_folder(model)
    if generate_job is not None:
        _check_task(task, generate_job)
        if TASKS[generate_job[0]].job == "seq2seq":
            return predict_seq2seq_file(generate_job[1], input_path, output_path, encoding, **(generation or {}))
        return predict_prompt_file(generate_job[1], input_path, output_path, encoding, batch_size)
    net, task_object = finetuned_model(model, task)
    raw = read_raw_texts(input_path, ReadOptions(encoding)) if net.task == "ner" else None
    if raw is not None:   # NER on raw text lines / {"text"} rows: words split as Model.predict(texts) splits them
        predictions = _predict_ner_texts(net, task_object, [row.text for row in raw], batch_size)
        return _write_predictions(output_path, raw, predictions)
    examples = _without_gold(read_examples(net.task, input_path, None, False, ReadOptions(encoding)))
    predictions = task_object.predict(net, task_object.encode(examples), examples, batch_size)
    return _write_predictions(output_path, examples, predictions)


def _rows_predictor(model: Any):
    """What predicts read rows itself: a linear model's LinearPredictor, or a loaded ONNX export (OnnxModel,
    from bertkit.load of a .onnx file or its folder); None for fine-tuned folders."""
    linear = linear_predictor_of(model)
    if linear is not None:
        return linear
    return model if callable(getattr(model, "predict_examples", None)) else None


def _write_predictions(output_path: str | Path, examples: Sequence, predictions: Sequence[dict]) -> int:
    return write_jsonl(output_path, ({**_input_fields(example), **prediction}
                                     for example, prediction in zip(examples, predictions)))


def _check_linear_task(task: Optional[str], linear) -> None:
    """linear: a LinearPredictor or an OnnxModel (both have .task and .path)."""
    if task is not None and task != linear.task:
        raise CheckpointError(f"{linear.path} was trained for {linear.task!r}, not {task!r}")


def _check_task(task: Optional[str], generate_job: tuple[str, Path]) -> None:
    """--task given with a generate-job folder: seq2seq must say seq2seq; a prompt classifier is a classifier."""
    saved, folder = generate_job
    if task is not None and task != saved and not (TASKS[saved].job == "prompt" and task == "classification"):
        raise CheckpointError(f"{folder} was fine-tuned for {saved!r}, not {task!r}")


def _without_gold(examples: Sequence) -> list:
    """The rows a file to predict holds, without the gold labels or tags some carry: predict reads none of them,
    and a label the model never saw (a new class in a relabelled file) is no error here."""
    return [ex._replace(label=None) if isinstance(ex, TextExample) else
            ex._replace(tags=None) if isinstance(ex, TaggedSentence) else ex for ex in examples]


def _input_fields(example) -> dict:
    if isinstance(example, RawText):
        return {"line": example.line, "text": example.text}
    if isinstance(example, TaggedSentence):
        return {"line": example.line}
    if isinstance(example, QAExample):
        return {"question": example.question}
    fields = {"line": example.line, "text": example.text}
    if example.text_pair is not None:
        fields["text_pair"] = example.text_pair
    return fields


__all__ = ["predict", "evaluate_file", "predict_file", "finetuned_model", "FinetuneModel", "BertkitError"]
