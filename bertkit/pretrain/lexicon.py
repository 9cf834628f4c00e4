"""ERNIE 1.0 knowledge masking (Sun et al. 2019): phrases and named entities masked as units.

A lexicon file lists entities or phrases, one per line (UTF-8; blank lines and lines starting with # are
skipped). Each entry is tokenized like the corpus; in a row, every occurrence (longest entry first, left to
right) that starts and ends on token boundaries of whole words (no `##` piece just inside or just after it)
becomes one word, so that whole-word masking masks it entirely or not at all, within the same 15% budget.
  --masking phrase: words are the segmenter's words (jieba phrases for Chinese, whitespace words otherwise),
                    with the lexicon's entries (if any) joined into units;
  --masking entity: the lexicon's entries are the units (the lexicon is required); other words as usual.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.data.shards import continuation_mask
from bertkit.errors import BertkitError


@dataclass(frozen=True)
class Lexicon:
    entries: dict[int, tuple[tuple[int, ...], ...]]    # first token id -> entries starting with it, longest first
    continuation: np.ndarray                            # (V,) bool: the id is a `##` word piece

    def __len__(self) -> int:
        return sum(len(v) for v in self.entries.values())


def read_lexicon(path: str | Path, tokenizer) -> Lexicon:
    path = Path(path)
    if not path.is_file():
        raise BertkitError(f"--lexicon {path}: no such file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise BertkitError(f"--lexicon {path}: not UTF-8 ({err.reason} at byte {err.start})") from None
    by_first: dict[int, set[tuple[int, ...]]] = {}
    for line in lines:
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        ids = tuple(tokenizer.backend.encode(entry, add_special_tokens=False).ids)
        if ids and tokenizer.unk_id not in ids:
            by_first.setdefault(ids[0], set()).add(ids)
    if not by_first:
        raise BertkitError(f"--lexicon {path}: no entry the tokenizer can spell (empty, or every entry has "
                           "unknown tokens)")
    return Lexicon({k: tuple(sorted(v, key=len, reverse=True)) for k, v in by_first.items()},
                   continuation_mask(tokenizer))


def join_entities(ids: np.ndarray, word_starts: np.ndarray, lexicon: Lexicon) -> np.ndarray:
    """word_starts (T,) bool with each lexicon occurrence in ids made one word: a start at its first token,
    none inside it, a start right after it."""
    starts = word_starts.copy()
    T, t = len(ids), 0
    while t < T:
        match = 0
        if not lexicon.continuation[ids[t]]:
            for entry in lexicon.entries.get(int(ids[t]), ()):
                end = t + len(entry)
                if end <= T and tuple(ids[t:end].tolist()) == entry and \
                        (end == T or not lexicon.continuation[ids[end]]):
                    match = len(entry)
                    break
        if match:
            starts[t], starts[t + 1:t + match] = True, False
            if t + match < T:
                starts[t + match] = True
            t += match
        else:
            t += 1
    return starts
