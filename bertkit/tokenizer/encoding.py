"""Encoded batches and how texts become [CLS] A [SEP] (B [SEP]) rows: truncation, sliding windows, errors.
RoBERTa frames a pair as <s> A </s></s> B </s> (two separators, one segment): `Framing` says which.

The Rust tokenizer splits the texts (without special tokens); these functions cut and frame the token
lists. Truncation follows Hugging Face's (slow, Python) BertTokenizer, so ids match it exactly; where HF
silently returns a row longer than max_length (only_second with no pair, or a kept text that alone is too
long), bertkit raises TextTooLongError instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple, Optional, Sequence

from tokenizers import Encoding

from bertkit.errors import BertkitError

Truncation = Optional[Literal["longest_first", "only_first", "only_second"]]
TRUNCATION_STRATEGIES = ("longest_first", "only_first", "only_second", None)
NO_OFFSET = (0, 0)  # the offsets of [CLS], [SEP] and padding: they cover no text


class Framing(NamedTuple):
    """How special tokens frame a text or pair: [CLS] A [SEP] (B [SEP]) for BERT, RoBERTa <s> A </s></s> B </s>."""
    cls_id: int
    sep_id: int
    pair_separators: int = 1     # separators between A and B: 1 (BERT), 2 (RoBERTa)
    second_segment: int = 1      # token type of the pair text: 1 (BERT), 0 (RoBERTa has one segment)

    def specials(self, pair: bool) -> int:
        return 1 + self.pair_separators + 1 if pair else 2


class TextTooLongError(BertkitError):
    """A text (or pair) has more tokens than max_length and truncation was not asked for (or cannot help)."""

    def __init__(self, index: int, length: int, limit: int, hint: str | None = None):
        self.index, self.length, self.limit = index, length, limit
        hint = hint or ("cut it with truncation='longest_first' (CLI: --long-texts truncate), or keep all of it "
                        "in sliding windows (Tokenizer.encode_windows; CLI: --long-texts sliding-window)")
        super().__init__(f"text {index} has {length} tokens including [CLS]/[SEP], over the max_length of "
                         f"{limit}; {hint}")


@dataclass
class BatchEncoding:
    """One row per text (or pair), unpadded python lists; offsets are character spans into the text
    the token came from (the first text where token_type_id is 0, the pair text where it is 1)."""
    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    offsets: list[list[tuple[int, int]]]
    truncated: list[bool]  # per row: tokens were cut to fit max_length

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_truncated(self) -> int:
        return sum(self.truncated)

    @property
    def lengths(self) -> list[int]:
        return [len(ids) for ids in self.input_ids]


class WindowedEncoding(NamedTuple):
    """Overlapping windows of long texts: encoding rows are windows, text_index[row] the text they cover."""
    encoding: BatchEncoding
    text_index: list[int]


def kept_lengths(len_a: int, len_b: int | None, max_length: int | None, truncation: Truncation,
                 index: int, pair_specials: int = 3) -> tuple[int, int | None]:
    """How many tokens of text A (and pair text B) to keep so the framed row fits max_length (None: all)."""
    if max_length is None:
        return len_a, len_b
    num_special = 2 if len_b is None else pair_specials
    budget = max_length - num_special
    total = len_a + (len_b or 0)
    if total <= budget:
        return len_a, len_b
    length = total + num_special
    if truncation is None:
        raise TextTooLongError(index, length, max_length)
    if len_b is None:
        if truncation == "only_second":
            raise TextTooLongError(index, length, max_length, "truncation='only_second' cuts only the second "
                                   "text of a pair; use 'longest_first' for single texts")
        return budget, None
    if truncation == "only_first":
        if len_b > budget:
            raise TextTooLongError(index, length, max_length, "its second text alone does not fit, so "
                                   "truncation='only_first' cannot help; use 'longest_first'")
        return budget - len_b, len_b
    if truncation == "only_second":
        if len_a > budget:
            raise TextTooLongError(index, length, max_length, "its first text alone does not fit, so "
                                   "truncation='only_second' cannot help; use 'longest_first'")
        return len_a, budget - len_a
    # longest_first: HF drops one token at a time from the longer text (from B on a tie). In closed form,
    # a short text stays whole; when both are long they meet in the middle, A keeping the odd token.
    if len_a > len_b and budget - len_b >= len_b:
        return budget - len_b, len_b
    if len_b > len_a and budget - len_a >= len_a:
        return len_a, budget - len_a
    return (budget + 1) // 2, budget // 2


def frame_batch(firsts: Sequence[Encoding], seconds: Sequence[Encoding] | None, max_length: int | None,
                truncation: Truncation, framing: Framing) -> BatchEncoding:
    """Truncate each split text (pair) and add [CLS]/[SEP]: list slicing per text, no per-token Python."""
    batch = BatchEncoding([], [], [], [])
    cls_id, sep_id, extra = framing.cls_id, framing.sep_id, framing.pair_separators - 1
    for index, first in enumerate(firsts):
        second = seconds[index] if seconds is not None else None
        ids_a, offsets_a = first.ids, first.offsets
        len_b = len(second.ids) if second is not None else None
        keep_a, keep_b = kept_lengths(len(ids_a), len_b, max_length, truncation, index, framing.specials(True))
        ids = [cls_id, *ids_a[:keep_a], sep_id]
        offsets = [NO_OFFSET, *offsets_a[:keep_a], NO_OFFSET]
        type_ids = [0] * len(ids)
        if second is not None:
            ids += [*[sep_id] * extra, *second.ids[:keep_b], sep_id]
            offsets += [*[NO_OFFSET] * extra, *second.offsets[:keep_b], NO_OFFSET]
            type_ids += [framing.second_segment] * (extra + keep_b + 1)
        batch.input_ids.append(ids)
        batch.token_type_ids.append(type_ids)
        batch.offsets.append(offsets)
        batch.truncated.append(keep_a < len(ids_a) or (len_b is not None and keep_b < len_b))
    return batch


def head_tokens(budget: int) -> int:
    """How many of `budget` tokens head+tail truncation takes from the start: 128 of 510 (Sun et al. 2019)."""
    return round(budget * 128 / 510)


def keep_head_and_tail(ids: Sequence[int], max_length: int) -> tuple[list[int], bool]:
    """[CLS] body [SEP] cut to max_length by keeping the body's start and end (Sun et al. 2019, "How to Fine-Tune
    BERT for Text Classification?": the first 128 and the last 382 tokens of a 510-token budget beat keeping only
    the start; other budgets keep the same 128 : 382 split). Returns (ids, whether it was cut)."""
    budget = max_length - 2
    body = list(ids[1:-1])
    if len(body) <= budget:
        return list(ids), False
    head = head_tokens(budget)
    return [ids[0], *body[:head], *body[len(body) - (budget - head):], ids[-1]], True


def window_starts(num_tokens: int, window: int, stride: int) -> range:
    """Start positions of windows of `window` tokens overlapping by `stride` that cover all tokens.

    Windows advance by window - stride; the last one is the first that reaches the end (one empty window
    for an empty text, so every text gets at least one row).
    """
    step = window - stride
    last_start = max(0, -(-(num_tokens - window) // step) * step)  # ceil to a multiple of step
    return range(0, last_start + 1, step)


def frame_windows(splits: Sequence[Encoding], max_length: int, stride: int, framing: Framing) -> WindowedEncoding:
    window = max_length - 2
    if window < 1 or not 0 <= stride < window:
        raise ValueError(f"sliding windows need max_length >= 3 and 0 <= stride < max_length - 2, got "
                         f"max_length={max_length}, stride={stride}")
    batch, text_index = BatchEncoding([], [], [], []), []
    cls_id, sep_id = framing.cls_id, framing.sep_id
    for index, split in enumerate(splits):
        ids, offsets = split.ids, split.offsets
        for start in window_starts(len(ids), window, stride):
            end = start + window
            batch.input_ids.append([cls_id, *ids[start:end], sep_id])
            batch.offsets.append([NO_OFFSET, *offsets[start:end], NO_OFFSET])
            batch.token_type_ids.append([0] * (min(end, len(ids)) - start + 2))
            batch.truncated.append(False)
            text_index.append(index)
    return WindowedEncoding(batch, text_index)
