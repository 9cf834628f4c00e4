"""SQuAD exact match and F1, normalized exactly as the official v1.1 / v2.0 evaluation scripts do.

normalize: lower case, drop ASCII punctuation (string.punctuation), drop the articles a/an/the, collapse
whitespace. F1 is bag-of-tokens overlap, the maximum over the gold answers. v2.0: an unanswerable question
has the gold answer "" and a prediction scores 1 only when it is "" too.
"""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Sequence

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)        # v2.0: both empty (no-answer) scores 1
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: dict[str, str], golds: dict[str, Sequence[str]]) -> dict[str, float]:
    """predictions: id -> answer text ("" for no answer); golds: id -> gold answer texts ([] = unanswerable).

    Returns exact_match and f1 in percent over all questions, and the has-answer / no-answer split when
    the set has unanswerable questions (as the v2.0 script reports HasAns / NoAns).
    """
    em_total = f1_total = 0.0
    split = {"has_answer": [0.0, 0.0, 0], "no_answer": [0.0, 0.0, 0]}
    for qid, answers in golds.items():
        answers = [a for a in answers if normalize_answer(a)] or [""]
        prediction = predictions.get(qid, "")
        em = max(exact_match(prediction, a) for a in answers)
        score = max(f1(prediction, a) for a in answers)
        em_total += em
        f1_total += score
        bucket = split["no_answer" if answers == [""] else "has_answer"]
        bucket[0] += em
        bucket[1] += score
        bucket[2] += 1
    count = max(len(golds), 1)
    result = {"exact_match": 100.0 * em_total / count, "f1": 100.0 * f1_total / count, "total": len(golds)}
    if split["no_answer"][2]:
        for name, (em, score, n) in split.items():
            if n:
                result[f"{name}_exact_match"] = 100.0 * em / n
                result[f"{name}_f1"] = 100.0 * score / n
                result[f"{name}_total"] = n
    return result
