"""The causal language model: the shared Encoder in its GPT-2 configuration plus a tied LM head.

GPT-2 (Radford et al. 2019) is a setting of EncoderConfig (causal, pre-LN, no embedding LayerNorm,
learned positions, no segments, no pooler, scaled residual init); the head has no weights of its own:
logits = h @ wte^T, with no bias, as in GPT-2, so a GPT-2 folder round-trips exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.model.config import EncoderConfig, preset
from bertkit.model.encoder import Encoder, KeyValueCache

IGNORE_INDEX = -100


@dataclass
class GPTEncoderConfig:
    """The one GPT shape: what differs between GPT-2 sizes. Everything else (pre-LN, learned positions, no segments,
    tied head, no padding) is the gpt2-small preset of EncoderConfig. `bertkit pretrain --arch gpt`'s [encoder]."""
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    max_position_embeddings: int = 1024
    intermediate_size: Optional[int] = None   # None: 4 x hidden_size, as GPT-2
    dropout: float = 0.1                      # GPT-2's resid/embd/attn dropout

    def encoder_config(self, vocab_size: int, **changes) -> EncoderConfig:
        """The EncoderConfig of this shape; `changes` set any other EncoderConfig field (a GPT-2 folder's)."""
        shape = dict(vocab_size=vocab_size, hidden_size=self.hidden_size, num_layers=self.num_layers,
                     num_heads=self.num_heads, max_position_embeddings=self.max_position_embeddings,
                     intermediate_size=self.intermediate_size or 4 * self.hidden_size,
                     hidden_dropout=self.dropout, attention_dropout=self.dropout)
        return preset("gpt2-small", **{**shape, **changes})


def gpt_config(vocab_size: int, **changes) -> EncoderConfig:
    """A GPT-2-shaped EncoderConfig of any size: GPTEncoderConfig's shape fields (hidden_size, num_layers, ...)
    and any other EncoderConfig field as keywords."""
    shape = {name: changes.pop(name) for name in GPT_SHAPE_FIELDS if name in changes}
    return GPTEncoderConfig(**shape).encoder_config(vocab_size, **changes)


GPT_SHAPE_FIELDS = tuple(f.name for f in fields(GPTEncoderConfig))


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
