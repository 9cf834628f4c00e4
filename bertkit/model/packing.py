"""Index bookkeeping for the packed ("varlen") encoder forward: a padded (B, T) batch as its N real tokens.

Everything row-wise in a transformer (embeddings, every Linear, LayerNorm, GELU, residual adds) treats each
token alone, so it runs on the (N, C) rows of the real tokens and skips the padding. Only attention mixes the
tokens of one text: for it the rows are gathered into a few padded grids, each holding texts of similar
length and a multiple of ATTENTION_WIDTH_STEP wide (`chunks`, one per step of width: choose_grids), so that a
batch of mixed lengths does not pay attention over its longest text for every row; SDPA runs per grid with its
key mask and the outputs are gathered back. A token keeps the position id of
its column in the padded input, so left and right padding give the same numbers as the padded forward.
With `bucket`, the N rows grow by a few copies of a real token to a bucketed count N' (`bucket_rows`): oneDNN
compiles a matmul kernel per row count, and the server's passes would otherwise bring a new one every time.
The extra rows are dropped before attention and at unpack, so they never touch a real token's numbers.
N = real tokens, N' = rows the row-wise layers run (N, or N rounded up to its bucket), B = batch, T = longest
row, R = rows of all attention grids together.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import numpy as np
import torch

# Attention grids are ATTENTION_WIDTH_STEP tokens wide, or a multiple of it: torch's CPU flash attention (the
# kernel SDPA takes here, bf16 and fp32) runs 2-3x faster at such key lengths than one token short of them (8
# texts x 12 heads, bf16, one AMX core: width 31 620 us, 32 224 us; 47 1,020 vs 48 469; 63 1,389 vs 64 589), so the
# masked columns up to the step cost less than nothing. benchmarks/attention_grids.py measures it.
ATTENTION_WIDTH_STEP = 16


def grid_width(length: int) -> int:
    """The key length of the attention grid a text of `length` tokens needs: the next multiple of the step."""
    return -(-max(length, 1) // ATTENTION_WIDTH_STEP) * ATTENTION_WIDTH_STEP


def choose_grids(lengths: list[int]) -> list[tuple[int, int]]:
    """Split ascending `lengths` into attention grids, as [start, stop) ranges of that order: one grid per
    grid_width. Measured per layer on one AMX core in bf16 (benchmarks/attention_grids.py): a grid costs ~12 us
    on its own (the SDPA call, its mask, the copies' dispatch) plus, per text, ~6.4 + 0.65 W + 0.007 W^2 us at
    width W. Moving a text one step wider costs it >= 16 us (16 -> 32), more than the grid it would save, so
    merging widths never pays and splitting one width only adds grids."""
    grids: list[tuple[int, int]] = []
    for i, length in enumerate(lengths):
        if grids and grid_width(lengths[grids[-1][0]]) == grid_width(length):
            grids[-1] = (grids[-1][0], i + 1)
        else:
            grids.append((i, i + 1))
    return grids


# Row buckets: a multiple of 16 up to 256 rows, then 16 steps per doubling (at most 1/16 of the rows are extra).
# oneDNN's bf16 kernels (model/onednn.py) are JIT-compiled per shape and cached (1,024 kernels): a new row
# count costs ~5 ms on one AMX core against ~0.5 ms to run a (350 x 384) @ (384 x 1536) product, and server
# passes (the real tokens of whatever texts are queued) nearly always have a new one. Measured: 800 real
# texts in random groups of 15, bf16, one thread: 2.0-2.35 -> ~1.8 ms of CPU per text.
ROW_BUCKET_MIN = 16
ROW_BUCKETS_PER_DOUBLING = 16


def bucket_rows(rows: int) -> int:
    """The row count `rows` rows are padded to with bucketing: the next multiple of its step."""
    step = max(ROW_BUCKET_MIN, (1 << (max(rows, 1).bit_length() - 1)) // ROW_BUCKETS_PER_DOUBLING)
    return -(-rows // step) * step


class Chunk(NamedTuple):
    """One attention grid: `rows` texts, each padded to `width` tokens, at rows start .. start + rows * width."""
    start: int
    rows: int
    width: int
    key_mask: Optional[torch.Tensor]     # (rows, 1, 1, width) bool, True = a real key; None when none is padded


@dataclass
class Packing:
    """One forward pass's bookkeeping."""
    batch: int                               # B
    width: int                               # T
    index: Optional[torch.Tensor]            # (N',) int64 flat positions b * T + t of the real tokens, then of
                                             # the first real token for the extra rows; None: all real, N' = N
    positions: torch.Tensor                  # (N',) int64 column t of each row
    chunks: list[Chunk]                      # the attention grids, shortest texts first
    attention_index: torch.Tensor            # (N',) int64 each row's row in the attention grids (extra rows: 0)
    grid_source: Optional[torch.Tensor]      # (R,) int64 the real row each grid row copies (padding: row 0);
                                             # None: the grids are the N rows themselves, in order
    tokens: int = -1                         # N, the real tokens (the first N rows); -1: all N' rows
    _biases: Optional[tuple[torch.dtype, list]] = field(default=None, repr=False)   # key_biases' cache

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = self.positions.shape[0]

    @classmethod
    def from_mask(cls, attention_mask: Optional[torch.Tensor], shape: tuple[int, int],
                  device: torch.device, bucket: bool = False) -> "Packing":
        """attention_mask (B, T) 1 for real tokens (None: every token is real) of a batch of `shape`.
        bucket: run bucket_rows(N) rows (see ROW_BUCKET_MIN)."""
        return cls._real(attention_mask, shape, device, bucket)

    @classmethod
    def _real(cls, attention_mask: Optional[torch.Tensor], shape: tuple[int, int], device: torch.device,
              bucket: bool = False) -> "Packing":
        """The bookkeeping, built in numpy on the host and handed to torch once per index (a server pass builds
        one for ~15 texts: a few dozen small torch ops cost more than the arithmetic)."""
        B, T = shape
        real = None if attention_mask is None else attention_mask.detach().to("cpu", torch.bool).numpy()  # (B, T)
        if real is not None and real.all():
            real = None
        lengths = real.sum(1) if real is not None else np.full(B, T)                 # (B,) real tokens per row
        tokens = int(lengths.sum())
        extra = bucket_rows(tokens) - tokens if bucket else 0
        order = np.argsort(lengths, kind="stable")
        ascending = lengths[order]
        chunks, row_start = [], np.zeros(B, dtype=np.int64)   # row_start[b]: where row b begins in the grids
        start = 0
        for first, stop in choose_grids(ascending.tolist()):
            rows, width = stop - first, grid_width(int(ascending[stop - 1]))
            row_start[order[first:stop]] = start + width * np.arange(rows)
            mask = np.arange(width) < ascending[first:stop, None]                         # (rows, width)
            key_mask = None if mask.all() else torch.from_numpy(mask)[:, None, None, :].to(device)
            chunks.append(Chunk(start, rows, width, key_mask))
            start += rows * width
        index = np.flatnonzero(real) if real is not None else np.arange(B * T)           # (N,) flat b * T + t
        positions = index % T
        if real is None and chunks == [Chunk(0, B, T, None)]:      # whole texts of a step's width: no copies
            attention_index, grid_source = np.arange(tokens), (np.arange(tokens) if extra else None)
        else:
            first_token = np.cumsum(lengths) - lengths                                   # (B,) packed index
            attention_index = np.arange(tokens) + np.repeat(row_start - first_token, lengths)
            grid_source = np.zeros(start, dtype=np.int64)
            grid_source[attention_index] = np.arange(tokens)
        if extra:                                                  # copies of the first real token
            index, positions, attention_index = (np.concatenate([a, np.repeat(a[:1], extra)])
                                                 for a in (index, positions, attention_index))
        elif real is None:
            index = None                                           # pack: the flat batch as it is
        return cls(B, T, _tensor(index, device), _tensor(positions, device), chunks,
                   _tensor(attention_index, device), _tensor(grid_source, device), tokens)

    def key_biases(self, dtype: torch.dtype) -> list[Optional[torch.Tensor]]:
        """Each grid's key mask in SDPA's additive form, (rows, 1, 1, width) of `dtype`: 0 for a real key, -inf
        for padding (None: none padded). SDPA turns a bool mask into exactly this (a `where` in the query's
        dtype) on every call; made once per pass here, every layer reuses it."""
        if self._biases is None or self._biases[0] != dtype:
            self._biases = (dtype, [None if c.key_mask is None else
                                    torch.zeros(c.key_mask.shape, dtype=dtype, device=c.key_mask.device)
                                    .masked_fill_(~c.key_mask, float("-inf")) for c in self.chunks])
        return self._biases[1]

    @property
    def grid_rows(self) -> int:
        """R, the rows of all attention grids."""
        last = self.chunks[-1]
        return last.start + last.rows * last.width

    def pack(self, grid: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N', ...): the real tokens' rows, in row-major order, then the extra rows."""
        flat = grid.reshape(self.batch * self.width, *grid.shape[2:])
        if self.index is None:
            return flat
        return _as_words(flat).index_select(0, self.index).view(flat.dtype)

    def texts(self) -> torch.Tensor:
        """(N,) int64 the batch row (text) of each real token's row."""
        if self.index is None:
            return torch.arange(self.batch, device=self.positions.device).repeat_interleave(self.width)
        return self.index[:self.tokens] // self.width

    def unpack(self, rows: torch.Tensor) -> torch.Tensor:
        """(N', ...) -> (B, T, ...) with zeros at the padding."""
        if self.index is None:
            return rows[:self.tokens].reshape(self.batch, self.width, *rows.shape[1:])
        grid = rows.new_zeros(self.batch * self.width, *rows.shape[1:])
        _as_words(grid).index_copy_(0, self.index[:self.tokens], _as_words(rows[:self.tokens]))
        return grid.view(self.batch, self.width, *rows.shape[1:])

    def to_attention(self, rows: torch.Tensor) -> torch.Tensor:
        """(N', K) -> (R, K), the attention grids of the real rows. A padding slot holds a copy of row 0: masked
        as a key it meets a 0 weight (exp(-inf)), and 0 times a finite value adds exactly nothing, so the real
        queries' outputs are those of zeros there; the padding queries' outputs are never read. One gather of
        whole rows, cheaper than scattering into a zeroed grid."""
        if self.grid_source is None:
            return rows
        return _as_words(rows).index_select(0, self.grid_source).view(rows.dtype)

    def from_attention(self, grid: torch.Tensor) -> torch.Tensor:
        """(R, K) -> (N', K): the real tokens' rows of the attention grids, in packed order (extra rows: a copy
        of the first)."""
        if self.grid_source is None:
            return grid
        return _as_words(grid).index_select(0, self.attention_index).view(grid.dtype)


def _tensor(array: Optional[np.ndarray], device: torch.device) -> Optional[torch.Tensor]:
    return None if array is None else torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64)).to(device)


def _as_words(rows: torch.Tensor) -> torch.Tensor:
    """(M, K) rows seen as 8-byte words (M, K * itemsize / 8) where the layout allows: the row copies of pack /
    unpack then move a quarter (bf16) or half (fp32) as many elements, bit for bit the same bytes."""
    if rows.dim() == 2 and rows.is_contiguous() and (rows.shape[1] * rows.element_size()) % 8 == 0:
        return rows.view(torch.int64)
    return rows
