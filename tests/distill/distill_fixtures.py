"""Helpers for the distill tests: a tiny classifier folder (hidden 32, 2 layers, 4 heads), tiny data in code."""
from __future__ import annotations

import json

import torch

from bertkit.checkpoints import save_checkpoint
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import SequenceClassificationHead
from bertkit.tokenizer import Tokenizer

WORDS = ["sport", "match", "goal", "team", "market", "shares", "bank", "profit", "film", "music", "award", "star"]
LABELS = ["sport", "business", "arts"]


def tiny_tokenizer() -> Tokenizer:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", *WORDS]
    return Tokenizer.from_vocab({t: i for i, t in enumerate(vocab)}, lowercase=True)


def tiny_config(**changes) -> EncoderConfig:
    base = dict(vocab_size=32, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0)
    return EncoderConfig(**{**base, **changes})


def make_model_folder(path, layers: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    config = tiny_config(num_layers=layers)
    encoder = Encoder(config)
    head = SequenceClassificationHead(config, len(LABELS))
    save_checkpoint(path, encoder, tiny_tokenizer(), {"classifier": head},
                    {"task": "classification", "labels": LABELS})
    return path


def write_examples(path, count: int = 24):
    rows = []
    for i in range(count):
        label = i % 3
        words = WORDS[label * 4:(label + 1) * 4]
        rows.append({"text": " ".join(words[(i + j) % 4] for j in range(3 + i % 3)), "label": LABELS[label]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
