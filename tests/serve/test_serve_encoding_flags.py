"""serve --pooling / --layers: the server's vectors change exactly as `encode --pooling / --layers` change them
(/encode and /v1/embeddings == bertkit.load(M).encode(texts, pooling=..., layers=...)), and bad values are one line."""
from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

import bertkit
from bertkit.cli import build_parser
from bertkit.cli.serve_commands import serve_config
from bertkit.errors import BertkitError
from bertkit.serve.app import create_app
from bertkit.serve.config import ServeConfig
from bertkit.serve.server import build_service

TEXTS = ["the cat sat on the mat", "hello world", "dog", "is the cat on the mat ? hello"]


def _served(argv: list[str], truncate: bool = False) -> tuple[np.ndarray, np.ndarray]:
    service = build_service(serve_config(build_parser().parse_args(["serve", *argv])))
    try:
        with TestClient(create_app(service)) as client:
            one_by_one = []
            for text in TEXTS:          # a batch of one, as Model.encode of one text: exact equality
                answer = client.post("/encode", json={"texts": [text], "truncate": truncate})
                assert answer.status_code == 200, answer.text
                one_by_one.append(answer.json()["results"][0])
            openai = client.post("/v1/embeddings", json={"input": TEXTS, "truncate": truncate}).json()
    finally:
        service.close()
    return (np.asarray(one_by_one, dtype=np.float32),
            np.asarray([d["embedding"] for d in openai["data"]], dtype=np.float32))


@pytest.mark.parametrize("flags, settings", [(["--pooling", "cls"], {"pooling": "cls"}),
                                             (["--layers=-2,-1"], {"layers": "-2,-1"}),
                                             (["--pooling", "max", "--layers", "1"], {"pooling": "max", "layers": 1}),
                                             (["--max-length", "4"], {"max_length": 4})])
def test_serve_encodes_like_model_encode(tiny_model_dir, flags, settings):
    model = bertkit.load(tiny_model_dir)
    expected = np.stack([model.encode([text], **settings)[0] for text in TEXTS])
    default = np.stack([model.encode([text])[0] for text in TEXTS])
    assert not np.allclose(expected, default, atol=1e-4)          # the flag really changes the vectors
    encoded, openai = _served(["--model", str(tiny_model_dir), *flags], truncate="max_length" in settings)
    np.testing.assert_array_equal(encoded, expected)
    unit = expected / np.linalg.norm(expected, axis=1, keepdims=True)   # /v1/embeddings normalizes, as OpenAI's
    np.testing.assert_allclose(openai, unit, rtol=1e-5, atol=1e-6)     # one batch: another summation order


def test_serve_rejects_bad_layers_and_pooling(tiny_model_dir):
    with pytest.raises(BertkitError, match="serve: --layers 'top' is not one of"):
        ServeConfig(model=str(tiny_model_dir), layers="top")
    with pytest.raises(BertkitError, match="serve: --pooling 'none' is not one of"):
        ServeConfig(model=str(tiny_model_dir), pooling="none")
    with pytest.raises(BertkitError, match="--layers 5: layer 5 is out of range"):
        build_service(ServeConfig(model=str(tiny_model_dir), layers="5"))


def test_serve_max_length_refuses_longer_texts_unless_truncated_and_is_capped_by_the_positions(tiny_model_dir):
    service = build_service(ServeConfig(model=str(tiny_model_dir), max_length=4))
    try:
        with TestClient(create_app(service)) as client:
            answer = client.post("/encode", json={"texts": [TEXTS[0]]})
            assert answer.status_code == 422 and "limit of 4" in answer.text
            assert client.get("/status").json()["model"]["max_length"] == 4
    finally:
        service.close()
    positions = bertkit.load(tiny_model_dir).config.max_length
    with pytest.raises(BertkitError, match=f"serve --max-length {positions + 1}: .* has {positions} positions"):
        build_service(ServeConfig(model=str(tiny_model_dir), max_length=positions + 1))
    with pytest.raises(BertkitError, match="serve: --max-length 1 must be >= 2"):
        ServeConfig(model=str(tiny_model_dir), max_length=1)
