"""Index bookkeeping for the packed ("varlen") encoder forward: a padded (B, T) batch as its N real tokens.

Everything row-wise in a transformer (embeddings, every Linear, LayerNorm, GELU, residual adds) treats each
token alone, so it can run on the (N, C) rows of the real tokens and skip the padding; only attention mixes
tokens of one text, and it runs on the (B, T) grid again (Encoder: scatter, SDPA with the key mask, gather).
A token keeps the position id of its column in the padded grid, so left and right padding give the same
numbers as the padded forward. N = real tokens, B = batch, T = longest row.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch


@dataclass
class Packing:
    """One forward pass's bookkeeping; it also keeps the zeroed (B * T, ...) grid that every layer's attention
    scatters into (only real rows are ever written, so the padding stays zero without refilling it)."""
    batch: int                               # B
    width: int                               # T
    index: Optional[torch.Tensor]            # (N,) int64 flat positions b * T + t of the real tokens; None: no padding
    positions: torch.Tensor                  # (N,) int64 column t of each real token
    key_mask: Optional[torch.Tensor]         # (B, 1, 1, T) bool, True = a real key; None when nothing is padded
    _grids: dict = field(default_factory=dict, repr=False)

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
        if self.index is None:
            return flat
        return _as_words(flat).index_select(0, self.index).view(flat.dtype)

    def unpack(self, rows: torch.Tensor, reuse: bool = False) -> torch.Tensor:
        """(N, ...) -> (B, T, ...) with zeros at the padding (finite: a masked key's value still meets a 0
        weight in the attention product, and 0 * NaN would not be 0).
        reuse: write into this pass's grid of that shape and dtype, overwritten by the next such call: for a
        tensor that is consumed before then (attention's q, k, v), not for one that is returned."""
        if self.index is None:
            return rows.reshape(self.batch, self.width, *rows.shape[1:])
        reuse = reuse and not torch.is_grad_enabled()       # autograd keeps views of the grid for backward
        shape = (self.batch * self.width, *rows.shape[1:])
        key = (shape, rows.dtype, rows.device)
        grid = self._grids.get(key) if reuse else None
        if grid is None:
            grid = rows.new_zeros(shape)
            if reuse:
                self._grids[key] = grid
        _as_words(grid).index_copy_(0, self.index, _as_words(rows))
        return grid.view(self.batch, self.width, *rows.shape[1:])


def _as_words(rows: torch.Tensor) -> torch.Tensor:
    """(M, K) rows seen as 8-byte words (M, K * itemsize / 8) where the layout allows: the row copies of pack /
    unpack then move a quarter (bf16) or half (fp32) as many elements, bit for bit the same bytes."""
    if rows.dim() == 2 and rows.is_contiguous() and (rows.shape[1] * rows.element_size()) % 8 == 0:
        return rows.view(torch.int64)
    return rows
