"""The causal language model: the shared Encoder in its GPT-2 configuration plus a tied LM head.

GPT-2 (Radford et al. 2019) is a setting of EncoderConfig (causal, pre-LN, no embedding LayerNorm,
learned positions, no segments, no pooler, scaled residual init); the head has no weights of its own:
logits = h @ wte^T, with no bias, as in GPT-2, so a GPT-2 folder round-trips exactly.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.model.config import EncoderConfig, GPTEncoderConfig, gpt_config  # noqa: F401  (gpt_config: importable here)
from bertkit.model.encoder import Encoder, KeyValueCache

IGNORE_INDEX = -100


def check_causal(config: EncoderConfig) -> None:
    if not config.causal:
        raise ValueError("a causal LM needs an EncoderConfig with causal=True (see gpt_config)")


class CausalLMOutput(NamedTuple):
    logits: torch.Tensor                      # (B, T, V)
    cache: Optional[KeyValueCache]            # with use_cache: keys/values of every token so far


class CausalLM(nn.Module):
    def __init__(self, config: EncoderConfig, encoder: Optional[Encoder] = None):
        super().__init__()
        check_causal(config)
        if config.pad_token_id is not None:
            # GPT-2 has no padding token: a padding row would freeze the gradient of a real token.
            raise ValueError("a causal LM config needs pad_token_id=None (see gpt_config)")
        self.encoder = encoder if encoder is not None else Encoder(config)

    @property
    def config(self) -> EncoderConfig:
        return self.encoder.config

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.encoder.embeddings.token

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                cache: Optional[KeyValueCache] = None, use_cache: bool = False) -> CausalLMOutput:
        out = self.encoder(input_ids, attention_mask=attention_mask, cache=cache, use_cache=use_cache)
        logits = out.last_hidden_state @ self.word_embeddings.weight.t()   # (B, T, V), tied, no bias
        return CausalLMOutput(logits, out.cache)


def causal_lm_loss(model: nn.Module, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
    """Next-token cross-entropy, the training loop's loss_fn. batch: {"input_ids": (B, T)}, optionally
    "attention_mask" (B, T) 0 on padding; every position predicts the next, padded targets are ignored."""
    input_ids = batch["input_ids"]
    mask = batch.get("attention_mask")
    logits = model(input_ids[:, :-1], attention_mask=mask[:, :-1] if mask is not None else None).logits
    targets = input_ids[:, 1:]
    if mask is not None:
        targets = targets.masked_fill(mask[:, 1:] == 0, IGNORE_INDEX)
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)
    tokens = int((targets != IGNORE_INDEX).sum())
    return loss, {"tokens": float(tokens)}
