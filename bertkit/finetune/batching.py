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


class BucketedBatches:
    """A resumable training batch source (the shape the shared training loop iterates)."""

    def __init__(self, lengths: Sequence[int], batch_size: int, make_batch: Callable[[list[int]], Batch],
                 seed: int = 0, pool_batches: int = 50, bucket: bool = True):
        self.lengths = np.asarray(lengths)
        self.batch_size, self.make_batch = batch_size, make_batch
        self.seed, self.pool_batches, self.bucket = seed, pool_batches, bucket
        self.epoch, self.position = 0, 0

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def batches(self, epoch: int) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.lengths))
        if not self.bucket:
            return [order[i:i + self.batch_size].tolist() for i in range(0, len(order), self.batch_size)]
        pool = self.batch_size * self.pool_batches
        groups = []
        for start in range(0, len(order), pool):
            chunk = order[start:start + pool]
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            groups += [chunk[i:i + self.batch_size].tolist() for i in range(0, len(chunk), self.batch_size)]
        return [groups[i] for i in rng.permutation(len(groups))]

    def __iter__(self) -> Iterator[Batch]:
        batches = self.batches(self.epoch)
        while self.position < len(batches):
            indices = batches[self.position]
            self.position += 1
            yield self.make_batch(indices)
        self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


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
