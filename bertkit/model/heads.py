"""Task heads: small modules on top of the encoder that return logits. Each job owns its loss.

Sequence classification differs by family (SEQUENCE_HEADS): BERT puts a linear layer on the tanh pooler, ELECTRA
an MLP on [CLS] (it has no pooler), XLNet a tanh projection of its last token (<cls>).
"""
from __future__ import annotations

from typing import Callable, Optional, Union

import torch
from torch import nn

from bertkit.model.config import EncoderConfig
from bertkit.model.dropout import Dropout
from bertkit.model.encoder import ACTIVATIONS
from bertkit.model.xlnet import XLNetConfig

AnyConfig = Union[EncoderConfig, XLNetConfig]


class SequenceClassificationHead(nn.Module):
    """dropout + linear over the pooled [CLS] vector; num_labels=1 is regression."""

    def __init__(self, config: AnyConfig, num_labels: int, dropout: float | None = None):
        super().__init__()
        self.num_labels = num_labels
        self.dropout = Dropout(config.hidden_dropout if dropout is None else dropout)
        self.linear = nn.Linear(config.hidden_size, num_labels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:      # (B, C) -> (B, num_labels)
        return self.linear(self.dropout(pooled))


class MlpClassificationHead(nn.Module):
    """dropout, dense, activation, dropout, linear over the [CLS] vector: ELECTRA's classifier (HF's
    ElectraClassificationHead, gelu; "although BERT uses tanh here, it seems Electra authors used gelu")."""

    def __init__(self, config: AnyConfig, num_labels: int, activation: str = "gelu", dropout: float | None = None):
        super().__init__()
        self.num_labels = num_labels
        self.dropout = Dropout(config.hidden_dropout if dropout is None else dropout)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACTIVATIONS[activation]
        self.linear = nn.Linear(config.hidden_size, num_labels)

    def forward(self, cls: torch.Tensor) -> torch.Tensor:         # (B, C) -> (B, num_labels)
        return self.linear(self.dropout(self.act(self.dense(self.dropout(cls)))))


class SummaryClassificationHead(nn.Module):
    """XLNet's sequence summary and classifier: dropout, tanh(W x + b) (or x, without the projection), dropout,
    linear. x is the summary token's vector, (B, C): XLNet's last token <cls>."""

    def __init__(self, config: XLNetConfig, num_labels: int):
        super().__init__()
        self.num_labels = num_labels
        self.first_dropout = Dropout(config.summary_first_dropout)
        self.summary = nn.Linear(config.hidden_size, config.hidden_size) if config.summary_use_proj else None
        self.tanh = config.summary_activation == "tanh"
        self.last_dropout = Dropout(config.summary_last_dropout)
        self.linear = nn.Linear(config.hidden_size, num_labels)

    def forward(self, summary: torch.Tensor) -> torch.Tensor:     # (B, C) -> (B, num_labels)
        x = self.first_dropout(summary)
        x = self.summary(x) if self.summary is not None else x
        x = torch.tanh(x) if self.tanh else x
        return self.linear(self.last_dropout(x))


# family -> the head sequence classification puts on the encoder's summary vector (FinetuneModel feeds it the
# pooler output where there is one, else the first position of cls_only's output: [CLS], or XLNet's <cls>)
SEQUENCE_HEADS: dict[str, Callable[[AnyConfig, int], nn.Module]] = {
    "bert": SequenceClassificationHead,
    "electra": MlpClassificationHead,
    "xlnet": SummaryClassificationHead,
}


def sequence_classification_head(config: AnyConfig, num_labels: int) -> nn.Module:
    return SEQUENCE_HEADS[config.family](config, num_labels)


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

    def __init__(self, config: EncoderConfig, activation: Optional[str] = None):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.token_embedding_size)
        # ELECTRA's generator uses gelu whatever the encoder's activation (HF ElectraGeneratorPredictions)
        self.act = ACTIVATIONS[activation or config.activation]
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


class ReplacedTokenHead(nn.Module):
    """ELECTRA's discriminator: dense, activation, then one logit per token for "this token was replaced"."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACTIVATIONS[config.activation]
        self.linear = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:      # (B, T, C) -> (B, T)
        return self.linear(self.act(self.dense(hidden))).squeeze(-1)


class TiedLMHead(nn.Module):
    """The vocabulary projection tied to the word embeddings, plus a bias, with no transform in between:
    XLNet's `lm_loss`. (N, C) -> (N, V)."""

    def __init__(self, config: AnyConfig):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return hidden @ word_embeddings.t() + self.bias
