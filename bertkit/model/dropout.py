"""Dropout that is cheap on CPU.

PyTorch's CPU dropout draws one random number per element (`bernoulli_`) and costs more than the matmuls it
sits between: on a 16 x 128 MiniLM training step, the attention-probability dropout took ~40 ms forward and
backward per layer (torch.profiler), about a quarter of the step over all dropouts. Here one 64-bit draw
feeds four elements: each keeps a uniform 16-bit slice of it and survives when the slice is at least the
threshold round(p * 65536). The keep probability is therefore p to within 1/65536 and survivors are scaled by
the exact inverse of that probability, so the layer is unbiased as nn.Dropout is. The 64-bit words come from
numpy's SFC64 generator, seeded from torch's CPU generator at every call (so torch.manual_seed still makes runs
repeat), because torch's own integer generator is twice as slow. The mask is kept as float32 and multiplied
in float32: ~10 ms forward + backward for the same tensor. Off the CPU (CUDA has a fast Philox dropout) and
in eval mode this is plain F.dropout.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_LEVELS = 1 << 16


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not 0.0 < p < 1.0:
        return F.dropout(x, p, training)
    return _PackedDropout.apply(x, p)


def drop_threshold(p: float) -> int:
    """An element is dropped when its 16-bit slice, read as int16, is below this."""
    return round(p * _LEVELS) - (_LEVELS >> 1)


def keep_scale(p: float) -> float:
    """1 / P(keep), rounded to float32 as the float32 mask holds it."""
    return float(torch.tensor(_LEVELS / (_LEVELS - round(p * _LEVELS)), dtype=torch.float32))


def keep_mask(shape: torch.Size, p: float) -> torch.Tensor:
    """-> float32 tensor of `shape`: 0 where dropped, 1 / P(keep) where kept."""
    n = math.prod(shape)
    seed = int(torch.randint(0, 1 << 62, ()))               # from torch's generator: manual_seed repeats runs
    words = torch.from_numpy(np.random.SFC64(seed).random_raw((n + 3) // 4))
    keep = words.view(torch.int16)[:n] >= drop_threshold(p)
    return keep.view(shape).to(torch.float32).mul_(keep_scale(p))


class _PackedDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        mask = keep_mask(x.shape, p)
        ctx.save_for_backward(mask)
        return (x * mask).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        mask, = ctx.saved_tensors
        return (grad * mask).to(grad.dtype), None


class Dropout(nn.Dropout):
    """nn.Dropout with the CPU fast path above; same constructor, no parameters, same state dict."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
