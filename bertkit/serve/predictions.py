"""Head outputs -> what /predict answers: labels with probabilities, values, entity spans in the text, or
answers to questions (extractive QA) with character offsets into the context."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

from bertkit.data.squad import QAExample
from bertkit.finetune.ner import first_piece_words, split_words
from bertkit.finetune.predictions import entity_prediction, label_names_for, sequence_predictions, softmax
from bertkit.finetune.qa import QAFeature, QATask
from bertkit.finetune.config import TaskOptions
from bertkit.finetune.tasks import build_task
from bertkit.serve.inputs import MAX_ERRORS_SHOWN, PAIR_SEPARATOR, InputRejected


def describe_sequence(logits: np.ndarray, task: str, labels: Sequence[str]) -> dict:
    """(L,) logits of one text -> what `Model.predict` gives for it (bertkit.finetune.predictions)."""
    return sequence_predictions(logits[None, :], task, labels)[0]


def describe_entities(logits: np.ndarray, offsets: Sequence[tuple[int, int]], text: str,
                      labels: Sequence[str]) -> dict:
    """(T, L) token logits of `text` ([CLS] ... [SEP]) -> what `Model.predict` gives: the text's words (as
    bertkit.finetune.ner splits them), one tag per word from its first sub-token (the one fine-tuning labels),
    and entities with character offsets into `text`. Words cut off by truncation are tagged O."""
    names = label_names_for(labels, logits.shape[-1])
    words, spans = split_words(text)
    length = min(len(offsets), len(logits))
    word_ids = first_piece_words([start for start, _ in offsets[1:length - 1]], [start for start, _ in spans])
    probabilities = softmax(logits[1:length - 1])
    tags, tag_probabilities = ["O"] * len(words), [1.0] * len(words)
    for position, word in enumerate(word_ids):
        if word >= 0:
            best = int(probabilities[position].argmax())
            tags[word], tag_probabilities[word] = names[best], float(probabilities[position, best])
    return entity_prediction(words, tags, tag_probabilities, spans, text)


# --- extractive QA -----------------------------------------------------------------------------------------
# Windows, n-best decoding and no-answer are bertkit.finetune.qa's (what `bertkit predict` runs); this part only
# feeds it: question/context items in, windows through the server's batcher, answers with character offsets out.

class PreparedQuestions(NamedTuple):
    examples: list[QAExample]
    features: list[QAFeature]          # document-stride windows; feature.example indexes `examples`
    truncated: list[int]               # items whose question was cut to the model's question limit


def sequence_cut(runner) -> tuple[int, bool]:
    """(tokens per row, whether long single texts keep their head and tail) for /predict: what the folder's task
    options say, as Model.predict encodes (finetune/classification.py), never past the position table. NER keeps
    the position table and plain truncation."""
    if runner.task == "ner":
        return runner.position_limit, False
    options = TaskOptions.saved(runner.meta)
    return min(options.max_length, runner.position_limit), options.long_texts == "head+tail"


def question_answering(runner) -> Optional[QATask]:
    """The QA task (windows, answers) when the served folder was fine-tuned for extractive QA, else None; the
    windows' logits come from the runner's "qa" batches (ModelRunner.answer_windows)."""
    if runner.task != "qa" or runner.heads.get("qa") is None:
        return None
    options = TaskOptions.saved(runner.meta)
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
