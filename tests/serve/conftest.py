"""Live servers on 127.0.0.1 over tiny random models: the real HTTP stack (uvicorn + httpx), no mocks.

`tiny_model_dir` here is a 2-layer, 32-wide random BERT with a 64-token limit; this file adds copies with a
classification head and an NER head, and a small search index built with the same model.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from servers import API_KEY, DOCUMENTS, make_tiny_model, start  # noqa: E402,F401


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


def _head_folder(base: Path, folder: Path, heads: dict, meta: dict) -> Path:
    import bertkit
    from bertkit.checkpoints import save_checkpoint

    model = bertkit.load(base)
    save_checkpoint(folder, model.encoder, model.tokenizer, heads=heads, meta=meta)
    return folder


@pytest.fixture(scope="session")
def classifier_model_dir(tmp_path_factory, tiny_model_dir) -> Path:
    import bertkit
    from bertkit.model.heads import SequenceClassificationHead

    torch.manual_seed(1)
    config = bertkit.load(tiny_model_dir).config
    return _head_folder(tiny_model_dir, tmp_path_factory.mktemp("models") / "classifier",
                        {"classifier": SequenceClassificationHead(config, 3)},
                        {"task": "classification", "labels": ["negative", "neutral", "positive"]})


@pytest.fixture(scope="session")
def ner_model_dir(tmp_path_factory, tiny_model_dir) -> Path:
    import bertkit
    from bertkit.model.heads import TokenClassificationHead

    config = bertkit.load(tiny_model_dir).config
    head = TokenClassificationHead(config, 3)
    with torch.no_grad():   # every token says B-PER, so every word piece is an entity: a known answer
        head.linear.weight.zero_()
        head.linear.bias.copy_(torch.tensor([0.0, 5.0, 0.0]))
    return _head_folder(tiny_model_dir, tmp_path_factory.mktemp("models") / "ner", {"token_classifier": head},
                        {"task": "ner", "labels": ["O", "B-PER", "I-PER"]})


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory, tiny_model_dir) -> Path:
    pytest.importorskip("faiss")
    from bertkit import Index
    from bertkit.search import EncoderSpec, ModelTextEncoder

    folder = tmp_path_factory.mktemp("index") / "docs"
    index = Index.create(folder, encoder=ModelTextEncoder(EncoderSpec(str(tiny_model_dir))))
    index.add([d[0] for d in DOCUMENTS], [d[1] for d in DOCUMENTS], metadata=[d[2] for d in DOCUMENTS])
    index.save()
    index.close()
    return folder


@pytest.fixture(scope="session")
def server(tiny_model_dir, index_dir):
    """The tiny model with a search index, no API key, small limits so tests can pass them cheaply."""
    running = start(tiny_model_dir, index=str(index_dir), max_request_texts=8, max_request_bytes=64 * 1024,
                    max_batch_tokens=256, search_k_limit=5)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def keyed_server(tiny_model_dir):
    running = start(tiny_model_dir, api_key=API_KEY)
    yield running
    running.stop()
