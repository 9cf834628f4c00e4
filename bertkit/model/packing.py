"""Index bookkeeping for the packed ("varlen") encoder forward: a padded (B, T) batch as its N real tokens.

Everything row-wise in a transformer (embeddings, every Linear, LayerNorm, GELU, residual adds) treats each
token alone, so it runs on the (N, C) rows of the real tokens and skips the padding. Only attention mixes the
tokens of one text: for it the rows are scattered into a few padded grids, each holding texts of similar
length (`chunks`), so that a batch of mixed lengths does not pay attention over its longest text for every
row; SDPA runs per grid with its key mask and the outputs are gathered back. A token keeps the position id of
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

import torch

# A text joins the attention grid of shorter texts while its length is at most this multiple of the grid's
# shortest text: at most 1 - 1/1.5 of a grid's keys are padding, and lengths 8..512 need at most ~10 grids.
CHUNK_GROWTH = 1.5
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
    """One forward pass's bookkeeping; it also keeps the zeroed (R, ...) attention grid that every layer scatters
    into (only real tokens' rows are ever written, so the padding stays zero without refilling it)."""
    batch: int                               # B
    width: int                               # T
    index: Optional[torch.Tensor]            # (N',) int64 flat positions b * T + t of the real tokens, then of
                                             # the first real token for the extra rows; None: all real, N' = N
    positions: torch.Tensor                  # (N',) int64 column t of each row
    chunks: list[Chunk]                      # the attention grids, shortest texts first
    attention_index: torch.Tensor            # (N',) int64 each row's row in the attention grids (extra rows: 0)
    tokens: int = -1                         # N, the real tokens (the first N rows); -1: all N' rows
    _grids: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = self.positions.shape[0]

    @classmethod
    def from_mask(cls, attention_mask: Optional[torch.Tensor], shape: tuple[int, int],
                  device: torch.device, bucket: bool = False) -> "Packing":
        """attention_mask (B, T) 1 for real tokens (None: every token is real) of a batch of `shape`.
        bucket: run bucket_rows(N) rows (see ROW_BUCKET_MIN)."""
        packing = cls._real(attention_mask, shape, device)
        extra = bucket_rows(packing.tokens) - packing.tokens if bucket else 0
        if extra:
            index = packing.index if packing.index is not None else torch.arange(packing.tokens, device=device)
            first = index[:1].expand(extra)                          # copies of the first real token
            packing.index = torch.cat([index, first])
            packing.positions = torch.cat([packing.positions, packing.positions[:1].expand(extra)])
            packing.attention_index = torch.cat([packing.attention_index, packing.attention_index[:1].expand(extra)])
        return packing

    @classmethod
    def _real(cls, attention_mask: Optional[torch.Tensor], shape: tuple[int, int], device: torch.device) -> "Packing":
        """The bookkeeping of the N real tokens alone."""
        B, T = shape
        if attention_mask is None or bool(attention_mask.all()):
            columns = torch.arange(T, device=device)
            return cls(B, T, None, columns.repeat(B), [Chunk(0, B, T, None)], torch.arange(B * T, device=device))
        real = attention_mask.to(device=device, dtype=torch.bool)                 # (B, T)
        index = real.reshape(-1).nonzero().squeeze(1)                             # (N,)
        lengths = real.sum(1).tolist()                                            # (B,) real tokens per row
        chunks, row_start = [], [0] * B       # row_start[b]: where row b's tokens begin in the attention grids
        start = 0
        order = sorted(range(B), key=lambda b: lengths[b])
        i = 0
        while i < B:
            j = i
            while j + 1 < B and lengths[order[j + 1]] <= CHUNK_GROWTH * max(lengths[order[i]], 1):
                j += 1
            rows, width = j - i + 1, lengths[order[j]]
            for local, b in enumerate(order[i:j + 1]):
                row_start[b] = start + local * width
            grid_lengths = torch.tensor([lengths[b] for b in order[i:j + 1]], device=device)
            mask = torch.arange(width, device=device) < grid_lengths[:, None]                  # (rows, width)
            chunks.append(Chunk(start, rows, width, None if bool(mask.all()) else mask[:, None, None, :]))
            start += rows * width
            i = j + 1
        counts = torch.tensor(lengths, device=device)
        first_token = torch.cumsum(counts, 0) - counts                           # (B,) packed index of row b's first
        offset = torch.tensor(row_start, device=device) - first_token
        attention_index = torch.arange(len(index), device=device) + torch.repeat_interleave(offset, counts)
        return cls(B, T, index, index % T, chunks, attention_index)

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

    def unpack(self, rows: torch.Tensor) -> torch.Tensor:
        """(N', ...) -> (B, T, ...) with zeros at the padding."""
        if self.index is None:
            return rows.reshape(self.batch, self.width, *rows.shape[1:])
        grid = rows.new_zeros(self.batch * self.width, *rows.shape[1:])
        _as_words(grid).index_copy_(0, self.index[:self.tokens], _as_words(rows[:self.tokens]))
        return grid.view(self.batch, self.width, *rows.shape[1:])

    def to_attention(self, rows: torch.Tensor) -> torch.Tensor:
        """(N', K) -> (R, K), the attention grids of the real rows, zeros at the padding (finite: a masked key's value still meets
        a 0 weight in the attention product, and 0 * NaN would not be 0). Without autograd the grid is this
        pass's one buffer of that shape, overwritten by the next call: consume it before then."""
        if self.index is None:
            return rows
        shape, reuse = (self.grid_rows, rows.shape[1]), not torch.is_grad_enabled()   # autograd keeps views
        key = (shape, rows.dtype, rows.device)
        grid = self._grids.get(key) if reuse else None
        if grid is None:
            grid = rows.new_zeros(shape)
            if reuse:
                self._grids[key] = grid
        _as_words(grid).index_copy_(0, self.attention_index[:self.tokens], _as_words(rows[:self.tokens]))
        return grid

    def from_attention(self, grid: torch.Tensor) -> torch.Tensor:
        """(R, K) -> (N', K): the real tokens' rows of the attention grids, in packed order (extra rows: a copy
        of the first)."""
        if self.index is None:
            return grid
        return _as_words(grid).index_select(0, self.attention_index).view(grid.dtype)


def _as_words(rows: torch.Tensor) -> torch.Tensor:
    """(M, K) rows seen as 8-byte words (M, K * itemsize / 8) where the layout allows: the row copies of pack /
    unpack then move a quarter (bf16) or half (fp32) as many elements, bit for bit the same bytes."""
    if rows.dim() == 2 and rows.is_contiguous() and (rows.shape[1] * rows.element_size()) % 8 == 0:
        return rows.view(torch.int64)
    return rows
