"""Reranking triples {query, positive, negative(s)}: the reader of the rerank task (finetune/tasks.py TASKS)."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from bertkit.data.text import iter_jsonl
from bertkit.errors import InputFileError


class Triple(NamedTuple):
    query: str
    positive: str
    negatives: list[str]
    line: int


def read_triples(path: str | Path, encoding: str = "utf-8") -> list[Triple]:
    """Rows {"query", "positive", "negative" (text or list) | "negatives"}; a bad row stops with file:line."""
    triples = []
    for number, row in iter_jsonl(path, encoding):
        for name in ("query", "positive"):
            value = row.get(name)
            if not isinstance(value, str) or not value.strip():
                found = "missing" if value is None else f"{type(value).__name__} {value!r}"[:60]
                raise InputFileError(path, f"field {name!r} must be a non-empty string ({found}); rows are "
                                           '{"query", "positive", "negative"}', line=number)
        negatives = row.get("negative", row.get("negatives", []))
        negatives = [negatives] if isinstance(negatives, str) else negatives
        if not isinstance(negatives, list) or not all(isinstance(n, str) and n.strip() for n in negatives):
            raise InputFileError(path, "field 'negative' must be a non-empty string or a list of them",
                                 line=number)
        triples.append(Triple(row["query"], row["positive"], negatives, number))
    if not triples:
        raise InputFileError(path, 'has no rows; expected JSONL {"query", "positive", "negative"}')
    return triples
