"""Reader for extractive QA data in SQuAD v1.1 / v2.0 JSON.

`{"version", "data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question", "answers":
[{"text", "answer_start"}], "is_impossible"?}]}]}]}`. Every answer must slice exactly out of its context
(`context[answer_start:answer_start + len(text)] == text`); one that does not is a bad row, because a
shifted offset trains the model on the wrong span. Bad rows are named by question id.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from bertkit.data.bad_rows import BadRowLog
from bertkit.data.text import read_text
from bertkit.data.readers import ReadOptions, file_format
from bertkit.errors import InputFileError


class Answer(NamedTuple):
    text: str
    start: int          # character offset into the context


class QAExample(NamedTuple):
    id: str
    question: str
    context: str
    answers: tuple[Answer, ...]   # empty for v2.0 unanswerable questions (and for unlabeled input)
    is_impossible: bool


def read_squad(path: str | Path, require_answers: bool = True,
               options: ReadOptions = ReadOptions()) -> list[QAExample]:
    path = Path(path)
    if file_format(path) != "squad":
        raise InputFileError(path, "qa reads SQuAD JSON: one .json file holding {\"version\": ..., \"data\": "
                                   "[articles with paragraphs and qas]}, not one row per line")
    text = read_text(path, options.encoding)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputFileError(path, f"invalid JSON: {err.msg} (column {err.colno})", err.lineno) from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise InputFileError(path, 'not SQuAD JSON: expected {"version": ..., "data": [articles]}')
    log = BadRowLog(path, options.skip_bad_rows, options.rejects_path, unit="question",
                    skip_hint=options.skip_hint)
    examples = []
    for a, article in enumerate(document["data"]):
        for p, paragraph in enumerate(article.get("paragraphs", []) if isinstance(article, dict) else []):
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            if not isinstance(context, str) or not context.strip():
                log.add(f"data[{a}].paragraphs[{p}]", "empty context", "missing or empty context",
                        json.dumps(paragraph, ensure_ascii=False)[:500])
                continue
            for q, qa in enumerate(paragraph.get("qas", [])):
                where = f"data[{a}].paragraphs[{p}].qas[{q}]"
                example = _to_example(qa, context, where, require_answers, log)
                if example is not None:
                    examples.append(example)
    log.finish()
    if not examples:
        raise InputFileError(path, "no questions found (the file is empty or every question was rejected)")
    return examples


def _to_example(qa, context: str, where: str, require_answers: bool, log: BadRowLog):
    raw = json.dumps(qa, ensure_ascii=False)[:500]
    if not isinstance(qa, dict):
        log.add(where, "not an object", "a question must be a JSON object", raw)
        return None
    qid = str(qa.get("id", where))
    question = qa.get("question")
    if not isinstance(question, str) or not question.strip():
        log.add(qid, "empty question", "missing or empty question", raw)
        return None
    impossible = bool(qa.get("is_impossible", False))
    answers = []
    for item in qa.get("answers", []) or []:
        try:
            answer = Answer(str(item["text"]), int(item["answer_start"]))
        except (KeyError, TypeError, ValueError):
            log.add(qid, "bad answer", 'each answer needs "text" and an integer "answer_start"', raw)
            return None
        found = context[answer.start:answer.start + len(answer.text)]
        if answer.start < 0 or found != answer.text:
            log.add(qid, "answer offset does not match context",
                    f"answer {answer.text!r} at {answer.start} but the context has {found!r} there", raw)
            return None
        if not answer.text.strip():
            log.add(qid, "empty answer", "empty answer text", raw)
            return None
        answers.append(answer)
    if require_answers and not answers and not impossible:
        log.add(qid, "missing answer", 'no answers and not "is_impossible"', raw)
        return None
    return QAExample(qid, question, context, tuple(answers), impossible)
