"""A tiny random encoder saved as a model folder, for end-to-end index and CLI tests."""
from __future__ import annotations

import pytest
import torch

from bertkit.checkpoints import save_checkpoint
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.tokenizer import Tokenizer

WORDS = "the a is cat dog sat on mat red blue apple pear sky sea river king old new city bird song".split()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    torch.manual_seed(0)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz") + WORDS
    tokenizer = Tokenizer.from_vocab({t: i for i, t in enumerate(dict.fromkeys(tokens))}, lowercase=True)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                           intermediate_size=64, max_position_embeddings=64)
    folder = tmp_path_factory.mktemp("tiny") / "encoder"
    save_checkpoint(folder, Encoder(config), tokenizer)
    return folder
