"""ASGI middleware in front of every route: API key, header and body size limits, body deadline, per-endpoint
counters and latency.

Plain ASGI rather than Starlette's BaseHTTPMiddleware: it adds no task or stream per request, which matters
when thousands of batch-of-one requests arrive per second.
"""
from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from typing import Optional

from bertkit.serve.stats import ServerStats

OPEN_PATHS = {"/health"}          # load balancers probe it without a key
BROWSER_PATHS = {"/", "/docs"}    # pages: a 401 there makes the browser ask for the key (HTTP Basic)
KNOWN_PATHS = {"/", "/encode", "/v1/embeddings", "/tokenize", "/predict", "/search", "/similarity", "/rerank",
               "/health", "/status", "/metrics", "/openapi.json", "/docs"}
BODY_METHODS = {b"POST", b"PUT", b"PATCH", "POST", "PUT", "PATCH"}


def _header(scope, name: bytes) -> Optional[bytes]:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value
    return None


def presented_key(scope) -> Optional[bytes]:
    """The key from `Authorization: Bearer KEY`, `X-API-Key: KEY` or HTTP Basic (any user, KEY as password).

    Basic is what lets a browser open the web page: it asks for the password once and sends it along.
    """
    direct = _header(scope, b"x-api-key")
    if direct is not None:
        return direct.strip()
    authorization = _header(scope, b"authorization")
    if authorization is None:
        return None
    scheme, _, value = authorization.strip().partition(b" ")
    if scheme.lower() == b"bearer":
        return value.strip()
    if scheme.lower() == b"basic":
        try:
            return base64.b64decode(value.strip(), validate=True).partition(b":")[2]
        except ValueError:
            return None
    return None


async def send_json(send, status: int, content: dict, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(content).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


class BodyTimeout(Exception):
    pass


class GuardMiddleware:
    def __init__(self, app, api_key: Optional[str], max_request_bytes: int, stats: ServerStats,
                 body_timeout_s: Optional[float] = None, max_header_bytes: Optional[int] = None):
        self.app = app
        self.api_key = api_key.encode() if api_key else None
        self.max_request_bytes = max_request_bytes
        self.stats = stats
        self.body_timeout_s = body_timeout_s
        self.max_header_bytes = max_header_bytes   # headers that arrived whole (connections.py caps the rest)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        path = scope["path"]
        status = [500]

        async def send_recording(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if self.max_header_bytes is not None and _header_bytes(scope) > self.max_header_bytes:
                status[0] = 431
                await send_json(send, 431, {"detail": f"request headers over {self.max_header_bytes} bytes"},
                                {"Connection": "close"})
                return
            if self.api_key is not None and path not in OPEN_PATHS and not self._authorized(scope):
                status[0] = 401
                challenge = 'Basic realm="bertkit"' if path in BROWSER_PATHS else 'Bearer realm="bertkit"'
                await send_json(send, 401, {"detail": "missing or wrong API key: send `Authorization: Bearer "
                                                      "KEY` or `X-API-Key: KEY`"}, {"WWW-Authenticate": challenge})
                return
            if scope["method"] in BODY_METHODS:
                try:
                    body = await self._read_body(scope, receive)
                except BodyTimeout:
                    status[0] = 408
                    self.stats.body_timeouts += 1
                    await send_json(send, 408, {"detail": f"request body not complete within {self.body_timeout_s:g} "
                                                          "s of its headers"}, {"Connection": "close"})
                    return
                if body is None:
                    status[0] = 413
                    await send_json(send, 413, {"detail": f"request body over this server's limit of "
                                                          f"{self.max_request_bytes} bytes (max_request_bytes "
                                                          "in GET /status); split the request"})
                    return
                receive = _replay(body, receive)
            await self.app(scope, receive, send_recording)
        finally:
            endpoint = path if path in KNOWN_PATHS else "other"
            self.stats.record(endpoint, status[0], time.perf_counter() - started)

    def _authorized(self, scope) -> bool:
        key = presented_key(scope)
        return key is not None and secrets.compare_digest(key, self.api_key)

    async def _read_body(self, scope, receive) -> Optional[bytes]:
        """The whole body, or None when it is (or announces itself) over the limit; BodyTimeout when it is
        not all there within body_timeout_s."""
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_request_bytes:
            return None
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s if self.body_timeout_s is not None else None
        while True:
            try:
                message = await (asyncio.wait_for(receive(), deadline - loop.time()) if deadline is not None
                                 else receive())
            except asyncio.TimeoutError:
                raise BodyTimeout from None
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_request_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)


def _header_bytes(scope) -> int:
    """The size of the request line and headers as they were sent (': ' and CRLF included)."""
    line = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + 16
    return line + sum(len(name) + len(value) + 4 for name, value in scope.get("headers", ()))


def _replay(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()    # after the body: wait for the disconnect, as the server would

    return replay
