"""The TEI/OpenAI-style routes: /v1/embeddings `dimensions` and base64, /similarity, /metrics; checked against
the model run in-process."""
from __future__ import annotations

import base64
import re

import httpx
import numpy as np
import pytest

import bertkit

TEXTS = ["the cat sat on the mat", "hello world", "你好 世界"]


@pytest.fixture(scope="module")
def local_model(tiny_model_dir):
    return bertkit.load(tiny_model_dir)


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_dimensions_truncates_and_renormalizes(http, local_model):
    full = local_model.encode(TEXTS, normalize=True)
    width = full.shape[1]
    for dimensions in (8, width - 1):
        answer = http.post("/v1/embeddings", json={"input": TEXTS, "dimensions": dimensions})
        assert answer.status_code == 200, answer.text
        served = np.asarray([d["embedding"] for d in answer.json()["data"]], dtype=np.float32)
        assert served.shape == (len(TEXTS), dimensions)
        np.testing.assert_allclose(served, _unit(full[:, :dimensions]), atol=1e-5)
    same = http.post("/v1/embeddings", json={"input": TEXTS, "dimensions": width}).json()
    np.testing.assert_allclose([d["embedding"] for d in same["data"]], full, atol=1e-5)
    over = http.post("/v1/embeddings", json={"input": TEXTS, "dimensions": width + 1})
    assert over.status_code == 422 and f"{width}" in over.json()["detail"]
    assert http.post("/v1/embeddings", json={"input": TEXTS, "dimensions": 0}).status_code == 422


def test_base64_round_trip_is_exact(http):
    """base64 carries the same float32 bits the float answer carries (little-endian, as OpenAI sends)."""
    for body in ({"input": TEXTS}, {"input": TEXTS, "dimensions": 8}):
        floats = http.post("/v1/embeddings", json=body).json()["data"]
        packed = http.post("/v1/embeddings", json={**body, "encoding_format": "base64"}).json()["data"]
        for f, p in zip(floats, packed):
            raw = base64.b64decode(p["embedding"])
            assert len(raw) == 4 * len(f["embedding"])
            decoded = np.frombuffer(raw, dtype="<f4")
            assert np.array_equal(decoded, np.asarray(f["embedding"], dtype=np.float32))


def test_similarity_is_cosine_of_model_vectors(http, local_model):
    answer = http.post("/similarity", json={"inputs": {"source_sentence": "the cat", "sentences": TEXTS}})
    assert answer.status_code == 200, answer.text
    vectors = local_model.encode(["the cat", *TEXTS], normalize=True)
    np.testing.assert_allclose(answer.json(), vectors[1:] @ vectors[0], atol=1e-5)
    empty = http.post("/similarity", json={"inputs": {"source_sentence": "the cat", "sentences": ["a", " "]}})
    assert empty.status_code == 422 and "inputs.sentences[1]" in empty.json()["detail"]
    blank = http.post("/similarity", json={"inputs": {"source_sentence": "", "sentences": ["a"]}})
    assert blank.status_code == 422 and "source_sentence" in blank.json()["detail"]


def _samples(text: str) -> dict[str, float]:
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_metrics_counters_move(http):
    before_answer = http.get("/metrics")
    assert before_answer.status_code == 200
    assert before_answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    before = _samples(before_answer.text)
    tokens = 0
    for texts in (TEXTS, TEXTS[:1]):
        tokens += http.post("/encode", json={"texts": texts}).json()["tokens"]
    assert http.post("/encode", json={"texts": [" "]}).status_code == 422
    after = _samples(http.get("/metrics").text)

    def moved(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert moved('bertkit_requests_total{route="/encode",status="200"}') == 2
    assert moved('bertkit_requests_total{route="/encode",status="422"}') == 1
    assert moved("bertkit_tokens_total") == tokens
    assert moved("bertkit_texts_total") == len(TEXTS) + 1
    assert moved("bertkit_queue_seconds_count") == len(TEXTS) + 1          # one wait per text
    batches = moved("bertkit_batch_size_count")
    assert 2 <= batches == moved("bertkit_batches_total")                 # each request ran alone
    assert moved("bertkit_batch_size_sum") == len(TEXTS) + 1
    assert moved('bertkit_request_duration_seconds_count{route="/encode"}') == 3
    assert after['bertkit_queue_seconds_bucket{le="+Inf"}'] == after["bertkit_queue_seconds_count"]
    assert after["bertkit_tokens_per_second"] > 0
    # the model thread's own CPU time in its passes: positive, and never more than their wall time
    assert 0 < moved("bertkit_model_cpu_seconds_total") <= moved("bertkit_model_busy_seconds_total") + 1e-3
    assert re.search(r'^bertkit_info\{.*precision="fp32".*\} 1$', http.get("/metrics").text, re.M)


def test_new_routes_need_the_key(keyed_server):
    for method, path, body in (("GET", "/metrics", None), ("POST", "/similarity",
                               {"inputs": {"source_sentence": "a", "sentences": ["b"]}})):
        assert httpx.request(method, keyed_server.url + path, json=body).status_code == 401
    from servers import API_KEY
    assert httpx.get(keyed_server.url + "/metrics", headers={"X-API-Key": API_KEY}).status_code == 200
