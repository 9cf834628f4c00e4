"""UniLM attention masks (Dong et al. 2019): one BERT encoder as a bidirectional, left-to-right or
sequence-to-sequence language model, chosen by the mask alone; plus seq2seq training and decoding.

Masks are (B, 1, T, T) bool, True = may attend, for Encoder(..., attention_bias=mask). In seq2seq the
source (token_type 0: [CLS] source [SEP]) sees itself bidirectionally and the target (token_type 1:
target [SEP]) sees the whole source and the target up to itself. Training follows the SimBERT /
bert4keras recipe: each target-side position predicts the next token through the MLM head.
"""
from __future__ import annotations

from typing import Literal, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.errors import BertkitError

MaskKind = Literal["bidirectional", "left-to-right", "seq2seq"]


def unilm_mask(kind: MaskKind, attention_mask: torch.Tensor,
               token_type_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
    """attention_mask (B, T) 1 on real tokens; token_type_ids (B, T) 0 source / 1 target (seq2seq only)."""
    B, T = attention_mask.shape
    keys = attention_mask.bool()[:, None, None, :]                                  # (B, 1, 1, T)
    if kind == "bidirectional":
        return keys.expand(B, 1, T, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=attention_mask.device).tril()  # (T, T): key j <= query i
    if kind == "left-to-right":
        return keys & causal
    if kind == "seq2seq":
        if token_type_ids is None:
            raise ValueError("a seq2seq mask needs token_type_ids (0 = source, 1 = target)")
        source_key = (token_type_ids == 0)[:, None, None, :]                       # (B, 1, 1, T)
        return keys & (source_key | causal)
    raise ValueError(f"unknown mask kind {kind!r}; choose bidirectional, left-to-right or seq2seq")


def seq2seq_inputs(source_ids: Sequence[Sequence[int]], target_ids: Sequence[Sequence[int]], cls_id: int,
                   sep_id: int, pad_id: int, max_length: int) -> dict[str, torch.Tensor]:
    """[CLS] source [SEP] target [SEP] per pair, right-padded; sources are cut first to fit max_length."""
    rows, types = [], []
    for source, target in zip(source_ids, target_ids):
        target = list(target)[:max(1, max_length // 2 - 1)]
        source = list(source)[:max(1, max_length - len(target) - 3)]
        rows.append([cls_id, *source, sep_id, *target, sep_id])
        types.append([0] * (len(source) + 2) + [1] * (len(target) + 1))
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros_like(input_ids)
    attention_mask = torch.zeros_like(input_ids)
    for i, (row, kind) in enumerate(zip(rows, types)):
        input_ids[i, :len(row)] = torch.tensor(row)
        token_type_ids[i, :len(row)] = torch.tensor(kind)
        attention_mask[i, :len(row)] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


class Seq2SeqLM(nn.Module):
    """A BERT encoder + MLM head used as a UniLM sequence-to-sequence model."""

    def __init__(self, encoder: nn.Module, mlm_head: nn.Module):
        super().__init__()
        if encoder.config.type_vocab_size < 2:
            raise BertkitError("UniLM seq2seq needs segment embeddings (type_vocab_size >= 2) to tell the target "
                               "from the source; RoBERTa-style encoders have one segment")
        self.encoder, self.mlm = encoder, mlm_head

    def forward(self, input_ids, token_type_ids, attention_mask, positions: Optional[torch.Tensor] = None):
        """-> (N, V) logits at `positions` (a (B, T) bool), or (B, V) at each row's last real token."""
        mask = unilm_mask("seq2seq", attention_mask, token_type_ids)
        hidden = self.encoder(input_ids, token_type_ids=token_type_ids, attention_bias=mask).last_hidden_state
        if positions is None:
            last = attention_mask.sum(dim=1) - 1
            picked = hidden[torch.arange(len(hidden), device=hidden.device), last]
        else:
            picked = hidden[positions]
        return self.mlm(picked, self.encoder.embeddings.token.weight)


def seq2seq_loss(model: nn.Module, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
    """Each target-side position (the source's [SEP] and the target tokens but the last) predicts the next
    token: the target and its closing [SEP]. A loss_fn for bertkit.train.train."""
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    is_target = (types == 1) & (mask == 1)
    predicts = torch.zeros_like(is_target)
    predicts[:, :-1] = is_target[:, 1:]                 # position t predicts token t + 1 when t + 1 is target
    logits = model(ids, types, mask, positions=predicts)
    targets = ids[:, 1:][predicts[:, :-1]]
    loss = F.cross_entropy(logits.float(), targets)
    return loss, {"tokens": float(targets.numel())}


@torch.no_grad()
def seq2seq_decode(model: Seq2SeqLM, source_ids: Sequence[int], cls_id: int, sep_id: int, max_new_tokens: int = 32,
                   banned_ids: Sequence[int] = (), use_cache: bool = True) -> list[int]:
    """Greedy decoding; stops at [SEP]. With the cache, the source is encoded once (bidirectionally) and each
    target token attends to the cached source and earlier targets, which is exactly what the seq2seq mask
    lets it see, so both paths give the same tokens (tested); without it every step re-encodes all."""
    if model.encoder.config.causal:
        raise BertkitError("seq2seq decoding needs a bidirectional encoder (causal=False)")
    model.eval()
    device = next(model.parameters()).device
    max_length = model.encoder.config.max_length
    source = [cls_id, *list(source_ids)[:max_length - 3], sep_id]
    target: list[int] = []
    cache = None
    for _ in range(max_new_tokens):
        if len(source) + len(target) >= max_length:
            break
        if use_cache:
            step = torch.tensor([target[-1:] if cache is not None else source], device=device)
            types = torch.full_like(step, 1 if cache is not None else 0)
            out = model.encoder(step, token_type_ids=types, cache=cache, use_cache=True)
            cache = out.cache
            logits = model.mlm(out.last_hidden_state[:, -1], model.encoder.embeddings.token.weight)[0]
        else:
            ids = torch.tensor([source + target], device=device)
            types = torch.tensor([[0] * len(source) + [1] * len(target)], device=device)
            logits = model(ids, types, torch.ones_like(ids))[0]
        if banned_ids:
            logits[list(banned_ids)] = float("-inf")
        token = int(logits.argmax())
        if token == sep_id:
            break
        target.append(token)
    return target
