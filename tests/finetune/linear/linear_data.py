"""Planted data for the linear-model tests.

`keyword_rows`: each class has its own keyword, present in a stated share of its rows (the rest carry another
class's keyword): accuracy above that share means the keyword was learned.
`split_signal_rows`: 4 classes = 2 bits. Bit A is a word outside the encoder's vocabulary ("zorp" / "quib": one
[UNK] for the encoder, two different words for TF-IDF); bit B is the case of one word ("day" / "Day": two tokens
for the cased encoder, one word for lower-casing TF-IDF). Each part sees half of the signal: alone each can
reach about 50%, together 100%.
"""
from __future__ import annotations

import json
import random

FILLER = "the a is was movie film book went to in city good bad nice".split()
KEYWORDS = {"sport": "match", "tech": "chip", "politics": "vote", "arts": "paint"}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def keyword_rows(count: int, seed: int, keyword_share: float = 0.9) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        label = rng.choice(sorted(KEYWORDS))
        keyword = KEYWORDS[label] if rng.random() < keyword_share else KEYWORDS[rng.choice(sorted(KEYWORDS))]
        words = rng.sample(FILLER, 5)
        words.insert(rng.randrange(6), keyword)
        rows.append({"text": " ".join(words), "label": label})
    return rows


def split_signal_rows(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        a, b = rng.randrange(2), rng.randrange(2)
        words = rng.sample(FILLER, 4)
        words.insert(rng.randrange(5), ("zorp", "quib")[a])
        words.insert(rng.randrange(6), ("day", "Day")[b])
        rows.append({"text": " ".join(words), "label": f"{a}{b}"})
    return rows
