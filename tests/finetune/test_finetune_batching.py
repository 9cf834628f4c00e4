"""Length-bucketed, dynamically padded batches."""
from __future__ import annotations

from typing import NamedTuple

import torch

from bertkit.finetune.batching import BucketedBatches, collate, inference_batches


class Row(NamedTuple):
    input_ids: list[int]
    token_type_ids: list[int]


def test_buckets_cover_every_item_once_group_by_length_and_resume():
    lengths = [1 + (i * 7) % 30 for i in range(100)]
    source = BucketedBatches(lengths, 8, lambda indices: indices, seed=3, pool_batches=4)
    epoch = list(source)
    assert sorted(i for batch in epoch for i in batch) == list(range(100)) and len(epoch) == len(source)
    spread = max(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in epoch)
    assert spread < 15                                           # similar lengths share a batch
    assert list(source) != epoch                                 # a new order each epoch
    again = BucketedBatches(lengths, 8, lambda indices: indices, seed=3, pool_batches=4)
    iterator = iter(again)
    first = [next(iterator), next(iterator)]
    state = again.state_dict()
    resumed = BucketedBatches(lengths, 8, lambda indices: indices, seed=3, pool_batches=4)
    resumed.load_state_dict(state)
    assert first + list(resumed) == epoch


def test_collate_pads_to_the_longest_row_only():
    rows = [Row([2, 5, 3], [0, 0, 0]), Row([2, 3], [0, 0])]
    batch = collate(rows, [0, 1], pad_id=0, make_targets=lambda f, n: torch.zeros(len(f)))
    assert batch.input_ids.tolist() == [[2, 5, 3], [2, 3, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    order = [b for b in inference_batches([3, 9, 1, 5], 2, lambda idx: idx)]
    assert order == [[1, 3], [0, 2]]
