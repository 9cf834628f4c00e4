"""POST /search under attack: injection through filter field names, and a search thread that is held."""
from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

from bertkit.serve.config import ServeConfig

from bertkit.serve.server import build_service
from bertkit.serve.app import create_app
from servers import DOCUMENTS

BYPASS = "' || char(34)) IS NULL OR 1=1 OR (1 = '"
RECURSIVE = ("' || char(34)) IS NULL OR (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) "
             "SELECT max(x) FROM c) OR (1 = '")


@pytest.mark.parametrize("field", [BYPASS, RECURSIVE])
def test_sql_in_a_filter_field_gets_422_and_search_keeps_working(http, field):
    answer = http.post("/search", json={"query": "cat", "k": 5, "filter": {field: "no such value"}})
    assert answer.status_code == 422, answer.text
    assert "metadata field name" in answer.json()["detail"]
    kept = http.post("/search", json={"query": DOCUMENTS[1][1], "k": 5, "filter": {"kind": "greeting"}})
    assert kept.status_code == 200
    assert {hit["id"] for hit in kept.json()["results"]} == {"d2", "d4"}


def test_a_held_search_thread_times_out_requests_and_health_says_so(tiny_model_dir, index_dir):
    service = build_service(ServeConfig(model=str(tiny_model_dir), index=str(index_dir), request_timeout_s=0.5))
    release, calls = threading.Event(), []
    real_search = service.index.index.search

    def held_search(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            release.wait(60)        # a search that ignores its deadline (no SQL for SQLite to interrupt)
        return real_search(*args, **kwargs)

    service.index.index.search = held_search
    with TestClient(create_app(service)) as client:
        assert client.get("/health").json() == {"status": "ok"}
        first = client.post("/search", json={"query": "cat"})
        assert first.status_code == 503 and "limit 0.5 s" in first.json()["detail"]
        assert first.headers["retry-after"] == "1"
        queued = client.post("/search", json={"query": "dog"})   # waits behind the held one, then gives up
        assert queued.status_code == 503 and "waiting for the search thread" in queued.json()["detail"]
        deadline = time.monotonic() + 30
        while (health := client.get("/health")).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert health.status_code == 503 and health.json()["status"] == "unhealthy"
        assert "search thread" in health.json()["detail"]
        assert client.get("/status").json()["index"]["running_s"] > 0.5
        assert client.post("/encode", json={"texts": ["hello"]}).status_code == 200   # the model still answers
        release.set()
        while (health := client.get("/health")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert health.json() == {"status": "ok"}
        answer = client.post("/search", json={"query": DOCUMENTS[1][1], "k": 1})
        assert answer.status_code == 200 and answer.json()["results"][0]["id"] == "d2"
        status = client.get("/status").json()
        assert status["index"]["timeouts"] == 2 and status["counters"]["timeouts"] == 2
    assert len(calls) == 2       # the request that gave up while queued never ran
    service.close()


@pytest.mark.parametrize("path, body", [
    ("/search", {"query": "cat", "k": 3, "filter": {"kind": 10 ** 26}}),
    ("/search", {"query": "cat", "k": 3, "filter": {"id": -(10 ** 23)}}),
    ("/encode", {"id": 10 ** 31, "texts": ["a"]}),
])
def test_integers_past_64_bits_are_not_a_500(http, path, body):
    """JSON numbers SQLite and the response encoder cannot hold: a 4xx or an answer, never a server error."""
    answer = http.post(path, json=body)
    assert answer.status_code in (200, 422), answer.text
    if answer.status_code == 200 and path == "/search":
        assert answer.json()["results"] == []
    assert http.post("/search", json={"query": "cat", "k": 2}).status_code == 200
