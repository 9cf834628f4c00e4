"""Attention-head pruning (Michel, Levy & Neubig 2019, "Are Sixteen Heads Really Better than One?").

Importance of head h in layer l: I_lh = E_x |dL/dm_lh|, the gradient of the task loss with respect to a
gate m_lh = 1 that multiplies the head's output, summed over a dev set; scores are L2-normalized within each
layer (as in the paper) so layers compare. Pruning removes the least important heads physically: their rows
of the Q, K and V projections and their columns of the output projection, so the model is smaller and
faster, and computes exactly what the unpruned model computes with those heads' gates at 0.

Saved folders record {"pruned_heads": {layer: [original head indices]}} in config.json (HF's key), and the
loaders here rebuild the smaller shapes before reading the weights.
"""
from __future__ import annotations

import copy
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import torch
from torch import nn

from bertkit.model.encoder import Encoder, SelfAttention


def heads_of(attention: SelfAttention, num_heads: int) -> list[int]:
    return list(attention.kept_heads)


@contextmanager
def head_gates(encoder: Encoder, gates: torch.Tensor) -> Iterator[None]:
    """Multiply each head's output by gates[layer, head] (L, H) while inside the block: a hook on the
    output projection's input, which is the heads' outputs side by side (B, T, H * D)."""
    handles = []
    for layer, block in enumerate(encoder.blocks):
        attention = block.attention

        def scale(module, inputs, layer=layer, attention=attention):
            (y,) = inputs
            heads = attention.num_heads
            gate = gates[layer, :heads].to(y.dtype)
            return (y.view(*y.shape[:-1], heads, -1) * gate[:, None]).view(y.shape),
        handles.append(attention.out.register_forward_pre_hook(scale))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def head_importance(model: nn.Module, encoder: Encoder, batches: Iterable,
                    loss_of: Callable[[nn.Module, object], torch.Tensor], normalize_layers: bool = True) -> torch.Tensor:
    """(L, H) importance: sum over batches of |dL/d gate|. `loss_of(model, batch)` is the task loss."""
    if len({id(b) for b in encoder.blocks}) != len(encoder.blocks):
        raise ValueError("head pruning needs unshared layers (ALBERT-style sharing prunes every layer at once)")
    heads = max(block.attention.num_heads for block in encoder.blocks)
    gates = torch.ones(len(encoder.blocks), heads, requires_grad=True)
    importance = torch.zeros(len(encoder.blocks), heads)
    was_training = model.training
    model.eval()                             # no dropout: the gradient of the model that will be served
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)              # only the gates need gradients
    try:
        with head_gates(encoder, gates):
            for batch in batches:
                loss = loss_of(model, batch)
                (grad,) = torch.autograd.grad(loss, gates)
                importance += grad.abs().detach()
    finally:
        for p in params:
            p.requires_grad_(True)
        model.train(was_training)
    if normalize_layers:
        importance = importance / importance.norm(dim=1, keepdim=True).clamp(min=1e-20)
    return importance


def heads_to_prune(importance: torch.Tensor, fraction: Optional[float] = None, per_layer: Optional[int] = None,
                   available: Optional[list[int]] = None) -> dict[int, list[int]]:
    """Positions (within each layer's current heads) of the least important heads: a global `fraction` of all
    heads (Michel et al.'s ranking) or `per_layer` heads in every layer; every layer keeps at least one."""
    L, H = importance.shape
    available = available or [H] * L
    if (fraction is None) == (per_layer is None):
        raise ValueError("give either fraction or per_layer")
    chosen: dict[int, list[int]] = {layer: [] for layer in range(L)}
    if per_layer is not None:
        for layer in range(L):
            order = importance[layer, :available[layer]].argsort().tolist()
            chosen[layer] = sorted(order[:min(per_layer, available[layer] - 1)])
    else:
        candidates = sorted((float(importance[l, h]), l, h) for l in range(L) for h in range(available[l]))
        budget = int(round(fraction * sum(available)))
        for _, layer, head in candidates:
            if budget == 0:
                break
            if len(chosen[layer]) < available[layer] - 1:
                chosen[layer].append(head)
                budget -= 1
        chosen = {l: sorted(hs) for l, hs in chosen.items()}
    return {l: hs for l, hs in chosen.items() if hs}


