"""A tiny random encoder with a small vocabulary, saved as a model folder, for fast end-to-end tests."""
from __future__ import annotations

import pytest
import torch

from bertkit.checkpoints import save_checkpoint
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.tokenizer import Tokenizer

WORDS = ("good great fine nice bad awful poor sad movie film book the a is was what word means paris london "
         "alice bob went to in city lives john smith new york who where answer question").split()
CHINESE = list("我爱北京天安门上海人民日报江泽民中国")


def tiny_vocab() -> dict[str, int]:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", ":", "!"]
    tokens += list("abcdefghijklmnopqrstuvwxyz0123456789")
    tokens += ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
    tokens += WORDS + CHINESE
    return {t: i for i, t in enumerate(dict.fromkeys(tokens))}


@pytest.fixture(scope="session")
def finetune_model_dir(tmp_path_factory):
    torch.manual_seed(0)
    tokenizer = Tokenizer.from_vocab(tiny_vocab(), lowercase=True)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=2,
                           intermediate_size=64, max_position_embeddings=64)
    folder = tmp_path_factory.mktemp("tiny") / "encoder"
    save_checkpoint(folder, Encoder(config), tokenizer)
    return folder
