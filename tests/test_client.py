"""bertkit.Client against a live server on 127.0.0.1: splitting, results, and errors instead of hangs."""
from __future__ import annotations

import socket

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from bertkit.client import Client, ServerError, ServerTimeout, ServerUnavailable  # noqa: E402
from serve.servers import API_KEY, make_tiny_model, start  # noqa: E402

TEXTS = ["the cat sat on the mat", "hello world", "a dog ||| the cat", "你好 世界", "the mat", "cat", "dog",
         "hello"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("client") / "tiny")


@pytest.fixture(scope="module")
def server(model_dir):
    running = start(model_dir, max_request_texts=3, api_key=API_KEY)
    yield running
    running.stop()


def test_encode_splits_by_the_published_limit(server, model_dir):
    import bertkit

    with Client(server.url, timeout=30, api_key=API_KEY) as client:
        assert client.limits["max_request_texts"] == 3
        vectors = client.encode(TEXTS, pooling="mean", normalize=False)
        before = client.status()["counters"]["requests"]["/encode"]
        client.encode(TEXTS)
        assert client.status()["counters"]["requests"]["/encode"] - before == 3     # 8 texts, 3 per request
        assert client.encode([]).shape == (0, 32)
    assert vectors.shape == (8, 32) and vectors.dtype == np.float32
    local = bertkit.load(model_dir)
    singles = [i for i, t in enumerate(TEXTS) if "|||" not in t]
    expected = local.encode([TEXTS[i] for i in singles], pooling="mean", normalize=False)
    np.testing.assert_allclose(vectors[singles], expected, atol=1e-4)


def test_tokenize_and_errors_from_the_server(server):
    with Client(server.url, timeout=30, api_key=API_KEY) as client:
        assert client.tokenize(["hello world"])["tokens"] == [["[CLS]", "hello", "world", "[SEP]"]]
        with pytest.raises(ServerError, match=r"HTTP 422: texts\[1\] is empty") as caught:
            client.encode(["cat", " "])
        assert caught.value.status == 422
        with pytest.raises(ServerError, match="HTTP 409"):
            client.predict(["cat"])
        with pytest.raises(ServerError, match="HTTP 404: no search index"):
            client.search("cat")
        with pytest.raises(TypeError, match="list of texts"):
            client.encode("one string")


def test_wrong_key_is_a_clear_error(server):
    with Client(server.url, timeout=30, api_key="wrong") as client:
        with pytest.raises(ServerError, match="HTTP 401: missing or wrong API key") as caught:
            client.encode(["cat"])
        assert caught.value.status == 401


def test_refused_connection():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]         # closed again below: nothing listens there
    with Client(f"http://127.0.0.1:{port}", timeout=5) as client:
        with pytest.raises(ServerUnavailable, match="cannot reach the server"):
            client.health()


def test_silent_server_times_out_instead_of_hanging():
    with socket.socket() as silent:           # accepts connections (backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        with Client(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.3) as client:
            with pytest.raises(ServerTimeout, match="no answer within 0.3 s"):
                client.health()
