"""int8 weights: Linear and Embedding modules that store int8 values with one fp32 scale per row.

Weights are quantized symmetrically per output channel (one scale per row of W, Krishnamoorthi 2018, sec. 3):
w_q = round(w / s), s = max|w_row| / 127. Two kernels run an Int8Linear:
- "int_mm": activations are quantized dynamically per token (one scale per row of x, as the weights per row
  of W), multiplied through torch._int_mm with int32 accumulation, and rescaled by x_scale * w_scale;
- "dequant": the weights are dequantized once to the activations' float dtype and multiplied there. Where
  bf16 matmuls are as fast as int8 ones (AMX, GPUs) this is faster: it skips quantizing every activation.
The state dict holds `weight` (int8), `weight_scale` (fp32) and `bias`, whatever the kernel.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.model.encoder import ACTIVATIONS
from bertkit.model.onednn import linear

KERNELS = ("int_mm", "dequant")


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) float -> (N, K) int8 and (N,) fp32 scales, symmetric per row; an all-zero row gets scale 1."""
    weight = weight.detach().float()
    peak = weight.abs().amax(dim=1)                                    # (N,)
    scale = torch.where(peak > 0, peak / 127.0, torch.ones_like(peak))
    values = torch.round(weight / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return values, scale


def dequantize_rows(values: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(N, K) int8 and (N,) scales -> (N, K) fp32: the inverse of quantize_rows (up to its rounding)."""
    return values.float() * scale[:, None]


class Int8Linear(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(out_features))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)
        self.kernel = "int_mm"
        self.activation: Optional[str] = None      # applied to the output (fused on CPU in bf16), see precision.py
        self._dense: Optional[tuple[torch.Tensor, Optional[torch.Tensor]]] = None   # "dequant" weights, cached

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int8Linear":
        module = cls(linear.in_features, linear.out_features, linear.bias is not None)
        module.weight, module.weight_scale = quantize_rows(linear.weight)
        if linear.bias is not None:
            module.bias = linear.bias.detach().float().clone()
        return module.to(linear.weight.device)

    def set_kernel(self, kernel: str) -> None:
        if kernel not in KERNELS:
            raise ValueError(f"int8 kernel {kernel!r} is not one of {', '.join(KERNELS)}")
        self.kernel, self._dense = kernel, None

    def dequantized(self) -> torch.Tensor:
        return dequantize_rows(self.weight, self.weight_scale)            # (N, K) fp32

    def forward(self, x: torch.Tensor) -> torch.Tensor:                   # (..., K) -> (..., N)
        if self.kernel == "dequant":
            if self._dense is None or self._dense[0].dtype != x.dtype or self._dense[0].device != x.device:
                bias = self.bias.to(x.dtype) if self.bias is not None else None
                self._dense = (self.dequantized().to(x.dtype), bias)
            return linear(x, *self._dense, self.activation)
        rows = x.reshape(-1, self.in_features)                            # (M, K), one row per token
        x_scale = rows.abs().amax(dim=1, keepdim=True).float().clamp_(min=1e-12) / 127.0   # (M, 1)
        x_int8 = torch.round(rows / x_scale).to(torch.int8)
        padded = rows.shape[0]
        if x.is_cuda and padded <= 16:                                    # cuBLAS int8 needs more than 16 rows
            x_int8 = F.pad(x_int8, (0, 0, 0, 17 - padded))
        acc = torch._int_mm(x_int8, self.weight.t())[:padded]            # (M, N) int32
        y = acc * (x_scale * self.weight_scale)                           # (M, N) fp32
        if self.bias is not None:
            y = y + self.bias
        if self.activation:
            y = ACTIVATIONS[self.activation](y)
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, kernel={self.kernel}"
                + (f", activation={self.activation}" if self.activation else ""))


class Int8Embedding(nn.Module):
    """An embedding table stored as int8 rows with one fp32 scale per row; looked-up rows are dequantized to
    `dtype` (the model's float dtype)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.register_buffer("weight", torch.zeros(num_embeddings, embedding_dim, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(num_embeddings))
        self.dtype = torch.float32

    @classmethod
    def from_embedding(cls, embedding: nn.Embedding) -> "Int8Embedding":
        module = cls(embedding.num_embeddings, embedding.embedding_dim, embedding.padding_idx)
        module.weight, module.weight_scale = quantize_rows(embedding.weight)
        return module.to(embedding.weight.device)

    def dequantized(self) -> torch.Tensor:
        return dequantize_rows(self.weight, self.weight_scale)            # (V, E) fp32

    def forward(self, ids: torch.Tensor) -> torch.Tensor:                 # (B, T) -> (B, T, E)
        rows = F.embedding(ids, self.weight)                              # (B, T, E) int8
        return (rows.to(torch.float32) * self.weight_scale[ids].unsqueeze(-1)).to(self.dtype)


INT8_MODULES = (Int8Linear, Int8Embedding)
