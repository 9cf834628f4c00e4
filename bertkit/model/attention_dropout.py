"""softmax(QK^T / sqrt(D) + mask) -> dropout -> @V for CPU training, in cache-sized chunks.

torch's CPU flash kernel has no dropout, so training with attention dropout (every BERT config has 0.1) used
to run the explicit path: (B, H, T, T) scores, probabilities, an fp32 dropout mask, the fp32 dropped
probabilities and their bf16 copy, all kept by autograd. At 16 x 512 (MiniLM, bf16 autocast) two thirds of a
training step was memory traffic over those tensors (torch.profiler: casts, multiplies, dropout), and they
were most of the 4.8 GiB peak.

Here the work goes over chunks of whole (T, T) score maps (a few batch rows, or a few heads of one row) of
~2**20 scores (the fastest size measured). Forward keeps only each chunk's output; backward recomputes the
chunk's scores, probabilities and dropout mask (flash attention's recomputation, Dao et al. 2022), so autograd
holds q, k, v and a seed, not O(T^2) tensors. It computes what the explicit path computes, in the same dtypes: under bf16
autocast the scores, both matmuls and the softmax's output in bf16 (CPU autocast leaves softmax in bf16; the
kernel computes in fp32), the dropout's multiply in fp32, rounded back; masked keys filled with the dtype's
minimum (a row with every key masked gets uniform weights, not NaN). The dropout mask is model/dropout.py's:
the chunks draw the 16-bit slices of one SFC64 stream in memory order from the same one seed, so at the same
torch seed the mask is bit for bit the one `dropout(weights, p)` would have drawn.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from torch.autograd.function import once_differentiable

from bertkit.model.dropout import drop_threshold, keep_scale

# Scores per chunk, chosen by measurement: of 2**16 to 2**24 (MiniLM, bf16 autocast, one thread), 2**20 (4 MiB of
# fp32 probabilities: four 512 x 512 maps, 455 maps of 48 x 48) was fastest at length 512 and within noise of
# the best at 128 and 48. Smaller chunks pay per-op overhead; larger ones fall out of cache. Never below one map.
CHUNK_ELEMENTS = 1 << 20
# Keys from which the chunks pay (below, SelfAttention takes the explicit path): one MiniLM training step, bf16
# autocast, explicit / chunked at 2 threads (benchmarks/train_attention.py, quiet): length 48 0.97x, 128 0.93x
# (numpy's multiply and compare run on one thread), 192 1.03x, 256 1.06x, 512 1.56x; at one thread 128 1.02x,
# 256 1.18x, 512 1.74x. Both paths compute the same numbers, so the switch changes only time and memory.
CHUNKED_MIN_KEYS = 192


def attention_with_dropout(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
                           causal: bool, p: float) -> torch.Tensor:
    """q (B, H, T, D), k and v (B, H, Tk, D); mask: bool (True = may attend) or additive, broadcastable to
    (B, H, T, Tk), taken as a constant (no gradient); 0 < p < 1. -> (B, H, T, D), the attention output."""
    if torch.is_autocast_enabled("cpu"):                        # the explicit path's matmuls ran in this dtype
        dtype = torch.get_autocast_dtype("cpu")
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if causal and mask is None:
        T, Tk = q.shape[-2], k.shape[-2]
        mask = torch.ones(T, Tk, dtype=torch.bool, device=q.device).tril(Tk - T)
    if mask is not None:
        mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))          # (B|1, H|1, T|1, Tk)
    seed = int(torch.randint(0, 1 << 62, ()))                   # as model/dropout.py: manual_seed repeats runs
    with torch.autocast("cpu", enabled=False):
        return _ChunkedAttention.apply(q, k, v, mask, p, seed)


class _DropStream:
    """The kept-element masks of consecutive chunks, from one SFC64 stream read in order (see dropout.py)."""

    def __init__(self, seed: int, p: float):
        self.words = np.random.SFC64(seed)
        self.threshold = drop_threshold(p)
        self.left = torch.empty(0, dtype=torch.int16)           # slices drawn but not yet used

    def next(self, shape: torch.Size) -> torch.Tensor:
        n = math.prod(shape)
        slices = torch.from_numpy(self.words.random_raw((n - len(self.left) + 3) // 4)).view(torch.int16)
        if len(self.left):
            slices = torch.cat([self.left, slices])
        self.left = slices[n:]
        return torch.from_numpy(np.greater_equal(slices[:n].numpy(), self.threshold)).view(shape)


def _chunks(B: int, H: int, T: int, Tk: int):
    """(batch slice, head slice) pairs in memory order, each about CHUNK_ELEMENTS scores."""
    maps = max(1, CHUNK_ELEMENTS // (T * Tk))
    if maps >= H:
        rows = maps // H
        return [(slice(b, min(b + rows, B)), slice(0, H)) for b in range(0, B, rows)]
    return [(slice(b, b + 1), slice(h, min(h + maps, H))) for b in range(B) for h in range(0, H, maps)]


def _part(mask: torch.Tensor, rows: slice, heads: slice) -> torch.Tensor:
    """The chunk's part of a mask that may broadcast over batch or heads."""
    return mask[rows if mask.shape[0] > 1 else slice(None), heads if mask.shape[1] > 1 else slice(None)]


