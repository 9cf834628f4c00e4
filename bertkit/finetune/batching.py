"""Batches for fine-tuning: dynamic padding (pad to the longest row of the batch, never to max_length) and
length-bucketed batch order, so short texts do not pay for long ones.

Training order: shuffle, cut into pools of `pool_batches` batches, sort each pool by length, cut it into
batches, then shuffle the batches. Each batch holds rows of similar length, while the order stays random
enough for SGD (the same scheme as fairseq's and AllenNLP's bucket iterators). Seeded by (seed, epoch).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence

import numpy as np
import torch

from bertkit.tokenizer.padding import pad_to_tensors
from bertkit.train.batches import IndexedBatches


class Batch(NamedTuple):
    input_ids: torch.Tensor          # (B, T) padded with pad_id
    attention_mask: torch.Tensor     # (B, T) 1 for real tokens
    token_type_ids: torch.Tensor     # (B, T)
    targets: Any                     # task-specific tensors (labels, tag ids, start/end positions)
    indices: list[int]               # feature indices, to map predictions back

    def to(self, device: torch.device) -> "Batch":
        targets = self.targets
        if isinstance(targets, torch.Tensor):
            targets = targets.to(device, non_blocking=True)
        elif isinstance(targets, tuple):
            targets = tuple(t.to(device, non_blocking=True) for t in targets)
        return Batch(self.input_ids.to(device, non_blocking=True), self.attention_mask.to(device, non_blocking=True),
                     self.token_type_ids.to(device, non_blocking=True), targets, self.indices)


def collate(features: Sequence[Any], indices: list[int], pad_id: int,
            make_targets: Callable[[Sequence[Any], int], Any]) -> Batch:
    """features need .input_ids and .token_type_ids; make_targets(features, padded_length) builds targets."""
    padded = pad_to_tensors([f.input_ids for f in features], pad_id, [f.token_type_ids for f in features])
    input_ids = padded["input_ids"]                                                     # (B, T)
    return Batch(input_ids, padded["attention_mask"], padded["token_type_ids"],
                 make_targets(features, input_ids.shape[1]), indices)


class BucketedBatches(IndexedBatches):
    """train/batches.py's resumable, rank-sharded source with length-bucketed global batches: `batch_size`
    rows per rank, each global batch (batch_size x world size rows of similar length) split across ranks."""

    def __init__(self, lengths: Sequence[int], batch_size: int, make_batch: Callable[[list[int]], Batch],
                 seed: int = 0, pool_batches: int = 50, bucket: bool = True, drop_last: bool = False,
                 rank: Optional[int] = None, world_size: Optional[int] = None):
        super().__init__(len(lengths), batch_size, lambda indices, epoch: make_batch(indices), seed=seed,
                         drop_last=drop_last, rank=rank, world_size=world_size)
        self.lengths = np.asarray(lengths)
        self.pool_batches, self.bucket = pool_batches, bucket

    def global_batches(self, epoch: int) -> list[np.ndarray]:
        if not self.bucket:
            return super().global_batches(epoch)
        rng = np.random.default_rng([self.seed, epoch])
        order, G = rng.permutation(len(self.lengths)), self.global_batch_size
        pool = G * self.pool_batches
        groups = []
        for start in range(0, len(order), pool):
            chunk = order[start:start + pool]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            groups += [chunk[i:i + G] for i in range(0, len(chunk), G)]
        # the one short batch (the last pool's tail) stays only when every rank gets a row (IndexedBatches' rule)
        least = G if self.drop_last else self.world_size
        groups = [groups[i] for i in rng.permutation(len(groups))]
        return [group for group in groups if len(group) >= least]


def inference_batches(lengths: Sequence[int], batch_size: int, make_batch: Callable[[list[int]], Batch],
                      token_budget: Optional[int] = None) -> Iterator[Batch]:
    """Batches in length order (longest first, so memory problems show up at once); with a token budget,
    short rows are packed into bigger batches. Callers put results back by Batch.indices."""
    order = np.argsort(-np.asarray(lengths), kind="stable").tolist()
    i = 0
    while i < len(order):
        size = batch_size
        if token_budget:
            size = max(batch_size, token_budget // max(int(lengths[order[i]]), 1))
        yield make_batch(order[i:i + size])
        i += size
