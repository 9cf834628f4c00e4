"""Every ```python block of docs/python-api.md runs, top to bottom in one namespace, on tiny models put where the
page says `path/to/model` (an encoder), `runs/cls` (a classifier) and `http://127.0.0.1:8000` (a live server on
the encoder). The blocks assert their own results (vectors equal across save/load and the server, predictions
over the folder's labels, search hits), so a broken example fails here."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from bertkit.checkpoints import save_checkpoint
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import SequenceClassificationHead
from bertkit.tokenizer import Tokenizer

PAGE = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"
WORDS = "the a cat sat on mat dog ran to big house king went city real text home".split()


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)


def tiny_folders(root: Path) -> tuple[Path, Path]:
    torch.manual_seed(0)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz",
              *("##" + c for c in "abcdefghijklmnopqrstuvwxyz"), *WORDS]
    tokenizer = Tokenizer.from_vocab({t: i for i, t in enumerate(dict.fromkeys(tokens))}, lowercase=True)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=2,
                           intermediate_size=64, max_position_embeddings=64)
    encoder = Encoder(config)
    model = save_checkpoint(root / "encoder", encoder, tokenizer)
    classifier = save_checkpoint(root / "classifier", encoder, tokenizer,
                                 heads={"classifier": SequenceClassificationHead(config, 2)},
                                 meta={"task": "classification", "labels": ["animal", "other"]})
    return Path(model), Path(classifier)


def test_every_example_runs(tmp_path, monkeypatch):
    pytest.importorskip("faiss")
    pytest.importorskip("uvicorn")
    from bertkit.serve.config import ServeConfig
    from bertkit.serve.server import build_service
    from bertkit.serve.server import BackgroundServer

    model, classifier = tiny_folders(tmp_path / "models")
    found = blocks()
    assert len(found) >= 6, "the page lost its examples"
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with BackgroundServer(build_service(ServeConfig(model=str(model)))) as server:
        places = {"path/to/model": str(model), "runs/cls": str(classifier), "http://127.0.0.1:8000": server.url}
        namespace: dict = {}
        for number, code in enumerate(found, 1):
            for placeholder, real in places.items():
                code = code.replace(f'"{placeholder}"', repr(real))
            exec(compile(code, f"docs/python-api.md block {number}", "exec"), namespace)
    assert (work / "copy-of-model" / "config.json").is_file() and (work / "my-index").is_dir()
