"""Task heads: small modules on top of the encoder that return logits. Each job owns its loss."""
from __future__ import annotations

import torch
from torch import nn

from bertkit.model.config import EncoderConfig
from bertkit.model.dropout import Dropout
from bertkit.model.encoder import ACTIVATIONS


class SequenceClassificationHead(nn.Module):
    """dropout + linear over the pooled [CLS] vector; num_labels=1 is regression."""

    def __init__(self, config: EncoderConfig, num_labels: int, dropout: float | None = None):
        super().__init__()
        self.num_labels = num_labels
        self.dropout = Dropout(config.hidden_dropout if dropout is None else dropout)
        self.linear = nn.Linear(config.hidden_size, num_labels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:      # (B, C) -> (B, num_labels)
        return self.linear(self.dropout(pooled))


class TokenClassificationHead(nn.Module):
    """dropout + linear at every position (NER)."""

    def __init__(self, config: EncoderConfig, num_labels: int, dropout: float | None = None):
        super().__init__()
        self.num_labels = num_labels
        self.dropout = Dropout(config.hidden_dropout if dropout is None else dropout)
        self.linear = nn.Linear(config.hidden_size, num_labels)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:      # (B, T, C) -> (B, T, num_labels)
        return self.linear(self.dropout(hidden))


class QuestionAnsweringHead(nn.Module):
    """Start and end logits for extractive QA."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.linear = nn.Linear(config.hidden_size, 2)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # (B, T, C) -> 2 x (B, T)
        start, end = self.linear(hidden).unbind(dim=-1)
        return start, end


class MaskedLMHead(nn.Module):
    """dense + activation + LayerNorm, then the vocabulary projection tied to the word embeddings.

    Call it on the hidden states of masked positions only, (N, C) -> (N, V): the vocabulary projection is
    the largest matmul of pre-training and most positions are not predicted. The tied (V, E) embedding
    matrix is passed in, so it is stored once, in the encoder.
    """

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.token_embedding_size)
        self.act = ACTIVATIONS[config.activation]
        self.norm = nn.LayerNorm(config.token_embedding_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.act(self.dense(hidden)))               # (N, E)
        return torch.addmm(self.bias, h, word_embeddings.t()) if h.dim() == 2 else h @ word_embeddings.t() + self.bias


class SentencePairHead(nn.Module):
    """Two-way classifier over the pooled vector: next-sentence prediction (BERT) or sentence order (ALBERT)."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.linear = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:      # (B, C) -> (B, 2)
        return self.linear(pooled)
