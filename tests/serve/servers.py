"""Helpers shared by the server and client tests: a tiny random model folder and a server on 127.0.0.1."""
from __future__ import annotations

from pathlib import Path

import torch

from bertkit.serve.config import ServeConfig

from bertkit.serve.server import build_service
from bertkit.serve.server import BackgroundServer

API_KEY = "test-key-123"
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'")
         + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
         + ["the", "is", "cat", "dog", "sat", "on", "mat", "hello", "world", "你", "好", "世", "界"])
DOCUMENTS = [
    ("d1", "the cat sat on the mat", {"kind": "animal"}),
    ("d2", "hello world", {"kind": "greeting"}),
    ("d3", "the dog is on a mat", {"kind": "animal"}),
    ("d4", "你好 世界", {"kind": "greeting"}),
]


def make_tiny_model(folder: Path) -> Path:
    """A 2-layer, 32-wide random BERT saved as a bertkit folder (64-token limit)."""
    from bertkit.checkpoints import save_checkpoint
    from bertkit.model import Encoder, EncoderConfig
    from bertkit.tokenizer import Tokenizer

    torch.manual_seed(0)
    tokenizer = Tokenizer.from_vocab({token: i for i, token in enumerate(VOCAB)}, lowercase=True)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
                           intermediate_size=64, max_position_embeddings=64)
    save_checkpoint(folder, Encoder(config).eval(), tokenizer)
    return folder


def start(model_dir: Path, **settings) -> BackgroundServer:
    """A server on `model_dir`. Its passes run in the server process (--backend thread) unless a test names a
    backend (None: ServeConfig's default, the model process for a folder): tests of routes, limits and guards
    need no model process, and starting one costs ~1.3 s per server."""
    settings.setdefault("backend", "thread")
    config = ServeConfig(model=str(model_dir), **settings)
    return BackgroundServer(build_service(config)).__enter__()
