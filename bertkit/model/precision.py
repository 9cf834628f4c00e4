"""Putting a loaded encoder (and its heads) into an inference precision: fp32, bf16 or int8.

bf16 stores every weight in bf16 and computes in it: no autocast, so no casts of weights on each call.
Layer norm statistics and the attention softmax still accumulate in fp32 inside their kernels, and pooling
upcasts to fp32 (see pooling.pool). int8 swaps Linear layers (and the token embedding table) for the int8
modules of bertkit.model.int8; everything else runs in the choice's float dtype.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import torch
from torch import nn

from bertkit.model.encoder import Encoder, FeedForward
from bertkit.model.int8 import INT8_MODULES, Int8Embedding, Int8Linear
from bertkit.model.onednn import FusedLinear
from bertkit.runtime import PrecisionChoice

TOKEN_EMBEDDING = "embeddings.token"


def quantizable_linears(encoder: nn.Module) -> list[str]:
    """Names of the encoder's Linear layers that int8 can replace, in the order they run."""
    return [name for name, module in encoder.named_modules() if isinstance(module, nn.Linear)]


def has_int8(module: nn.Module) -> bool:
    return any(isinstance(m, INT8_MODULES) for m in module.modules())


def inference_only(module: nn.Module) -> str | None:
    """Why the module cannot be trained (int8 weights, or oneDNN inference kernels), or None."""
    if has_int8(module):
        return "it holds int8 weights (a folder written by bertkit quantize); train the fp32 folder it came from"
    if any(isinstance(m, FusedLinear) for m in module.modules()):
        return "it was loaded for inference in bf16 (oneDNN kernels without gradients); load it in fp32 to train"
    return None


def quantize_encoder(encoder: nn.Module, keep: Iterable[str] = (), embeddings: bool = True) -> None:
    """In place: every Linear not named in `keep` becomes an Int8Linear, and with `embeddings` the token
    embedding table an Int8Embedding. Modules shared between layers (ALBERT) stay shared."""
    keep = set(keep)
    targets = {name: module for name, module in encoder.named_modules()
               if (isinstance(module, nn.Linear) and name not in keep)
               or (embeddings and name == TOKEN_EMBEDDING and isinstance(module, nn.Embedding))}
    _replace(encoder, {name: (Int8Linear.from_linear(m) if isinstance(m, nn.Linear) else Int8Embedding.from_embedding(m))
                       for name, m in targets.items()})


def shape_int8(encoder: nn.Module, names: Iterable[str]) -> None:
    """In place, before loading an int8 folder's weights: the named modules become empty int8 modules of
    the same shape."""
    modules = dict(encoder.named_modules())
    replacements = {}
    for name in names:
        module = modules.get(name)
        if isinstance(module, nn.Linear):
            replacements[name] = Int8Linear(module.in_features, module.out_features, module.bias is not None)
        elif isinstance(module, nn.Embedding):
            replacements[name] = Int8Embedding(module.num_embeddings, module.embedding_dim, module.padding_idx)
        elif not isinstance(module, INT8_MODULES):
            raise KeyError(name)
    _replace(encoder, replacements)


def _replace(root: nn.Module, replacements: Mapping[str, nn.Module]) -> None:
    """Swap modules by name; every other place the same module object appears gets the same new one."""
    modules = dict(root.named_modules())
    by_identity = {id(modules[name]): new for name, new in replacements.items()}
    for parent in list(root.modules()):
        for attribute, child in list(parent.named_children()):
            if id(child) in by_identity:
                setattr(parent, attribute, by_identity[id(child)])


def apply_precision(encoder: nn.Module, heads: Mapping[str, nn.Module], choice: PrecisionChoice) -> None:
    """In place: float weights to choice.dtype; int8 modules compute through `_int_mm` when the float dtype is
    fp32 and through dequantized weights when it is bf16 (AMX / GPU: bf16 matmuls are the faster ones there),
    and through dequantized weights whenever the choice is not int8 (an int8 folder run in bf16 or fp32)."""
    kernel = "int_mm" if choice.precision == "int8" and choice.dtype == torch.float32 else "dequant"
    for module in [encoder, *heads.values()]:
        cast_floats(module, choice.dtype)
        for m in module.modules():
            if isinstance(m, Int8Linear):
                m.set_kernel(kernel)
            elif isinstance(m, Int8Embedding):
                m.dtype = choice.dtype
    device = next(encoder.parameters()).device
    on_onednn = choice.dtype == torch.bfloat16 and device.type == "cpu"
    if on_onednn:
        fuse_linears(encoder)
    if isinstance(encoder, Encoder):
        encoder.bucket_packed_rows = on_onednn      # int8 in bf16 runs its matmuls through oneDNN too


def fuse_linears(encoder: nn.Module) -> None:
    """In place, for bf16 on CPU: Linear layers run oneDNN's fused kernel (bias inside the matmul), and each
    feed-forward's activation moves into its up projection (bertkit.model.onednn)."""
    _replace(encoder, {name: FusedLinear.wrap(m) for name, m in encoder.named_modules() if type(m) is nn.Linear})
    for ffn in encoder.modules():
        if isinstance(ffn, FeedForward) and ffn.act is not _identity:
            ffn.up.activation = encoder.config.activation
            ffn.act = _identity


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


def cast_floats(module: nn.Module, dtype: torch.dtype) -> None:
    """Like module.to(dtype), but leaves int8 modules' scales and biases in fp32."""
    for m in module.modules():
        if isinstance(m, INT8_MODULES):
            continue
        for parameter in m.parameters(recurse=False):
            if parameter.is_floating_point() and parameter.dtype != dtype:
                parameter.data = parameter.data.to(dtype)
        for name, buffer in m.named_buffers(recurse=False):
            if buffer is not None and buffer.is_floating_point() and buffer.dtype != dtype:
                setattr(m, name, buffer.to(dtype))


def float_dtype(module: nn.Module) -> torch.dtype:
    """The dtype the module's float weights are in (fp32 for a module with none)."""
    for parameter in module.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.float32


def dequantize_encoder(encoder: nn.Module, dtype: torch.dtype = torch.float32) -> None:
    """In place: int8 modules back to nn.Linear / nn.Embedding holding the dequantized weights."""
    replacements: dict[str, nn.Module] = {}
    for name, module in encoder.named_modules():
        if isinstance(module, Int8Linear):
            linear = nn.Linear(module.in_features, module.out_features, module.bias is not None,
                               device=module.weight.device, dtype=dtype)
            linear.weight.data = module.dequantized().to(dtype)
            if module.bias is not None:
                linear.bias.data = module.bias.to(dtype)
            replacements[name] = linear
        elif isinstance(module, Int8Embedding):
            embedding = nn.Embedding(module.num_embeddings, module.embedding_dim, module.padding_idx,
                                     device=module.weight.device, dtype=dtype)
            embedding.weight.data = module.dequantized().to(dtype)
            replacements[name] = embedding
    _replace(encoder, replacements)
