"""Using a fine-tuned model folder: predict on texts (the API), evaluate a labeled file, predict a file.

The task, label names and encoding options come from the folder's bertkit.json, so predictions use the
exact pipeline the model was trained with.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from bertkit.checkpoints import load_checkpoint
from bertkit.data.labels import LabelMap
from bertkit.data.ner_readers import TaggedSentence
from bertkit.data.readers import ReadOptions
from bertkit.data.squad import QAExample
from bertkit.errors import BertkitError, CheckpointError
from bertkit.finetune.classification import examples_from_inputs
from bertkit.finetune.model import TASKS, FinetuneModel, model_from_checkpoint
from bertkit.finetune.ner import split_words
from bertkit.finetune.tasks import TaskOptions, build_task, read_examples
from bertkit.runtime import pick_device


def _checkpoint_of(model: Any):
    """Accept a folder path, a loaded Checkpoint, or the API's Model (which wraps one)."""
    if isinstance(model, (str, Path)):
        return load_checkpoint(model)
    return getattr(model, "checkpoint", model)


def finetuned_model(model: Any, task: Optional[str] = None, device: Optional[str] = None):
    """(FinetuneModel, task object) for a fine-tuned folder; `task` (e.g. from --task) must match its head."""
    checkpoint = _checkpoint_of(model)
    saved_task = (checkpoint.meta or {}).get("task")
    where = getattr(checkpoint, "path", None) or "the model"
    if saved_task not in TASKS:
        raise CheckpointError(f"{where} is not a fine-tuned model (bertkit.json has no task); run bertkit "
                              "finetune first")
    if task is not None and task != saved_task:
        raise CheckpointError(f"{where} was fine-tuned for {saved_task!r}, not {task!r}")
    net = model_from_checkpoint(checkpoint, saved_task, None)
    names = (checkpoint.meta or {}).get("labels") or []
    if saved_task not in ("regression", "qa") and len(names) != getattr(net.head, "num_labels", len(names)):
        raise CheckpointError(f"{where}: bertkit.json lists {len(names)} labels but the head has "
                              f"{net.head.num_labels} outputs; the folder was edited or mixed up")
    saved_options = (checkpoint.meta or {}).get("task_options") or {}
    options = TaskOptions(**{k: v for k, v in saved_options.items() if k in TaskOptions.__dataclass_fields__})
    net.to(pick_device(device)).eval()
    return net, build_task(saved_task, checkpoint.tokenizer, net.label_names, options)


def predict(model: Any, inputs: Sequence[Union[str, tuple, dict]], batch_size: int = 32) -> list[dict]:
    """Predictions for texts or (text, text_pair) pairs; NER: entities with character offsets into each text;
    QA: (question, context) pairs or {"question", "context"} dicts -> answer spans with character offsets."""
    if isinstance(inputs, (str, tuple, dict)):
        raise TypeError("predict takes a list of inputs; wrap a single one in a list")
    net, task = finetuned_model(model)
    if net.task == "ner":
        texts = [str(x) for x in inputs]
        spans, sentences = [], []
        for i, text in enumerate(texts):
            words, word_spans = split_words(text)
            spans.append(word_spans)
            sentences.append(TaggedSentence(words or [" "], None, i))
        features = task.encode(sentences)
        results = task.predict(net, features, sentences, batch_size, spans, texts)
        for result, text in zip(results, texts):
            if not text.strip():
                result.update(tokens=[], tags=[], entities=[])
        return results
    if net.task == "qa":
        examples = [_qa_input(item, i) for i, item in enumerate(inputs)]
        return task.predict(net, task.encode(examples), examples, batch_size)
    examples = examples_from_inputs(inputs)
    return task.predict(net, task.encode(examples, quiet=True), examples, batch_size)


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
    net, task_object = finetuned_model(model, task)
    known = LabelMap(tuple(net.label_names)) if net.task not in ("regression", "qa") else None
    examples = read_examples(net.task, data, known, True, ReadOptions(encoding))
    return task_object.evaluate(net, task_object.encode(examples), examples, batch_size)


def predict_file(model: Any, input_path: str | Path, output_path: str | Path, encoding: str = "utf-8",
                 batch_size: int = 64, task: Optional[str] = None) -> int:
    """Write one JSON line per input row (the row's own fields plus the prediction); returns the count."""
    net, task_object = finetuned_model(model, task)
    examples = read_examples(net.task, input_path, None, False, ReadOptions(encoding))
    predictions = task_object.predict(net, task_object.encode(examples), examples, batch_size)
    output_path = Path(output_path)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    with open(output_path, "w", encoding="utf-8") as out:
        for example, prediction in zip(examples, predictions):
            out.write(json.dumps({**_input_fields(example), **prediction}, ensure_ascii=False) + "\n")
    return len(predictions)


def _input_fields(example) -> dict:
    if isinstance(example, TaggedSentence):
        return {"line": example.line}
    if isinstance(example, QAExample):
        return {"question": example.question}
    fields = {"line": example.line, "text": example.text}
    if example.text_pair is not None:
        fields["text_pair"] = example.text_pair
    return fields


__all__ = ["predict", "evaluate_file", "predict_file", "finetuned_model", "FinetuneModel", "BertkitError"]
