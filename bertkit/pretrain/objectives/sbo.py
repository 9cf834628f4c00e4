"""SpanBERT (Joshi et al. 2020): span masking + the span boundary objective (SBO), added to the MLM loss.

Each masked token x_i of a span x_s..x_e is predicted again, from the outputs of the two tokens just outside the
span, h_{s-1} and h_{e+1}, and a relative position embedding p_{i-s} (paper section 3.2):
    h = LayerNorm(GeLU(W1 [h_{s-1}; h_{e+1}; p_{i-s}]))        (2C + P -> C)
    y = LayerNorm(GeLU(W2 h))                                   (C -> C)
    logits = y E^T + b                                          (the output embeddings are the word embeddings)
Spans are the maximal runs of masked (labelled) positions; [CLS] and [SEP] are never masked, so both boundaries
always exist. Masking is span masking, whatever data.masking says. The SBO head is for training only: the folder
is BertForMaskedLM (encoder + MLM head), as SpanBERT released its models without it.
B = batch, T = sequence length, N = masked positions, C = hidden size, V = vocabulary.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import nn

from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead
from bertkit.pretrain.masking import IGNORE_INDEX, MaskingConfig
from bertkit.pretrain.objectives.mlm import MaskedLM, PretrainingModel, masked_lm_loss, token_loss

POSITION_SIZE = 200            # the paper's relative position embedding size (SpanBERT's pair_positional_dim)


class SpanBoundaries(NamedTuple):
    """For each masked position, in row-major order (the order of hidden[masked]): its row, the positions of the
    unmasked tokens just left and right of its span, and its offset in the span (0 for the first token)."""
    row: torch.Tensor      # (N,)
    left: torch.Tensor     # (N,)
    right: torch.Tensor    # (N,)
    offset: torch.Tensor   # (N,)


def span_boundaries(masked: torch.Tensor) -> SpanBoundaries:
    """masked: (B, T) bool. Left boundary = the last unmasked position before, right = the first after."""
    B, T = masked.shape
    index = torch.arange(T, device=masked.device).expand(B, T)                            # (B, T)
    left = torch.where(masked, -1, index).cummax(dim=1).values                           # last unmasked <= t
    right = torch.where(masked, T, index).flip(1).cummin(dim=1).values.flip(1)           # first unmasked >= t
    row, position = masked.nonzero(as_tuple=True)                                        # (N,), row-major
    l, r = left[row, position], right[row, position]
    return SpanBoundaries(row, l, r, position - l - 1)


class SpanBoundaryHead(nn.Module):
    def __init__(self, config: EncoderConfig, max_offset: int):
        super().__init__()
        self.position = nn.Embedding(max_offset, POSITION_SIZE)
        self.dense1 = nn.Linear(2 * config.hidden_size + POSITION_SIZE, config.hidden_size)
        self.norm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dense2 = nn.Linear(config.hidden_size, config.token_embedding_size)
        self.norm2 = nn.LayerNorm(config.token_embedding_size, eps=config.layer_norm_eps)
        self.act = nn.GELU()
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor, spans: SpanBoundaries, word_embeddings: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, C) -> (N, V) logits for the N masked positions."""
        offset = spans.offset.clamp(max=self.position.num_embeddings - 1)
        x = torch.cat([hidden[spans.row, spans.left], hidden[spans.row, spans.right],
                       self.position(offset)], dim=-1)                                   # (N, 2C + P)
        x = self.norm1(self.act(self.dense1(x)))                                         # (N, C)
        x = self.norm2(self.act(self.dense2(x)))                                         # (N, E)
        return torch.addmm(self.bias, x, word_embeddings.t())                            # (N, V)


class SpanBoundaryOutput(NamedTuple):
    mlm_logits: torch.Tensor               # (N, V)
    pair_logits: Optional[torch.Tensor]    # always None: SpanBERT drops NSP
    sbo_logits: torch.Tensor               # (N, V), the same N positions


class SpanBoundaryModel(PretrainingModel):
    """The MLM model plus the SBO head; heads() (what is saved) is the MLM head alone."""

    def __init__(self, config: EncoderConfig, encoder: Optional[Encoder] = None, mlm: Optional[MaskedLMHead] = None,
                 max_offset: int = 512):
        super().__init__(config, False, encoder, mlm)
        self.sbo = SpanBoundaryHead(self.config, max_offset)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor,
                labels: torch.Tensor) -> SpanBoundaryOutput:
        hidden = self.encoder(input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state            # (B, T, C)
        masked = labels != IGNORE_INDEX                                                   # (B, T)
        words = self.encoder.embeddings.token.weight                                      # (V, E)
        mlm_logits = self.mlm(hidden[masked], words)                                      # (N, V)
        return SpanBoundaryOutput(mlm_logits, None, self.sbo(hidden, span_boundaries(masked), words))


class SpanBoundary(MaskedLM):

    def masking(self) -> MaskingConfig:
        return MaskingConfig(strategy="span", rate=self.config.data.mask_rate)

    def build(self, encoder_config: EncoderConfig, init) -> SpanBoundaryModel:
        max_offset = self.config.data.max_length
        if init is None:
            model = SpanBoundaryModel(encoder_config, max_offset=max_offset)
            model.mlm.apply(model.encoder._init_weights)
        else:
            model = SpanBoundaryModel(init.config, init.encoder, init.heads.get("mlm"), max_offset=max_offset)
            if "mlm" not in init.heads:
                model.mlm.apply(model.encoder._init_weights)
        model.sbo.apply(model.encoder._init_weights)
        return model

    def loss(self, model, batch):
        """MLM + SBO, both means over the masked tokens of the global batch (the paper sums the two)."""
        out: SpanBoundaryOutput = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                                        batch["labels"])
        loss, metrics = masked_lm_loss(out, batch)
        labels = batch["labels"]
        sbo_loss, metrics["sbo_loss"], metrics["sbo_accuracy"] = token_loss(out.sbo_logits,
                                                                            labels[labels != IGNORE_INDEX])
        return loss + sbo_loss, metrics
