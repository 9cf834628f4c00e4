"""Entity spans from BIO / BIOES (and BILOU) tag sequences, and entity-level precision / recall / F1.

Chunking follows conlleval and seqeval's default (non-strict) mode, so scores match seqeval's
classification_report: an I- tag after O or after another type starts a new entity, an entity is counted
correct only when its type, first and last token all match.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple, Sequence


class Entity(NamedTuple):
    type: str
    start: int          # first token
    end: int            # last token, inclusive


def _split(tag: str) -> tuple[str, str]:
    if tag in ("O", "") or len(tag) < 2:
        return "O", ""
    prefix = {"L": "E", "U": "S"}.get(tag[0], tag[0])       # BILOU -> BIOES
    entity_type = tag[2:] if tag[1] in "-_" else tag[1:]
    return prefix, entity_type or "_"


def _ends(prev_prefix: str, prefix: str, prev_type: str, entity_type: str) -> bool:
    if prev_prefix in ("E", "S"):
        return True
    if prev_prefix in ("B", "I") and prefix in ("B", "S", "O"):
        return True
    return prev_prefix != "O" and prev_type != entity_type


def _starts(prev_prefix: str, prefix: str, prev_type: str, entity_type: str) -> bool:
    if prefix in ("B", "S"):
        return True
    if prev_prefix in ("E", "S", "O") and prefix in ("E", "I"):
        return True
    return prefix != "O" and prev_type != entity_type


def entities(tags: Sequence[str]) -> list[Entity]:
    found = []
    prev_prefix, prev_type, start = "O", "", 0
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, entity_type = _split(tag)
        if _ends(prev_prefix, prefix, prev_type, entity_type):
            found.append(Entity(prev_type, start, i - 1))
        if _starts(prev_prefix, prefix, prev_type, entity_type):
            start = i
        prev_prefix, prev_type = prefix, entity_type
    return found


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
    """Micro precision / recall / F1 over all entities, plus the same per entity type (with support)."""
    gold_sets = [set(entities(tags)) for tags in gold]
    pred_sets = [set(entities(tags)) for tags in predicted]
    correct, n_gold, n_pred = Counter(), Counter(), Counter()
    for g, p in zip(gold_sets, pred_sets):
        correct.update(e.type for e in g & p)
        n_gold.update(e.type for e in g)
        n_pred.update(e.type for e in p)

    def prf(c: int, ng: int, np_: int) -> dict:
        precision = c / np_ if np_ else 0.0
        recall = c / ng if ng else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1}

    result = prf(sum(correct.values()), sum(n_gold.values()), sum(n_pred.values()))
    result["per_type"] = {t: {**prf(correct[t], n_gold[t], n_pred[t]), "support": n_gold[t]}
                          for t in sorted(set(n_gold) | set(n_pred))}
    return result
