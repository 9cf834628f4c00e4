import pytest
import torch

from bertkit.generate import CausalLM, gpt_config
from bertkit.tokenizer.bpe import train_bpe

TEXT = ["the cat sat on the mat.", "the dog sat on the log.", "a cat and a dog met on a mat.",
        "naïve café owners sell crème brûlée — 東京 too."] * 5


@pytest.fixture
def tiny_config():
    return gpt_config(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64)


@pytest.fixture
def tiny_model(tiny_config):
    torch.manual_seed(0)
    return CausalLM(tiny_config).eval()


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def bpe(corpus_file):
    return train_bpe([corpus_file], vocab_size=300, min_frequency=1)
