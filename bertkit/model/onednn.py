"""bf16 Linear layers on CPU through oneDNN's fused kernel (torch.ops.mkldnn._linear_pointwise).

F.linear in bf16 on CPU is addmm: the bias is first copied into the output, then the matmul adds to it, and
an activation is one more pass over the (tokens, 4C) output. oneDNN's inner product takes the bias and the
activation (gelu erf/tanh, relu) as post-ops, so the FFN's up projection writes gelu(xW^T + b) in one pass.
With all-MiniLM-L6-v2 on a 2-core Sapphire Rapids (AMX) this is ~15% of bf16 encoding time. Elsewhere (CUDA,
fp32, a torch without mkldnn) the same modules run F.linear and the activation.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.model.encoder import ACTIVATIONS

# activation -> (oneDNN post-op, its algorithm)
_POST_OPS = {None: ("none", ""), "gelu": ("gelu", "none"), "gelu_tanh": ("gelu", "tanh"), "relu": ("relu", "")}


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise") and \
        hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def fusable(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `linear` takes oneDNN's fused kernel for these operands (CPU, bf16, mkldnn built in)."""
    return x.device.type == "cpu" and x.dtype == torch.bfloat16 and weight.dtype == torch.bfloat16 and \
        onednn_available()


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
           activation: Optional[str] = None) -> torch.Tensor:
    """activation(x W^T + b): fused on CPU in bf16, else F.linear then the activation. `weight` may be the
    prepacked copy of FusedLinear.packed_weight (same values, oneDNN's blocked layout)."""
    if fusable(x, weight):
        attr, algorithm = _POST_OPS[activation]
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], algorithm)
    y = F.linear(x, weight, bias)
    return ACTIVATIONS[activation](y) if activation else y


class FusedLinear(nn.Linear):
    """nn.Linear (same parameters, same state dict) whose forward is `linear` above, with an optional
    activation folded in."""

    activation: Optional[str] = None
    # (weight's storage, its version) -> the weight reordered once into oneDNN's blocked layout. Given a plain
    # weight the kernel reorders it on every call: with all-MiniLM-L6-v2 on one AMX core that is ~50 of the
    # ~90 microseconds of a (16 x 384) @ (384 x 1536) product, paid by every forward pass however few its
    # rows, the fixed cost that small server micro-batches pay most. The output is bit-identical.
    _packed: Optional[tuple[tuple[int, int], torch.Tensor]] = None

    @classmethod
    def wrap(cls, module: nn.Linear, activation: Optional[str] = None) -> "FusedLinear":
        fused = cls.__new__(cls)
        nn.Module.__init__(fused)
        fused.in_features, fused.out_features = module.in_features, module.out_features
        fused.weight, fused.bias = module.weight, module.bias           # shared, not copied
        fused.activation = activation
        return fused

    def packed_weight(self) -> torch.Tensor:
        """The weight in oneDNN's layout for inference, rebuilt when the weight changes (load, training step)."""
        key = (self.weight.data_ptr(), self.weight._version)
        if self._packed is None or self._packed[0] != key:
            self._packed = (key, torch.ops.mkldnn._reorder_linear_weight(self.weight.detach()))
        return self._packed[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if fusable(x, weight) and not (torch.is_grad_enabled() and weight.requires_grad):
            weight = self.packed_weight()          # inference: no gradient flows to the packed copy
        return linear(x, weight, self.bias, self.activation)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", activation={self.activation}" if self.activation else "")
