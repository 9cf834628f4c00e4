"""Distillation losses. Teacher tensors come from a no_grad pass; only the student side carries gradients.

- logit KD (Hinton et al. 2015): T^2 * KL(softmax(t/T) || softmax(s/T)). The soft targets' gradients scale
  as 1/T^2, so the T^2 factor keeps their size comparable to the hard loss when T changes.
- logit MSE (Tang et al. 2019, BiLSTM students): mean squared error between raw logits.
- hidden-state MSE through a learned projection when widths differ, and attention-map MSE, over a layer
  mapping (TinyBERT, Jiao et al. 2020); cosine loss aligning hidden-state directions (DistilBERT).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn


def soft_target_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0,
                     mode: str = "kl") -> torch.Tensor:
    """(N, L) logits -> scalar. mode 'kl': T^2 KL(teacher_T || student_T), batch mean; 'mse': mean (s - t)^2."""
    student_logits, teacher_logits = student_logits.float(), teacher_logits.float()
    if mode == "mse":
        return F.mse_loss(student_logits, teacher_logits)
    if mode != "kl":
        raise ValueError(f"logit loss {mode!r} is not 'kl' or 'mse'")
    T = temperature
    log_student = F.log_softmax(student_logits / T, dim=-1)
    log_teacher = F.log_softmax(teacher_logits / T, dim=-1)
    return F.kl_div(log_student, log_teacher, log_target=True, reduction="batchmean") * T * T


def mixed_logit_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, hard_loss: torch.Tensor,
                     alpha: float, temperature: float, mode: str = "kl") -> torch.Tensor:
    """alpha * soft loss + (1 - alpha) * hard (gold-label) loss."""
    soft = soft_target_loss(student_logits, teacher_logits, temperature, mode)
    return alpha * soft + (1.0 - alpha) * hard_loss if alpha < 1.0 else soft


def uniform_layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """TinyBERT's uniform mapping: student layer m (1-based) learns from teacher layer m * k, k = N_t / N_s;
    returned as teacher hidden_states indices for student hidden_states 1..M (0 is the embeddings)."""
    if teacher_layers % student_layers:
        raise ValueError(f"{teacher_layers} teacher layers do not divide into {student_layers} student layers (the "
                         "hidden-state and attention losses map student layer m to teacher layer m * k); choose a "
                         f"student depth that divides {teacher_layers}")
    k = teacher_layers // student_layers
    return [m * k for m in range(1, student_layers + 1)]


def _masked_mean(values: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """values (B, T) per-token losses; mask (B, T) 1 for real tokens."""
    if mask is None:
        return values.mean()
    weights = mask.to(values.dtype)
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


def hidden_mse_loss(student_hidden: Sequence[torch.Tensor], teacher_hidden: Sequence[torch.Tensor],
                    layer_map: Sequence[int], projections: Optional[nn.ModuleList] = None,
                    mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean over mapped layers of per-token MSE(W h_s, h_t); W (student width -> teacher width) is learned."""
    losses = []
    for i, t_index in enumerate(layer_map):
        s = student_hidden[i + 1].float()
        if projections is not None:
            s = projections[i](s)
        losses.append(_masked_mean((s - teacher_hidden[t_index].float()).pow(2).mean(-1), mask))
    return torch.stack(losses).mean()


def hidden_cosine_loss(student_hidden: Sequence[torch.Tensor], teacher_hidden: Sequence[torch.Tensor],
                       layer_map: Sequence[int], mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """DistilBERT's cosine embedding loss, 1 - cos(h_s, h_t) per token (same widths)."""
    losses = []
    for i, t_index in enumerate(layer_map):
        cos = F.cosine_similarity(student_hidden[i + 1].float(), teacher_hidden[t_index].float(), dim=-1)
        losses.append(_masked_mean(1.0 - cos, mask))
    return torch.stack(losses).mean()


def attention_mse_loss(student_attentions: Sequence[torch.Tensor], teacher_attentions: Sequence[torch.Tensor],
                       layer_map: Sequence[int], mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """TinyBERT attention loss: MSE between attention probability maps (B, H, T, T) of mapped layers, over
    real query rows. layer_map holds teacher hidden-state indices; attentions are 0-based per layer."""
    losses = []
    for i, t_index in enumerate(layer_map):
        s, t = student_attentions[i].float(), teacher_attentions[t_index - 1].float()
        if s.shape != t.shape:
            raise ValueError(f"attention maps differ in shape {tuple(s.shape)} vs {tuple(t.shape)}: attention "
                             "distillation needs the same number of heads")
        per_row = (s - t).pow(2).mean(-1).mean(1)            # (B, T) over keys, then heads
        losses.append(_masked_mean(per_row, mask))
    return torch.stack(losses).mean()


def make_projections(student_width: int, teacher_width: int, count: int) -> Optional[nn.ModuleList]:
    """Learned student -> teacher width maps (TinyBERT's W_h), None when widths already match."""
    if student_width == teacher_width:
        return None
    return nn.ModuleList(nn.Linear(student_width, teacher_width) for _ in range(count))
