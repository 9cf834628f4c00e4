"""Resumable batch sources for the training loop.

A batch source is iterated once per epoch and remembers how far it got, so a checkpoint can store the data
position and a resumed run reads the very next batch. Any object with this shape works (`BatchSource`);
`IndexedBatches` is the common one: a shuffled, rank-sharded walk over item indices.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Protocol, runtime_checkable

import numpy as np
import torch

from bertkit.runtime import distributed_env


@runtime_checkable
class BatchSource(Protocol):
    def __iter__(self) -> Iterator[Any]:
        """The rest of the current epoch's batches for this rank, from the saved position; when the epoch
        is exhausted the source moves on to the next epoch (position 0)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class IndexedBatches:
    """Batches of `batch_size` items per rank. Each epoch is a permutation of range(num_items) seeded by
    (seed, epoch); global batch k takes items [k*B*W, (k+1)*B*W) of it and rank r its r-th slice of B, so
    W ranks with batch B see exactly the items of one process with batch B*W, in the same order.

    `make_batch(indices, epoch)` turns item indices into a batch (tensors or a dict/tuple of them). A source
    with another order (finetune/batching.py's length buckets) overrides `global_batches` only: the rank
    slices, the resume position and the length rule stay the ones here.
    """

    def __init__(self, num_items: int, batch_size: int, make_batch: Callable[[list[int], int], Any],
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 rank: Optional[int] = None, world_size: Optional[int] = None):
        env_rank, env_world, _ = distributed_env()
        self.num_items, self.batch_size, self.make_batch = num_items, batch_size, make_batch
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.rank = env_rank if rank is None else rank
        self.world_size = env_world if world_size is None else world_size
        self.epoch, self.position = 0, 0   # position counts global batches already handed out this epoch

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    def __len__(self) -> int:
        """Batches per epoch (every rank gets the same number, so DDP all-reduces never wait forever)."""
        full, rest = divmod(self.num_items, self.global_batch_size)
        # A short last batch is kept only when every rank still gets at least one item.
        return full + (1 if rest >= self.world_size and not self.drop_last else 0)

    def order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_items)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_items)

    def global_batches(self, epoch: int) -> list[np.ndarray]:
        """The epoch's global batches (B*W items each, the last possibly short), len(self) of them."""
        order, G = self.order(epoch), self.global_batch_size
        return [order[k * G:(k + 1) * G] for k in range(len(self))]

    def __iter__(self) -> Iterator[Any]:
        batches = self.global_batches(self.epoch)
        while self.position < len(batches):
            chunk = batches[self.position]
            per_rank = -(-len(chunk) // self.world_size)
            mine = chunk[self.rank * per_rank:(self.rank + 1) * per_rank]
            self.position += 1
            yield self.make_batch([int(i) for i in mine], self.epoch)
        self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= len(self):
            raise ValueError(f"data position epoch {epoch}, batch {position} is outside this data's {len(self)} "
                             "batches an epoch")
        self.epoch, self.position = epoch, position


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch
