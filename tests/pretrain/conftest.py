from pathlib import Path

import pytest
import torch

from bertkit.tokenizer import Tokenizer
from pretrain_corpus import make_tokenizer, write_corpus

torch.set_num_threads(1)   # tiny models on a shared machine: one thread avoids contention


@pytest.fixture
def corpus(tmp_path) -> Path:
    return write_corpus(tmp_path / "corpus.txt")


@pytest.fixture
def tokenizer() -> Tokenizer:
    return make_tokenizer()


@pytest.fixture
def vocab_dir(tmp_path, tokenizer) -> Path:
    folder = tmp_path / "vocab"
    tokenizer.save(folder)
    return folder
