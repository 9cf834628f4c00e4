"""Dynamic padding: ragged id lists -> (B, T) LongTensors padded to the longest row of the batch."""
from __future__ import annotations

from itertools import chain
from typing import Literal, Sequence

import numpy as np
import torch


def pad_to_tensors(input_ids: Sequence[Sequence[int]], pad_id: int,
                   token_type_ids: Sequence[Sequence[int]] | None = None,
                   pad_to_multiple_of: int | None = None,
                   side: Literal["right", "left"] = "right") -> dict[str, torch.Tensor]:
    """{"input_ids", "attention_mask", "token_type_ids"}, each (B, T) int64, T = longest row (rounded up
    to pad_to_multiple_of, which keeps GPU kernels on aligned shapes). Missing token_type_ids are zeros.
    side="left" puts the padding before each row (XLNet's convention, whose <cls> is the last token).

    All rows are flattened into one array and scattered through the attention mask: one copy instead of
    one per row. numpy builds it (np.fromiter is ~5x faster than torch.tensor on a Python list).
    """
    lengths = np.fromiter(map(len, input_ids), dtype=np.int64, count=len(input_ids))  # (B,)
    width = int(lengths.max()) if len(lengths) else 0
    if pad_to_multiple_of:
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    attention_mask = (np.arange(width) >= (width - lengths)[:, None] if side == "left"
                      else np.arange(width) < lengths[:, None])  # (B, T) bool
    total = int(lengths.sum())
    ids = np.full((len(lengths), width), pad_id, dtype=np.int64)
    ids[attention_mask] = np.fromiter(chain.from_iterable(input_ids), dtype=np.int64, count=total)
    type_ids = np.zeros_like(ids)
    if token_type_ids is not None:
        if not np.array_equal(np.fromiter(map(len, token_type_ids), dtype=np.int64, count=len(token_type_ids)),
                              lengths):
            raise ValueError("token_type_ids rows must have the same lengths as input_ids rows")
        type_ids[attention_mask] = np.fromiter(chain.from_iterable(token_type_ids), dtype=np.int64, count=total)
    return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(attention_mask.astype(np.int64)),
            "token_type_ids": torch.from_numpy(type_ids)}
