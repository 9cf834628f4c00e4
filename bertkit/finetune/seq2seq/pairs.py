"""Sequence-to-sequence training pairs: the reader of the seq2seq task (finetune/tasks.py TASKS)."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Optional

from bertkit.data.text import iter_jsonl
from bertkit.errors import InputFileError
from bertkit.job_config import JobData

FIELD_NAMES = (("source", "target"), ("text_a", "text_b"))


class Pair(NamedTuple):
    source: str
    target: Optional[str]
    line: int


def read_pairs(path: str | Path, encoding: str = "utf-8", require_target: bool = True) -> list[Pair]:
    """Pairs from a .jsonl file (.gz too); a row without a source/target string stops with file:line."""
    pairs = []
    for number, row in iter_jsonl(path, encoding):
        names = next((names for names in FIELD_NAMES if names[0] in row), None)
        if names is None:
            raise InputFileError(path, "needs a \"source\" (and \"target\") field, or \"text_a\" (and \"text_b\"); "
                                 f"found {', '.join(map(repr, list(row)[:6])) or 'no fields'}", line=number)
        source, target = row[names[0]], row.get(names[1])
        if target is None and require_target:
            raise InputFileError(path, f"missing field {names[1]!r}", line=number)
        for name, value in ((names[0], source), (names[1], target)):
            if value is not None and not isinstance(value, str):
                raise InputFileError(path, f"field {name!r} must be a string, got {type(value).__name__}", line=number)
            if value is not None and not value.strip():
                raise InputFileError(path, f"field {name!r} is empty", line=number)
        pairs.append(Pair(source, target, number))
    if not pairs:
        raise InputFileError(path, "no pairs found (the file is empty)")
    return pairs


def read_pair_splits(data: JobData) -> tuple[list[Pair], Optional[list[Pair]]]:
    """A pair job's training pairs (cut to data.max_train_examples) and dev pairs (None without data.dev)."""
    train = read_pairs(data.train, data.encoding)[:data.max_train_examples]
    dev = read_pairs(data.dev, data.encoding)[:data.max_dev_examples] if data.dev else None
    return train, dev
