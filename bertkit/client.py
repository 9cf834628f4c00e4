"""A Python client for `bertkit serve`: numpy vectors back, large inputs split, errors instead of hangs.

    client = Client("http://127.0.0.1:8000", timeout=30, api_key="...")
    vectors = client.encode(["first text", "second text"])          # (2, dim) float32

Every call has a timeout. A refused connection, a timeout and an error answer each raise a `ServerError`
subclass whose message says what happened and what to do; a 503 "server busy" answer (queue full) is
retried a few times after the server's Retry-After.
"""
from __future__ import annotations

import base64
import time
from typing import Any, Optional, Sequence

import numpy as np

from bertkit.errors import BertkitError

BUSY_RETRIES = 3


class ServerError(BertkitError):
    """The server answered with an error (status >= 400); `status` and `detail` hold what it said."""

    def __init__(self, message: str, status: Optional[int] = None, detail: Optional[str] = None):
        super().__init__(message)
        self.status, self.detail = status, detail


class ServerUnavailable(ServerError):
    """No connection: nothing listens at the URL, or the network refused it."""


class ServerTimeout(ServerError):
    """The server did not answer within the client's timeout."""


class Client:
    def __init__(self, url: str = "http://127.0.0.1:8000", timeout: float = 30.0, api_key: Optional[str] = None):
        try:
            import httpx
        except ImportError:
            raise BertkitError("the client needs httpx: pip install 'bertkit[serve]'") from None
        self.url = url.rstrip("/")
        self.timeout = timeout
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.url, timeout=timeout, headers=headers)
        self._httpx = httpx
        self._status: Optional[dict] = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- transport ---------------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Optional[dict] = None) -> Any:
        httpx = self._httpx
        for attempt in range(BUSY_RETRIES + 1):
            try:
                response = self._http.request(method, path, json=body)
            except httpx.TimeoutException:
                raise ServerTimeout(f"{self.url}{path}: no answer within {self.timeout:g} s; the server may be "
                                    "overloaded or stuck; pass a larger timeout= or send fewer texts") from None
            except httpx.TransportError as err:
                raise ServerUnavailable(f"{self.url}{path}: cannot reach the server ({err}); is `bertkit serve` "
                                        "running at that address?") from None
            # Only "busy" (queue full) is worth retrying at once; a timed-out wait already took its time.
            if response.status_code == 503 and attempt < BUSY_RETRIES and _detail(response).startswith("server busy"):
                time.sleep(min(float(response.headers.get("Retry-After", 1) or 1), 5.0))
                continue
            break
        if response.status_code >= 400:
            detail = _detail(response)
            raise ServerError(f"{self.url}{path}: HTTP {response.status_code}: {detail}",
                              status=response.status_code, detail=detail)
        return response.json()

    # --- server facts ------------------------------------------------------------------------------------
    def health(self) -> dict:
        return self._request("GET", "/health")

    def status(self) -> dict:
        self._status = self._request("GET", "/status")
        return self._status

    @property
    def limits(self) -> dict:
        if self._status is None:
            self.status()
        return self._status["limits"]

    # --- calls -------------------------------------------------------------------------------------------
    def _chunks(self, texts: Sequence[Any]) -> list[list[Any]]:
        """Slices within the published per-request text count and (with room for JSON) byte size."""
        if isinstance(texts, str):
            raise TypeError("pass a list of texts, not one string: encode([text])")
        max_texts = int(self.limits["max_request_texts"])
        max_bytes = int(self.limits["max_request_bytes"]) // 2
        chunks: list[list[Any]] = [[]]
        size = 0
        for text in texts:
            parts = text.values() if isinstance(text, dict) else [text]
            length = sum(len(str(part).encode("utf-8")) + 16 for part in parts)
            if chunks[-1] and (len(chunks[-1]) >= max_texts or size + length > max_bytes):
                chunks.append([])
                size = 0
            chunks[-1].append(text)
            size += length
        return chunks if chunks[0] else []

    def encode(self, texts: Sequence[str], pooling: Optional[str] = None, normalize: Optional[bool] = None,
               truncate: bool = False) -> np.ndarray:
        """(N, dim) float32, in input order. Defaults (pooling, normalize) are the served model's."""
        parts = []
        for chunk in self._chunks(texts):
            body = {"texts": chunk, "truncate": truncate, "encoding_format": "base64"}
            if pooling is not None:
                body["pooling"] = pooling
            if normalize is not None:
                body["normalize"] = normalize
            answer = self._request("POST", "/encode", body)
            parts.extend(np.frombuffer(base64.b64decode(v), dtype="<f4") for v in answer["results"])
        if not parts:
            dimension = self.status()["model"]["dimension"]
            return np.zeros((0, dimension), dtype=np.float32)
        return np.stack(parts).astype(np.float32, copy=False)

    def predict(self, texts: Sequence[Any], truncate: bool = False) -> list[dict]:
        """One prediction per text from the served model's fine-tuned head (see POST /predict).

        A question-answering model takes {"question", "context"} dicts or (question, context) pairs and gives
        {"answer", "start", "end", "score", "null_score"} per item, offsets into the context.
        """
        if isinstance(texts, (str, dict)):
            raise TypeError("pass a list of inputs, not one: predict([item])")
        items = [{"question": t[0], "context": t[1]} if isinstance(t, (tuple, list)) else t for t in texts]
        out: list[dict] = []
        for chunk in self._chunks(items):
            out.extend(self._request("POST", "/predict", {"texts": chunk, "truncate": truncate})["predictions"])
        return out

    def search(self, query: str, k: int = 10, filter: Optional[dict] = None) -> list[dict]:
        """Ranked hits [{id, score, text, metadata}] from the server's index."""
        body: dict[str, Any] = {"query": query, "k": k}
        if filter:
            body["filter"] = filter
        return self._request("POST", "/search", body)["results"]

    def tokenize(self, texts: Sequence[str]) -> dict:
        out: dict[str, list] = {}
        for chunk in self._chunks(texts):
            for key, value in self._request("POST", "/tokenize", {"texts": chunk}).items():
                if isinstance(value, list):
                    out.setdefault(key, []).extend(value)
        return out


def _detail(response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = None
    return str(detail) if detail else (response.text[:200] or response.reason_phrase)
