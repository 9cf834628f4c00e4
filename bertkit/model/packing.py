"""Index bookkeeping for the packed ("varlen") encoder forward: a padded (B, T) batch as its N real tokens.

Everything row-wise in a transformer (embeddings, every Linear, LayerNorm, GELU, residual adds) treats each
token alone, so it can run on the (N, C) rows of the real tokens and skip the padding; only attention mixes
tokens of one text, and it runs on the (B, T) grid again (Encoder: scatter, SDPA with the key mask, gather).
A token keeps the position id of its column in the padded grid, so left and right padding give the same
numbers as the padded forward. N = real tokens, B = batch, T = longest row.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch


class Packing(NamedTuple):
    batch: int                               # B
    width: int                               # T
    index: Optional[torch.Tensor]            # (N,) int64 flat positions b * T + t of the real tokens; None: no padding
    positions: torch.Tensor                  # (N,) int64 column t of each real token
    key_mask: Optional[torch.Tensor]         # (B, 1, 1, T) bool, True = a real key; None when nothing is padded

    @classmethod
    def from_mask(cls, attention_mask: Optional[torch.Tensor], shape: tuple[int, int],
                  device: torch.device) -> "Packing":
        """attention_mask (B, T) 1 for real tokens (None: every token is real) of a batch of `shape`."""
        B, T = shape
        columns = torch.arange(T, device=device)
        if attention_mask is None or bool(attention_mask.all()):
            return cls(B, T, None, columns.repeat(B), None)
        real = attention_mask.to(device=device, dtype=torch.bool)                 # (B, T)
        index = real.reshape(-1).nonzero().squeeze(1)                             # (N,)
        return cls(B, T, index, index % T, real[:, None, None, :])

    @property
    def tokens(self) -> int:
        """N, the number of real tokens."""
        return self.positions.shape[0]

    def pack(self, grid: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...): the real tokens' rows, in row-major order."""
        flat = grid.reshape(self.batch * self.width, *grid.shape[2:])
        return flat if self.index is None else flat.index_select(0, self.index)

    def unpack(self, rows: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...) with zeros at the padding (finite: a masked key's value still meets a 0
        weight in the attention product, and 0 * NaN would not be 0)."""
        if self.index is None:
            return rows.reshape(self.batch, self.width, *rows.shape[1:])
        grid = rows.new_zeros(self.batch * self.width, *rows.shape[1:])
        grid.index_copy_(0, self.index, rows)
        return grid.view(self.batch, self.width, *rows.shape[1:])
