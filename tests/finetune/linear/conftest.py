"""Fixtures of the linear-model tests: a tiny cased random encoder and planted data files (linear_data.py)."""
from __future__ import annotations

import pytest
import torch

from linear_data import FILLER, keyword_rows, split_signal_rows, write_jsonl


@pytest.fixture(scope="session")
def cased_encoder_dir(tmp_path_factory):
    """A 2-layer, 32-wide random BERT with a cased vocabulary of the filler words, "day" and "Day"."""
    from bertkit.checkpoints import save_checkpoint
    from bertkit.model import Encoder, EncoderConfig
    from bertkit.tokenizer import Tokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + FILLER + ["day", "Day"] + list("abcdefghijklmnopqrstuvwxyz")
    tokenizer = Tokenizer.from_vocab({t: i for i, t in enumerate(dict.fromkeys(vocab))}, lowercase=False)
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=2,
                           intermediate_size=64, max_position_embeddings=64)
    folder = tmp_path_factory.mktemp("cased") / "encoder"
    save_checkpoint(folder, Encoder(config).eval(), tokenizer)
    return folder


@pytest.fixture(scope="session")
def split_signal_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("split_signal")
    return {name: write_jsonl(folder / f"{name}.jsonl", split_signal_rows(n, seed))
            for name, n, seed in (("train", 400, 0), ("dev", 200, 1), ("test", 200, 2))}


@pytest.fixture(scope="session")
def keyword_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keywords")
    return {name: write_jsonl(folder / f"{name}.jsonl", keyword_rows(n, seed))
            for name, n, seed in (("train", 400, 0), ("dev", 100, 1), ("test", 200, 2))}
