"""Head outputs -> what /predict answers: labels with probabilities, values, entity spans in the text, or
answers to questions (extractive QA) with character offsets into the context."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

from bertkit.data.squad import QAExample
from bertkit.data.ner_readers import TaggedSentence
from bertkit.finetune.ner import NERFeature, NERTask, sentences_of_texts
from bertkit.finetune.predictions import label_names_for, sequence_predictions
from bertkit.finetune.qa import QAFeature, QATask
from bertkit.finetune.config import TaskOptions
from bertkit.finetune.tasks import build_task
from bertkit.serve.inputs import MAX_ERRORS_SHOWN, PAIR_SEPARATOR, InputRejected, split_pairs
from bertkit.tokenizer.coverage import warn_unknown
from bertkit.tokenizer.tokenizer import InvalidTextError


def describe_sequence(logits: np.ndarray, task: str, labels: Sequence[str]) -> dict:
    """(L,) logits of one text -> what `Model.predict` gives for it (bertkit.finetune.predictions)."""
    return sequence_predictions(logits[None, :], task, labels)[0]


def named_entities(runner) -> Optional[NERTask]:
    """The NER task (windows over long texts, one tag per word) when the served folder tags tokens, else None:
    what `bertkit predict` runs (finetune/predict.py), with its windows' logits from the server's batches."""
    if runner.task != "ner" or runner.head is None:
        return None
    options = served_options(runner)
    options = replace(options, max_length=min(options.max_length, runner.position_limit))
    labels = label_names_for(runner.label_names, getattr(runner.head, "num_labels", len(runner.label_names)))
    return build_task("ner", runner.tokenizer, labels, options)


class PreparedEntities(NamedTuple):
    sentences: list[TaggedSentence]       # each text's words
    spans: list[list[tuple[int, int]]]    # each word's characters in its text
    features: list[NERFeature]            # windows over each text's word pieces


def prepare_entities(tokenizer, texts: Sequence[str], task: NERTask, max_windows: int) -> PreparedEntities:
    """Raw texts -> word windows, as `bertkit predict` makes them; InputRejected names an empty text or one the
    tokenizer refuses. Long texts are windows, never refused or cut; a request of more than max_windows windows
    is NERTask's TooManyWindows, counted from the token lengths before any window is built."""
    split_pairs(texts, allow_pairs=False)          # empty or whitespace-only: named
    sentences, spans = sentences_of_texts(texts)
    try:
        features = task.encode(sentences, max_windows)
    except InvalidTextError as err:
        raise InputRejected(f"texts[{err.index}] {err.reason}") from None
    warn_unknown(tokenizer, texts, "server request texts", [f.input_ids for f in features])
    return PreparedEntities(sentences, spans, features)


# --- extractive QA -----------------------------------------------------------------------------------------
# Windows, n-best decoding and no-answer are bertkit.finetune.qa's (what `bertkit predict` runs); this part only
# feeds it: question/context items in, windows through the server's batcher, answers with character offsets out.

class PreparedQuestions(NamedTuple):
    examples: list[QAExample]
    features: list[QAFeature]          # document-stride windows; feature.example indexes `examples`
    truncated: list[int]               # items whose question was cut to the model's question limit


def sequence_cut(runner) -> tuple[int, bool]:
    """(tokens per row, whether long single texts keep their head and tail) for /predict and /rerank: what the
    folder's task options say, as Model.predict encodes (finetune/classification.py), never past the position
    table. (NER reads its windows through named_entities.)"""
    options = served_options(runner)
    return min(options.max_length, runner.position_limit), options.long_texts == "head+tail"


def served_options(runner) -> TaskOptions:
    """The served folder's task options, checked (a bad one fails start-up in one line naming the folder)."""
    path = getattr(runner.model, "path", None)
    where = Path(path) / "bertkit.json" if path and Path(path).is_dir() else path or "the served folder"
    return TaskOptions.saved(runner.meta, where)


def question_answering(runner) -> Optional[QATask]:
    """The QA task (windows, answers) when the served folder was fine-tuned for extractive QA, else None; the
    windows' logits come from the runner's "qa" batches (ModelRunner.answer_windows)."""
    if runner.task != "qa" or runner.heads.get("qa") is None:
        return None
    options = served_options(runner)
    # A window longer than the position table would fail every batch it lands in; the model's limit wins.
    options = replace(options, max_length=min(options.max_length, runner.position_limit))
    return build_task("qa", runner.tokenizer, [], options)


def qa_examples(texts: Sequence[Any]) -> list[QAExample]:
    """{"question", "context"} items or "question ||| context" strings -> examples; InputRejected names the bad
    ones (empty or whitespace-only question or context, a string without the separator)."""
    examples, errors = [], []
    for index, item in enumerate(texts):
        if isinstance(item, str):
            if PAIR_SEPARATOR not in item:
                errors.append(f'texts[{index}] is a plain text; this model answers questions: send {{"question": '
                              f'..., "context": ...}} or "question {PAIR_SEPARATOR} context"')
                continue
            # As /encode reads pairs: both sides stripped, so offsets count from the context's first character.
            question, context = (part.strip() for part in item.split(PAIR_SEPARATOR, 1))
        else:
            question, context = item.question, item.context
        for name, value in (("question", question), ("context", context)):
            if not value.strip():
                errors.append(f"texts[{index}] has an empty or whitespace-only {name}; send some text")
        examples.append(QAExample(str(index), question.strip(), context, (), False))
    if errors:
        more = f" (and {len(errors) - MAX_ERRORS_SHOWN} more)" if len(errors) > MAX_ERRORS_SHOWN else ""
        raise InputRejected("; ".join(errors[:MAX_ERRORS_SHOWN]) + more)
    return examples


def prepare_questions(tokenizer, examples: Sequence[QAExample], task: QATask, truncate: bool) -> PreparedQuestions:
    """Cut contexts into windows. Contexts may be any length; a question over the task's question limit is
    refused (naming it) unless `truncate`, as over-long texts are on every other endpoint."""
    limit = min(task.max_question_length, task.max_length // 2)     # QATask.encode's cut, in tokens
    questions = tokenizer.encode_batch([ex.question for ex in examples], max_length=None, truncation=None)
    over = [(i, len(ids) - 2) for i, ids in enumerate(questions.input_ids) if len(ids) - 2 > limit]
    if over and not truncate:
        raise InputRejected("; ".join(
            f"texts[{i}] has a question of {n} tokens, more than this model's question limit of {limit}; "
            "shorten it or send \"truncate\": true" for i, n in over[:MAX_ERRORS_SHOWN]))
    return PreparedQuestions(list(examples), task.encode(examples), [i for i, _ in over])


def describe_answers(task: QATask, prepared: PreparedQuestions, outputs: Sequence[tuple]) -> list[dict]:
    """Window logits -> per item {"answer", "start", "end", "score", "null_score"}, offsets into the context;
    no answer (v2.0 models, or no valid span) is answer "" with start and end null."""
    return [{key: best[key] for key in ("answer", "start", "end", "score", "null_score")}
            for best in task.answers(prepared.examples, prepared.features, outputs)]