@torch.no_grad()
def prune_heads(encoder: Encoder, remove: dict[int, list[int]]) -> Encoder:
    """Remove heads in place; `remove` maps layer -> positions among that layer's current heads."""
    config = encoder.config
    D = config.head_dim
    for layer, positions in remove.items():
        block = encoder.blocks[layer]
        old = block.attention
        current = heads_of(old, old.num_heads)
        keep = [i for i in range(len(current)) if i not in set(positions)]
        if not keep:
            raise ValueError(f"layer {layer}: cannot remove all {len(current)} heads")
        new = SelfAttention(config, [current[i] for i in keep])
        width = len(current) * D
        cols = torch.cat([torch.arange(i * D, (i + 1) * D) for i in keep])          # within one of q, k, v
        rows = torch.cat([part * width + cols for part in range(3)])               # q rows, k rows, v rows
        new.qkv.weight.copy_(old.qkv.weight[rows])
        new.qkv.bias.copy_(old.qkv.bias[rows])
        new.out.weight.copy_(old.out.weight[:, cols])
        new.out.bias.copy_(old.out.bias)
        block.attention = new.to(old.qkv.weight.device, old.qkv.weight.dtype).train(old.training)
    return encoder


@torch.no_grad()
def full_shape_copy(encoder: Encoder) -> Encoder:
    """A copy of a pruned encoder with every layer at full width and the removed heads' weights zero: their
    query/key/value rows and output-projection columns. A zero head's output is softmax(0) V = 0 with V = 0, so
    the copy computes what the pruned encoder does (up to summation order), with no speed-up, in the shapes
    every BERT implementation has: what `from_pretrained` loads now that transformers ignores pruned_heads."""
    config = encoder.config
    full = copy.deepcopy(encoder)
    D = config.head_dim
    for layer, block in enumerate(full.blocks):
        old = block.attention
        if old.num_heads == config.num_heads:
            continue
        new = SelfAttention(config).to(old.qkv.weight.device, old.qkv.weight.dtype)
        new.qkv.weight.zero_()
        new.qkv.bias.zero_()
        new.out.weight.zero_()
        cols = torch.cat([torch.arange(h * D, (h + 1) * D) for h in old.kept_heads])   # within one of q, k, v
        rows = torch.cat([part * config.hidden_size + cols for part in range(3)])
        new.qkv.weight[rows] = old.qkv.weight
        new.qkv.bias[rows] = old.qkv.bias
        new.out.weight[:, cols] = old.out.weight
        new.out.bias.copy_(old.out.bias)
        block.attention = new.train(old.training)
    return full


def pruned_heads_record(encoder: Encoder) -> dict[str, list[int]]:
    """HF's config.json `pruned_heads`: layer -> original indices of the removed heads."""
    return {str(layer): heads for layer, heads in encoder.pruned_heads().items()}


def apply_pruned_heads(encoder: Encoder, record: dict) -> Encoder:
    """Shape a freshly built encoder like the saved pruned one (before loading its weights)."""
    return prune_heads(encoder, {int(layer): sorted(int(h) for h in heads) for layer, heads in record.items()})


def attention_heads(encoder: Encoder) -> list[int]:
    return [block.attention.num_heads for block in encoder.blocks]


def load_pruned_transformers(folder: str | os.PathLike, model_class=None):
    """Load bertkit's pruned folder (smaller layers) into a transformers BERT class (default
    BertForSequenceClassification, what prune-heads writes) with transformers >= 5, which dropped `pruned_heads`
    support: build the model, shrink each pruned layer's query/key/value/output Linear layers, read the weights.
    The folder's transformers/ subfolder (full shapes, pruned heads zeroed) needs none of this."""
    from safetensors.torch import load_file
    import transformers
    folder = Path(folder)
    data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    record = data.get("pruned_heads", {})
    config = transformers.BertConfig(**{k: v for k, v in data.items()
                                        if k not in ("model_type", "architectures", "pruned_heads", "bertkit_note")})
    model_class = model_class or transformers.BertForSequenceClassification
    model = model_class(config)
    bert = model.base_model
    D = config.hidden_size // config.num_attention_heads
    for layer, removed in record.items():
        kept = config.num_attention_heads - len(removed)
        attention = bert.encoder.layer[int(layer)].attention
        for name in ("query", "key", "value"):
            setattr(attention.self, name, nn.Linear(config.hidden_size, kept * D))
        attention.output.dense = nn.Linear(kept * D, config.hidden_size)
        attention.self.num_attention_heads, attention.self.all_head_size = kept, kept * D
    state = load_file(str(folder / "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("position_ids") and "decoder" not in m]
    if missing or unexpected:
        raise ValueError(f"{folder}: weights do not match the pruned shapes: missing {missing[:4]}, "
                         f"unexpected {unexpected[:4]}")
    return model.eval()
