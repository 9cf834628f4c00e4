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


def test_buckets_shard_by_rank_as_every_job_batch_source():
    """Two ranks of batch 8 see, step by step, the two halves of one process's batch 16 (it handed every rank
    the whole epoch); a short last batch that cannot give each rank a row is dropped, so no rank waits."""
    lengths = [1 + (i * 7) % 30 for i in range(97)]       # 6 global batches of 16 and a 1-row tail
    one = list(BucketedBatches(lengths, 16, lambda indices: indices, seed=3, pool_batches=4, world_size=1, rank=0))
    ranks = [list(BucketedBatches(lengths, 8, lambda indices: indices, seed=3, pool_batches=4, world_size=2,
                                  rank=r)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == len(BucketedBatches(lengths, 8, len, world_size=2, rank=0))
    whole = [batch for batch in one if len(batch) >= 2]
    assert [a + b for a, b in zip(*ranks)] == whole and len(whole) == len(one) - 1      # the tail: one rank only
    assert not set(i for b in ranks[0] for i in b) & set(i for b in ranks[1] for i in b)


def test_collate_pads_to_the_longest_row_only():
    rows = [Row([2, 5, 3], [0, 0, 0]), Row([2, 3], [0, 0])]
    batch = collate(rows, [0, 1], pad_id=0, make_targets=lambda f, n: torch.zeros(len(f)))
    assert batch.input_ids.tolist() == [[2, 5, 3], [2, 3, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    order = [b for b in inference_batches([3, 9, 1, 5], 2, lambda idx: idx)]
    assert order == [[1, 3], [0, 2]]
