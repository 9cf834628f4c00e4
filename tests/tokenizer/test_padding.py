"""pad_to_tensors: dynamic padding to the longest row, with masks and segment ids."""
from __future__ import annotations

import torch

from bertkit.tokenizer import pad_to_tensors


def test_pads_to_the_longest_row_with_the_pad_id():
    out = pad_to_tensors([[5, 6, 7], [8], [9, 10]], pad_id=0, token_type_ids=[[0, 0, 1], [0], [0, 1]])
    assert out["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert out["token_type_ids"].tolist() == [[0, 0, 1], [0, 0, 0], [0, 1, 0]]
    assert all(t.dtype == torch.long for t in out.values())


def test_other_pad_id_multiple_of_and_default_segments():
    out = pad_to_tensors([[1, 2, 3, 4, 5]], pad_id=3, pad_to_multiple_of=8)
    assert out["input_ids"].tolist() == [[1, 2, 3, 4, 5, 3, 3, 3]]
    assert out["attention_mask"].sum() == 5 and out["token_type_ids"].sum() == 0


def test_empty_batch():
    out = pad_to_tensors([], pad_id=0)
    assert out["input_ids"].shape == (0, 0)
