"""A tiny encoder regression task shared by the training-loop tests (and the torchrun worker)."""
from __future__ import annotations

import torch
from torch import nn

from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.train import IndexedBatches

VOCAB, LENGTH, ITEMS = 50, 8, 64


class ToyModel(nn.Module):
    def __init__(self, dropout: float = 0.1):
        super().__init__()
        config = EncoderConfig(vocab_size=VOCAB, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                               hidden_dropout=dropout, attention_dropout=0.0, max_position_embeddings=16)
        self.encoder = Encoder(config)
        self.out = nn.Linear(32, 1)

    def forward(self, input_ids):
        return self.out(self.encoder(input_ids).pooled_output).squeeze(-1)


def toy_data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (ITEMS, LENGTH), generator=g)
    target = (ids < VOCAB // 2).float().mean(1)
    return ids, target


def toy_batches(batch_size: int = 8, rank=None, world_size=None, seed: int = 0) -> IndexedBatches:
    ids, target = toy_data()
    return IndexedBatches(ITEMS, batch_size, lambda idx, epoch: {"ids": ids[idx], "y": target[idx]},
                          seed=seed, rank=rank, world_size=world_size)


def toy_loss(model, batch):
    pred = model(batch["ids"])
    loss = ((pred - batch["y"]) ** 2).mean()
    return loss, {"tokens": float(batch["ids"].numel())}
