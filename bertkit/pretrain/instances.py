"""Training instances from shards, as in the papers; each instance is a few token offsets into a shard.

- "packed" (RoBERTa FULL-SENTENCES, Liu et al. 2019): whole sentences packed up to max_length, crossing
  document boundaries with a [SEP] between documents; no sentence-pair task, no padding waste.
- "nsp" (BERT, create_pretraining_data.py): segment A = the first sentences of a chunk; B = the actual
  continuation, or, 50% of the time, a span of a random other document (label 1 = random).
- "sop" (ALBERT, Lan et al. 2020): B is always the actual continuation; 50% of pairs are swapped
  (label 1 = swapped order).
Pair chunks aim at max_length, but 10% aim at a random shorter length (short_seq_prob) so the model also
sees short inputs. Instances are built once per run, with a seeded generator; masking is separate.
"""
from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np

from bertkit.data.shards import Shard

InstanceKind = Literal["packed", "nsp", "sop"]


class Instances(NamedTuple):
    """Instance i lives in shard[i]; segment A is tokens [a_start, a_end), B is [b_start, b_end) (empty
    for packed instances); pair_label is -1 for packed instances."""
    shard: np.ndarray
    a_start: np.ndarray
    a_end: np.ndarray
    b_start: np.ndarray
    b_end: np.ndarray
    pair_label: np.ndarray

    def __len__(self) -> int:
        return len(self.shard)

    def take(self, rows: np.ndarray) -> "Instances":
        return Instances(*(field[rows] for field in self))


def _as_instances(rows: list[tuple[int, int, int, int, int, int]]) -> Instances:
    array = np.asarray(rows, dtype=np.int64).reshape(-1, 6)
    return Instances(*(array[:, j] for j in range(6)))


def build_instances(shards: list[Shard], kind: InstanceKind, max_length: int, seed: int = 0,
                    short_seq_prob: float = 0.1) -> Instances:
    rows: list[tuple[int, int, int, int, int, int]] = []
    for index, shard in enumerate(shards):
        rng = np.random.default_rng([seed, index])
        if kind == "packed":
            rows.extend((index, a, b, 0, 0, -1) for a, b in pack_spans(shard, max_length - 2))
        else:
            rows.extend((index, *pair) for pair in pair_spans(shard, kind, max_length - 3, short_seq_prob, rng))
    return _as_instances(rows)


def pack_spans(shard: Shard, budget: int) -> list[tuple[int, int]]:
    """Greedy packing of whole sentences into spans of at most `budget` tokens, counting one [SEP] per
    document boundary inside a span; a sentence longer than the budget is cut into pieces."""
    bounds = shard.sentence_offsets.tolist()
    doc_start = np.zeros(len(bounds), dtype=bool)
    doc_start[shard.doc_offsets[:-1]] = True
    spans, start, used = [], 0, 0
    for s in range(len(bounds) - 1):
        length = bounds[s + 1] - bounds[s]
        sep = 1 if used and doc_start[s] else 0
        if used + sep + length <= budget:
            used += sep + length
            continue
        if used:
            spans.append((start, bounds[s]))
            start = bounds[s]
        while length > budget:
            spans.append((start, start + budget))
            start, length = start + budget, length - budget
        used = length
    if used:
        spans.append((start, bounds[-1]))
    return spans


def pair_spans(shard: Shard, kind: InstanceKind, max_tokens: int, short_seq_prob: float,
               rng: np.random.Generator) -> list[tuple[int, int, int, int, int]]:
    bounds = shard.sentence_offsets
    docs = shard.doc_offsets
    out = []
    for d in range(len(docs) - 1):
        first, last = int(docs[d]), int(docs[d + 1])        # sentences [first, last)
        target = max_tokens if rng.random() >= short_seq_prob else int(rng.integers(2, max_tokens + 1))
        chunk_start, s = first, first
        while s < last:
            if bounds[s + 1] - bounds[chunk_start] < target and s < last - 1:
                s += 1
                continue
            end = s + 1                                    # chunk = sentences [chunk_start, end)
            pair, next_start = _make_pair(shard, kind, chunk_start, end, d, max_tokens, target, rng)
            if pair is not None:
                out.append(pair)
            chunk_start, s = next_start, next_start
            target = max_tokens if rng.random() >= short_seq_prob else int(rng.integers(2, max_tokens + 1))
    return out


def _make_pair(shard: Shard, kind: InstanceKind, first: int, end: int, doc: int, max_tokens: int, target: int,
               rng: np.random.Generator):
    bounds = shard.sentence_offsets
    n = end - first
    if n >= 2:
        a_end_sentence = first + int(rng.integers(1, n))
        a = (int(bounds[first]), int(bounds[a_end_sentence]))
        b = (int(bounds[a_end_sentence]), int(bounds[end]))
    else:                                                  # one long sentence: split it in the middle
        lo, hi = int(bounds[first]), int(bounds[end])
        if hi - lo < 2:
            return None, end
        mid = (lo + hi) // 2
        a_end_sentence = end
        a, b = (lo, mid), (mid, hi)
    label = 0
    if kind == "nsp" and (rng.random() < 0.5) and shard.num_documents > 1:
        other = doc
        for _ in range(10):                                # a different document, as Google's code does
            other = int(rng.integers(0, shard.num_documents))
            if other != doc:
                break
        o_first, o_last = int(shard.doc_offsets[other]), int(shard.doc_offsets[other + 1])
        start = int(bounds[int(rng.integers(o_first, o_last))])
        room = max(1, target - (a[1] - a[0]))
        b = (start, min(start + room, int(bounds[o_last])))
        label = 1
        # Google's trick: the chunk's sentences after A were not used as B; they start the next chunk.
        end = a_end_sentence
    elif kind == "sop" and rng.random() < 0.5:
        a, b, label = b, a, 1
    a, b = _truncate_pair(a, b, max_tokens, rng)
    if a[1] <= a[0] or b[1] <= b[0]:
        return None, end
    return (a[0], a[1], b[0], b[1], label), end


def _truncate_pair(a: tuple[int, int], b: tuple[int, int], max_tokens: int, rng: np.random.Generator):
    """Trim the longer segment one token at a time, from its front or back at random (as Google's code)."""
    a, b = list(a), list(b)
    while (a[1] - a[0]) + (b[1] - b[0]) > max_tokens:
        longer, shorter = (a, b) if (a[1] - a[0]) > (b[1] - b[0]) else (b, a)
        seg = longer
        excess = (a[1] - a[0]) + (b[1] - b[0]) - max_tokens
        cut = max(1, min(excess, (longer[1] - longer[0]) - (shorter[1] - shorter[0])))
        if rng.random() < 0.5:
            seg[0] += cut
        else:
            seg[1] -= cut
    return tuple(a), tuple(b)
