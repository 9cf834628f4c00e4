"""Masked-language-model masking as pure functions of (tokens, what may be masked, word starts, rng).

BERT (Devlin et al. 2019): choose 15% of the maskable tokens; of those, 80% become [MASK], 10% a random
token, 10% stay. The unit chosen, and the 80/10/10 decision, is
  - "token": each token;
  - "whole-word": each word (a token that starts a word plus the `##` / same-Chinese-word tokens after it),
    decided once for the whole word (Cui et al. 2019, Chinese BERT-wwm);
  - "span": spans of whole words with geometric lengths, p = 0.2, clipped at 10 (Joshi et al. 2020,
    SpanBERT), decided once per span;
  - "phrase" / "entity": as whole-word, over words in which lexicon entries were joined (ERNIE 1.0, lexicon.py).
Special tokens and padding are never maskable. Each row takes its own numpy Generator, so a row's mask
depends only on (seed, epoch, instance) — not on the batch it lands in, the rank, or resume points.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, Optional

import numpy as np

MaskingStrategy = Literal["token", "whole-word", "span", "phrase", "entity"]   # phrase / entity: lexicon.py
IGNORE_INDEX = -100           # label of positions that are not predicted (torch cross_entropy's default)


@dataclass(frozen=True)
class MaskingConfig:
    strategy: MaskingStrategy = "token"
    rate: float = 0.15
    mask_fraction: float = 0.8         # of chosen tokens -> [MASK]
    random_fraction: float = 0.1       # of chosen tokens -> a random token; the rest stay unchanged
    span_p: float = 0.2
    span_max: int = 10


class MaskedRow(NamedTuple):
    input_ids: np.ndarray    # (T,) with the replacements applied
    labels: np.ndarray       # (T,) original id where predicted, IGNORE_INDEX elsewhere


def word_units(maskable: np.ndarray, word_starts: Optional[np.ndarray]) -> list[np.ndarray]:
    """Group the maskable positions into words: a new unit at each word start (or each token when
    word_starts is None); a continuation token joins the unit before it."""
    positions = np.flatnonzero(maskable)
    if word_starts is None or not len(positions):
        return [positions[i:i + 1] for i in range(len(positions))]
    starts = word_starts[positions].astype(bool)
    starts[0] = True
    # a gap (a special token between two maskable positions) also starts a new word
    starts[1:] |= np.diff(positions) > 1
    return np.split(positions, np.flatnonzero(starts)[1:])


def choose_units(units: list[np.ndarray], budget: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Units in random order while they fit the budget of masked tokens; then, as in Google's BERT, later
    units that still fit fill the remainder (a long word never overshoots the rate)."""
    order = rng.permutation(len(units))
    lengths = np.fromiter((len(units[i]) for i in order), dtype=np.int64, count=len(order))
    fits = int(np.searchsorted(np.cumsum(lengths), budget, side="right"))
    chosen = [units[i] for i in order[:fits]]
    count = int(lengths[:fits].sum())
    for i, length in zip(order[fits:], lengths[fits:]):
        if count >= budget:
            break
        if count + length <= budget:
            chosen.append(units[i])
            count += int(length)
    return chosen


def choose_spans(units: list[np.ndarray], budget: int, rng: np.random.Generator, p: float,
                 max_len: int) -> list[np.ndarray]:
    """SpanBERT: repeatedly draw a span length in words ~ Geometric(p) clipped at max_len and a random
    start word, until the budget of masked tokens is met; overlapping spans are skipped."""
    used = np.zeros(len(units), dtype=bool)
    chosen, count, attempts = [], 0, 0
    while count < budget and attempts < 10 * budget + 10:
        attempts += 1
        length = min(int(rng.geometric(p)), max_len, len(units))
        start = int(rng.integers(0, len(units) - length + 1))
        if used[start:start + length].any():
            continue
        span = np.concatenate(units[start:start + length])
        if count + len(span) > budget and count > 0:
            continue
        used[start:start + length] = True
        chosen.append(span)
        count += len(span)
    return chosen


def mask_row(input_ids: np.ndarray, maskable: np.ndarray, config: MaskingConfig, rng: np.random.Generator,
             mask_id: int, random_ids: np.ndarray, word_starts: Optional[np.ndarray] = None) -> MaskedRow:
    """Mask one row. maskable: bool (T,), False at special tokens and padding. random_ids: the ids a
    random replacement draws from (the vocabulary without special tokens)."""
    input_ids = np.asarray(input_ids)
    labels = np.full(input_ids.shape, IGNORE_INDEX, dtype=np.int64)
    num_maskable = int(maskable.sum())
    if num_maskable == 0:
        return MaskedRow(input_ids.copy(), labels)
    budget = max(1, int(round(num_maskable * config.rate)))
    out = input_ids.copy()
    if config.strategy == "token":
        positions = rng.permutation(np.flatnonzero(maskable))[:budget]
        decision = rng.random(len(positions))
    else:
        units = word_units(maskable, word_starts)
        if config.strategy == "span":
            chosen = choose_spans(units, budget, rng, config.span_p, config.span_max)
        else:
            chosen = choose_units(units, budget, rng)
        if not chosen:
            return MaskedRow(out, labels)
        positions = np.concatenate(chosen)
        # one 80/10/10 decision per word or span, shared by all its tokens
        decision = np.repeat(rng.random(len(chosen)), [len(u) for u in chosen])
    labels[positions] = input_ids[positions]
    to_mask = positions[decision < config.mask_fraction]
    to_random = positions[(decision >= config.mask_fraction)
                          & (decision < config.mask_fraction + config.random_fraction)]
    out[to_mask] = mask_id
    out[to_random] = random_ids[rng.integers(0, len(random_ids), size=len(to_random))]
    return MaskedRow(out, labels)


def row_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator for one instance's mask: a function of (seed, epoch, instance) only."""
    return np.random.default_rng([seed, epoch, index])
