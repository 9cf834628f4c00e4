"""Instances -> masked, padded batches. Masks are made here, per batch (dynamic masking, RoBERTa), or
fixed per copy of the data (static masking with a duplicate factor, as BERT's original data pipeline)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from bertkit.data.shards import Shard
from bertkit.pretrain.instances import Instances
from bertkit.pretrain.lexicon import Lexicon, join_entities
from bertkit.pretrain.masking import IGNORE_INDEX, MaskingConfig, mask_row, row_rng


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    cls: int
    sep: int
    mask: int
    random_ids: np.ndarray      # what a random replacement may draw: the vocabulary minus special tokens

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "SpecialIds":
        specials = {i for i in tokenizer.special_ids if i is not None}
        vocab = tokenizer.backend.get_vocab()
        unused = {i for t, i in vocab.items() if t.startswith("[unused")}
        allowed = np.array(sorted(set(range(tokenizer.vocab_size)) - specials - unused), dtype=np.int64)
        return cls(tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id, allowed)


class PretrainingBatches:
    """make_batch(indices, epoch) for IndexedBatches: builds, masks and pads the instances.

    Batch: input_ids, token_type_ids, attention_mask (B, T); labels (B, T) with IGNORE_INDEX where
    nothing is predicted; pair_labels (B,) for nsp/sop instances.
    """

    def __init__(self, shards: list[Shard], instances: Instances, specials: SpecialIds, masking: MaskingConfig,
                 seed: int = 0, static_copies: int = 0, lexicon: Optional[Lexicon] = None):
        self.shards, self.instances, self.specials, self.masking = shards, instances, specials, masking
        self.lexicon = lexicon                  # phrase / entity masking: its entries become whole words
        self._joined: dict[int, np.ndarray] = {}   # instance -> its joined word starts (joined_words)
        self.seed = seed
        self.static_copies = static_copies      # 0 = dynamic masking; N = N fixed masked copies of the data
        self.has_pairs = bool(len(instances)) and bool((instances.pair_label >= 0).all())

    def __len__(self) -> int:
        return len(self.instances) * max(1, self.static_copies)

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, segment ids, word starts) of instance i, with [CLS]/[SEP] and a [SEP] between documents."""
        inst = self.instances
        shard = self.shards[int(inst.shard[i])]
        sp = self.specials
        parts, segments, words = [np.array([sp.cls])], [np.array([0])], [np.array([1], dtype=np.uint8)]
        spans = [(int(inst.a_start[i]), int(inst.a_end[i]), 0)]
        if inst.b_end[i] > inst.b_start[i]:
            spans.append((int(inst.b_start[i]), int(inst.b_end[i]), 1))
        for start, end, segment in spans:
            pieces = _split_at_documents(shard, start, end) if len(spans) == 1 else [(start, end)]
            for k, (lo, hi) in enumerate(pieces):
                if k:
                    parts.append(np.array([sp.sep]))
                    words.append(np.array([1], dtype=np.uint8))
                    segments.append(np.array([segment]))
                parts.append(shard.tokens[lo:hi].astype(np.int64))
                words.append(shard.words[lo:hi])
                segments.append(np.full(hi - lo, segment))
            parts.append(np.array([sp.sep]))
            words.append(np.array([1], dtype=np.uint8))
            segments.append(np.array([segment]))
        return np.concatenate(parts), np.concatenate(segments), np.concatenate(words).astype(bool)

    def joined_words(self, instance: int, ids: np.ndarray, words: np.ndarray) -> np.ndarray:
        """The word starts of instance `instance` with the lexicon's entries joined: computed once per instance
        (the row is the same in every epoch and static copy), kept as packed bits (T/8 bytes a row)."""
        packed = self._joined.get(instance)
        if packed is None:
            packed = self._joined[instance] = np.packbits(join_entities(ids, words, self.lexicon))
        return np.unpackbits(packed, count=len(ids)).astype(bool)

    def make_batch(self, indices: list[int], epoch: int) -> dict[str, torch.Tensor]:
        rows = []
        for index in indices:
            instance = index % len(self.instances)
            ids, segments, words = self.row(instance)
            if self.lexicon is not None:
                words = self.joined_words(instance, ids, words)
            maskable = (ids != self.specials.cls) & (ids != self.specials.sep) & (ids != self.specials.pad)
            # static: the mask belongs to the copy (index), whatever the epoch; dynamic: new every epoch
            rng = row_rng(self.seed, 0 if self.static_copies else epoch + 1, index)
            masked = mask_row(ids, maskable, self.masking, rng, self.specials.mask, self.specials.random_ids, words)
            rows.append((masked.input_ids, segments, masked.labels, int(self.instances.pair_label[instance])))
        return collate(rows, self.specials.pad)


def _split_at_documents(shard: Shard, start: int, end: int) -> list[tuple[int, int]]:
    """Pieces of [start, end) between document starts (packed instances get a [SEP] between documents)."""
    doc_tokens = shard.sentence_offsets[shard.doc_offsets]
    lo, hi = np.searchsorted(doc_tokens, [start, end], side="right")
    cuts = [int(t) for t in doc_tokens[lo:hi] if start < t < end]
    edges = [start, *cuts, end]
    return list(zip(edges[:-1], edges[1:]))


def collate(rows: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad to the longest row of the batch (packed rows are all full, so there is nothing to pad)."""
    T = max(len(r[0]) for r in rows)
    B = len(rows)
    input_ids = np.full((B, T), pad_id, dtype=np.int64)
    token_type_ids = np.zeros((B, T), dtype=np.int64)
    labels = np.full((B, T), IGNORE_INDEX, dtype=np.int64)
    attention_mask = np.zeros((B, T), dtype=np.int64)
    for b, (ids, segments, row_labels, _) in enumerate(rows):
        n = len(ids)
        input_ids[b, :n], token_type_ids[b, :n], labels[b, :n], attention_mask[b, :n] = ids, segments, row_labels, 1
    batch = {"input_ids": torch.from_numpy(input_ids), "token_type_ids": torch.from_numpy(token_type_ids),
             "attention_mask": torch.from_numpy(attention_mask), "labels": torch.from_numpy(labels)}
    pair = [r[3] for r in rows]
    if all(p >= 0 for p in pair):
        batch["pair_labels"] = torch.tensor(pair, dtype=torch.int64)
    return batch
