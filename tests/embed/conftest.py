"""A tiny random encoder and a small vocabulary, saved as a model folder, for fast embedding tests."""
from __future__ import annotations

import pytest
import torch

from bertkit.checkpoints import save_checkpoint
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.tokenizer import Tokenizer

WORDS = ("the a is was cat dog sat on mat red blue green apple pear sky sea river old new king man woman "
         "went to city ran big small house tree bird sang song").split()


def tiny_vocab() -> dict[str, int]:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?"]
    tokens += list("abcdefghijklmnopqrstuvwxyz") + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + WORDS
    return {t: i for i, t in enumerate(dict.fromkeys(tokens))}


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(WORDS), (n, 6), generator=rng).tolist()
    return [" ".join(WORDS[i] for i in row) for row in picks]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    torch.manual_seed(0)
    tokenizer = Tokenizer.from_vocab(tiny_vocab(), lowercase=True)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=2,
                           intermediate_size=64, max_position_embeddings=64)
    folder = tmp_path_factory.mktemp("tiny") / "encoder"
    save_checkpoint(folder, Encoder(config), tokenizer)
    return folder


@pytest.fixture(scope="session")
def make_sentences():
    """`make_sentences(n, seed=0)`: n random 6-word sentences over the tiny vocabulary."""
    return sentences


@pytest.fixture(scope="session")
def words():
    return WORDS
