"""Bad input and limits: each case gets a defined 4xx with a message that names the problem, never a 500."""
from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import pytest

from servers import start

LONG = " ".join(["cat"] * 100)     # 102 tokens; the tiny model takes 64


@pytest.mark.parametrize("body, status, words", [
    ({"texts": [""]}, 422, "texts[0] is empty"),
    ({"texts": ["hello", "   \t\n"]}, 422, "texts[1] is empty"),
    ({"texts": ["hello |||   "]}, 422, "texts[0] is a pair with an empty side"),
    ({"texts": ["hello", LONG]}, 422, "texts[1] has 102 tokens, more than the model's limit of 64"),
    ({"texts": [[]], "is_tokenized": True}, 422, "texts[0] has no tokens"),
    ({"texts": [["cat"] * 70], "is_tokenized": True}, 422, "texts[0] has 72 tokens"),
    ({"texts": ["cat"], "is_tokenized": True}, 422, "is a string but is_tokenized is true"),
    ({"texts": [["cat"]]}, 422, "is a list of tokens"),
    ({"texts": []}, 422, "texts is empty"),
    ({"texts": "hello"}, 422, "texts: Input should be a valid list"),
    ({"texts": [1, 2]}, 422, "texts.0"),
    ({"texts": None}, 422, "texts"),
    ({}, 422, "texts: Field required"),
    ({"texts": ["a"], "pooling": "median"}, 422, "pooling"),
    ({"texts": ["a"], "normalise": True}, 422, "normalise: Extra inputs are not permitted"),
    ({"texts": ["a"], "truncate": "maybe"}, 422, "truncate"),
    ({"texts": ["cat"] * 9}, 413, "at most 8 per request"),
])
def test_encode_bad_input(http, body, status, words):
    answer = http.post("/encode", json=body)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["detail"]


def test_invalid_json_and_wrong_content(http):
    answer = http.post("/encode", content=b'{"texts": ["a"', headers={"Content-Type": "application/json"})
    assert answer.status_code == 422 and "not valid JSON" in answer.json()["detail"]
    answer = http.post("/encode", content=b"\xff\xfe\x00garbage", headers={"Content-Type": "application/json"})
    assert answer.status_code == 422
    answer = http.post("/encode", content=b"texts=a", headers={"Content-Type": "text/plain"})
    assert answer.status_code == 422
    answer = http.post("/encode", content=b'{"texts": [NaN]}', headers={"Content-Type": "application/json"})
    assert answer.status_code == 422


def test_body_over_byte_limit_is_413(http):
    answer = http.post("/encode", json={"texts": ["cat " * 20000]})      # ~80 kB > the 64 kB limit
    assert answer.status_code == 413 and "65536 bytes" in answer.json()["detail"]


@pytest.mark.parametrize("path, body, status, words", [
    ("/v1/embeddings", {"input": ""}, 422, "input[0] is empty"),
    ("/v1/embeddings", {"input": []}, 422, "input is empty"),
    ("/v1/embeddings", {"input": [[1, 2], "a"]}, 422, "input"),
    ("/v1/embeddings", {"input": [10**9]}, 422, "outside 0.."),
    ("/v1/embeddings", {"input": [[]]}, 422, "empty token list"),
    ("/v1/embeddings", {"input": "cat", "dimensions": 33}, 422, "more than this model's 32"),
    ("/v1/embeddings", {"input": ["a"] * 9}, 413, "at most 8"),
    ("/similarity", {"inputs": {"source_sentence": "a", "sentences": ["a"] * 9}}, 413, "at most 8"),
    ("/tokenize", {"texts": "a"}, 422, "texts"),
    ("/tokenize", {"texts": ["a"] * 9}, 413, "at most 8"),
    ("/search", {"query": "  "}, 422, "query is empty"),
    ("/search", {"query": "cat", "k": 0}, 422, "k"),
    ("/search", {"query": "cat", "k": 6}, 413, "limit of 5"),
    ("/search", {"query": "cat", "filter": {"bad\"field": 1}}, 422, "filter field"),
    ("/search", {"query": 5}, 422, "query"),
])
def test_other_endpoints_bad_input(http, path, body, status, words):
    answer = http.post(path, json=body)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["detail"]


def test_long_query_is_truncated_not_refused(http):
    answer = http.post("/search", json={"query": LONG, "k": 2})
    assert answer.status_code == 200 and answer.json()["query_truncated"] is True


def test_unknown_path_and_method(http):
    assert http.get("/nope").status_code == 404
    assert http.get("/encode").status_code == 405


def test_no_nan_vectors_even_for_odd_text(http):
    odd = ["[PAD]", "[SEP] [CLS]", "\u200b\u200bcat", "🙂🙂🙂", "x" * 200]
    answer = http.post("/encode", json={"texts": odd, "truncate": True, "normalize": True})
    assert answer.status_code == 200, answer.text
    assert np.isfinite(np.asarray(answer.json()["results"])).all()


def test_timeout_and_busy_answer_503(tiny_model_dir):
    server = start(tiny_model_dir, request_timeout_s=0.3, max_queued_texts=4)
    slow = server.service.runner.run_batch

    def run_slowly(kind, payloads):
        time.sleep(1.0)
        return slow(kind, payloads)

    server.service.batcher.run_batch = run_slowly
    try:
        answer = httpx.post(f"{server.url}/encode", json={"texts": ["cat"]}, timeout=10)
        assert answer.status_code == 503 and "timed out after 0.3 s" in answer.json()["detail"]
        assert answer.headers["Retry-After"] == "1"
        answer = httpx.post(f"{server.url}/encode", json={"texts": ["cat"] * 5}, timeout=10)
        assert answer.status_code == 503 and "server busy" in answer.json()["detail"]

        async def burst():
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
                return await asyncio.gather(*(client.post("/encode", json={"texts": ["cat", "dog"]})
                                              for _ in range(6)))
        statuses = {a.status_code for a in asyncio.run(burst())}
        assert statuses <= {200, 503} and 503 in statuses
        counters = httpx.get(f"{server.url}/status", timeout=10).json()["counters"]
        assert counters["timeouts"] >= 1 and counters["rejected_busy"] >= 1
    finally:
        server.stop()


def test_model_failure_is_503_and_the_server_recovers(tiny_model_dir):
    server = start(tiny_model_dir)
    working = server.service.batcher.run_batch

    def out_of_memory(kind, payloads):
        raise RuntimeError("CUDA out of memory (simulated)")

    try:
        server.service.batcher.run_batch = out_of_memory
        answer = httpx.post(f"{server.url}/encode", json={"texts": ["cat"]}, timeout=10)
        assert answer.status_code == 503 and "out of memory (simulated)" in answer.json()["detail"]
        server.service.batcher.run_batch = working
        assert httpx.post(f"{server.url}/encode", json={"texts": ["cat"]}, timeout=10).status_code == 200
        assert httpx.get(f"{server.url}/status", timeout=10).json()["counters"]["model_errors"] == 1
    finally:
        server.stop()