def _bias(mask: Optional[torch.Tensor], dtype: torch.dtype) -> Optional[torch.Tensor]:
    """A bool mask -> the additive bias (0 or dtype's minimum) that gives the explicit path's masked_fill:
    score + min rounds to min exactly while |score| < half an ulp of min. The add took half masked_fill_'s time."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype).masked_fill_(~mask, torch.finfo(dtype).min)


def _probabilities(qs, k, bias):
    """qs (b, h, T, D) already scaled -> softmax probabilities (b, h, T, Tk), as the explicit path computes them:
    in the scores' dtype (bf16 under autocast: torch's CPU autocast leaves softmax in bf16, computed in fp32 inside
    the kernel), or in fp32 where an additive fp32 mask promotes them."""
    scores = qs @ k.transpose(-2, -1)                           # (b, h, T, Tk) in the matmul dtype
    return (scores if bias is None else scores + bias).softmax(dim=-1)


def _dropped(x: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
    """model/dropout.py's (x * mask).to(x.dtype): x * scale where kept, 0 elsewhere, multiplied in fp32 (x's own
    dtype if wider), rounded back to x's dtype."""
    work = x.to(torch.promote_types(x.dtype, torch.float32), copy=True).mul_(scale)
    return _drop(work, keep).to(x.dtype)


def _drop(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """x *= keep, in place, x contiguous. numpy's float-by-bool multiply is vectorized; torch's masked_fill_ and
    its bool casts were ~10x slower per element (~400 us per 512 x 512 map on one core)."""
    np.multiply(x.numpy(), keep.numpy(), out=x.numpy())
    return x


class _ChunkedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, p: float, seed: int):
        B, H, T, _ = q.shape
        scale, kept = 1.0 / math.sqrt(q.shape[-1]), keep_scale(p)
        qs = (q * scale).contiguous()                           # (B, H, T, D): the explicit path's rounding
        k, v = k.contiguous(), v.contiguous()                   # strided views of the QKV projection otherwise
        y = q.new_empty(q.shape)                               # contiguous (B, H, T, D)
        bias = _bias(mask, q.dtype)
        drops = _DropStream(seed, p)
        for rows, heads in _chunks(B, H, T, k.shape[-2]):
            m = _part(bias, rows, heads) if bias is not None else None
            probs = _probabilities(qs[rows, heads], k[rows, heads], m)                   # (b, h, T, Tk)
            probs = _dropped(probs, drops.next(probs.shape), kept).to(v.dtype)
            torch.matmul(probs, v[rows, heads], out=y[rows, heads])
        # a row with every key masked: uniform weights, but no gradient to its scores (masked_fill's backward)
        empty = None if mask is None or mask.dtype != torch.bool or mask.any(-1).all() else mask.any(-1, True)
        ctx.save_for_backward(qs, k, v, bias, empty)
        ctx.p, ctx.seed = p, seed
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        qs, k, v, bias, empty = ctx.saved_tensors
        B, H, T, _ = qs.shape
        scale, kept = 1.0 / math.sqrt(qs.shape[-1]), keep_scale(ctx.p)
        dy = dy.to(v.dtype)
        dq, dk, dv = qs.new_empty(qs.shape), k.new_empty(k.shape), v.new_empty(v.shape)
        drops = _DropStream(ctx.seed, ctx.p)
        for rows, heads in _chunks(B, H, T, k.shape[-2]):
            m = _part(bias, rows, heads) if bias is not None else None
            qc, kc, vc, dyc = qs[rows, heads], k[rows, heads], v[rows, heads], dy[rows, heads]
            probs = _probabilities(qc, kc, m)                                             # (b, h, T, Tk)
            keep = drops.next(probs.shape)
            used = _dropped(probs, keep, kept).to(v.dtype)                                  # what met V
            torch.matmul(used.transpose(-2, -1), dyc, out=dv[rows, heads])                # (b, h, Tk, D)
            d_used = (dyc @ vc.transpose(-2, -1)).to(probs.dtype)                         # (b, h, T, Tk)
            d_probs = _dropped(d_used, keep, kept)                                        # dropout's backward
            d_scores = torch._softmax_backward_data(d_probs, probs, -1, probs.dtype).to(qs.dtype)
            if empty is not None:                               # elsewhere a masked key's probability is 0
                d_scores.mul_(_part(empty, rows, heads))
            torch.matmul(d_scores.transpose(-2, -1), qc, out=dk[rows, heads])             # (b, h, Tk, D)
            torch.matmul(d_scores, kc, out=dq[rows, heads])                               # (b, h, T, D)
        return dq.mul_(scale), dk, dv, None, None, None
