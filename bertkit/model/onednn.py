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
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
           activation: Optional[str] = None) -> torch.Tensor:
    """activation(x W^T + b): fused on CPU in bf16, else F.linear then the activation."""
    if x.device.type == "cpu" and x.dtype == torch.bfloat16 and weight.dtype == torch.bfloat16 and onednn_available():
        attr, algorithm = _POST_OPS[activation]
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], algorithm)
    y = F.linear(x, weight, bias)
    return ACTIVATIONS[activation](y) if activation else y


class FusedLinear(nn.Linear):
    """nn.Linear (same parameters, same state dict) whose forward is `linear` above, with an optional
    activation folded in."""

    activation: Optional[str] = None

    @classmethod
    def wrap(cls, module: nn.Linear, activation: Optional[str] = None) -> "FusedLinear":
        fused = cls.__new__(cls)
        nn.Module.__init__(fused)
        fused.in_features, fused.out_features = module.in_features, module.out_features
        fused.weight, fused.bias = module.weight, module.bias           # shared, not copied
        fused.activation = activation
        return fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.activation)

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", activation={self.activation}" if self.activation else "")
