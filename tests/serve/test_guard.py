"""API key: 401 on every endpoint but /health, in each accepted header form; request-size limit."""
from __future__ import annotations

import base64

import httpx
import pytest

from servers import API_KEY

ENDPOINTS = [("POST", "/encode", {"texts": ["cat"]}), ("POST", "/v1/embeddings", {"input": "cat"}),
             ("POST", "/tokenize", {"texts": ["cat"]}), ("POST", "/predict", {"texts": ["cat"]}),
             ("POST", "/search", {"query": "cat"}), ("GET", "/status", None), ("GET", "/", None),
             ("GET", "/openapi.json", None), ("GET", "/docs", None), ("GET", "/no-such-page", None)]


@pytest.mark.parametrize("method, path, body", ENDPOINTS)
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"X-API-Key": API_KEY + "x"},
                                     {"Authorization": API_KEY}, {"Authorization": "Basic !!notbase64"}])
def test_missing_or_wrong_key_is_401(keyed_server, method, path, body, headers):
    answer = httpx.request(method, keyed_server.url + path, json=body, headers=headers, timeout=30)
    assert answer.status_code == 401, answer.text
    assert "API key" in answer.json()["detail"] and "WWW-Authenticate" in answer.headers


def test_health_needs_no_key(keyed_server):
    assert httpx.get(keyed_server.url + "/health", timeout=30).json() == {"status": "ok"}


@pytest.mark.parametrize("headers", [
    {"Authorization": f"Bearer {API_KEY}"},
    {"X-API-Key": API_KEY},
    {"Authorization": "Basic " + base64.b64encode(f"anyone:{API_KEY}".encode()).decode()},
])
def test_right_key_in_each_form(keyed_server, headers):
    answer = httpx.post(keyed_server.url + "/encode", json={"texts": ["cat"]}, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text


def test_page_asks_the_browser_for_the_key(keyed_server):
    answer = httpx.get(keyed_server.url + "/", timeout=30)
    assert answer.status_code == 401 and answer.headers["WWW-Authenticate"].startswith("Basic")


def test_status_hides_the_key(keyed_server):
    status = httpx.get(keyed_server.url + "/status", headers={"X-API-Key": API_KEY}, timeout=30).json()
    assert status["config"]["api_key"] == "set" and API_KEY not in str(status)
