"""Slow and idle clients against a real server on a real socket: deadlines, size and connection caps."""
from __future__ import annotations

import select
import socket
import time

import httpx
import pytest

from servers import start


@pytest.fixture(scope="module", params=["auto", "h11"])
def strict_server(request, tiny_model_dir):
    """uvicorn's own choice of HTTP parser (httptools when installed), and h11, its pure-Python fallback."""
    from bertkit.serve import connections
    from uvicorn.protocols.http.h11_impl import H11Protocol

    with pytest.MonkeyPatch.context() as patch:
        if request.param == "h11":
            patch.setattr(connections, "AutoHTTPProtocol", H11Protocol)
        running = start(tiny_model_dir, header_timeout_s=1.0, body_timeout_s=1.0, keep_alive_timeout_s=1.0,
                        max_header_bytes=4096)
    yield running
    running.stop()


def connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket timeout is 30 s)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    sock.close()
    return b"".join(chunks)


def read_response(sock: socket.socket) -> bytes:
    """One whole HTTP response (headers, then Content-Length bytes of body): TCP may split it across reads."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        body += chunk
    assert len(body) == length, "more bytes than one response"
    return head + b"\r\n\r\n" + body


def honest_encode(server) -> None:
    answer = httpx.post(f"{server.url}/encode", json={"texts": ["hello world"]}, timeout=30)
    assert answer.status_code == 200 and len(answer.json()["results"]) == 1


def test_headers_sent_one_byte_at_a_time_are_cut_off_while_honest_requests_succeed(strict_server):
    request = b"POST /encode HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 2000
    sock = connect(strict_server)
    sent = 0
    for byte in request:            # 2,000 bytes, 10 ms apart: 20 s of headers if the server waited for them
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += 1
        if sent == 20:
            honest_encode(strict_server)          # the server answers others while the slow client dribbles
        if select.select([sock], [], [], 0.01)[0]:
            break                                 # the server answered (and closed)
    answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 408") and b"request headers not complete within 1 s" in answer
    assert sent < len(request)                    # cut off long before the client was done
    honest_encode(strict_server)
    assert httpx.get(f"{strict_server.url}/status", timeout=30).json()["counters"]["slow_clients_closed"] >= 1


def test_a_connection_that_sends_nothing_is_closed(strict_server):
    answer = read_to_end(connect(strict_server))
    assert answer.startswith(b"HTTP/1.1 408")


def test_a_body_that_never_arrives_gets_408(strict_server):
    sock = connect(strict_server)
    sock.sendall(b"POST /encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                 b'{"texts"')
    answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 408") and b"request body not complete within 1 s" in answer
    honest_encode(strict_server)


@pytest.mark.parametrize("pad, end", [(10_000, b"\r\n\r\n"), (20_000_000, b"")])
def test_oversized_headers_get_431(strict_server, pad, end):
    """Headers over the cap, whole or never ending (the server must not buffer 20 MB of them)."""
    sock = connect(strict_server)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * pad + end)
    except (BrokenPipeError, ConnectionResetError):
        pass                                      # closed while we were still sending
    assert read_to_end(sock).startswith(b"HTTP/1.1 431")


def test_a_body_sent_after_an_early_413_is_not_taken_for_headers(tiny_model_dir):
    server = start(tiny_model_dir, max_request_bytes=1000, max_header_bytes=4096)
    try:
        sock = connect(server)
        sock.sendall(b"POST /encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 50000\r\n\r\n")
        first = read_response(sock)               # refused on its announced length, before the body
        assert first.startswith(b"HTTP/1.1 413")
        sock.sendall(b"a" * 50_000)                # the body after all, read as body, not as the next headers
        time.sleep(0.3)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        sock.close()
    finally:
        server.stop()


def test_an_idle_keep_alive_connection_is_closed(strict_server):
    sock = connect(strict_server)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = read_to_end(sock)                    # one response, then the server closes the idle connection
    assert answer.startswith(b"HTTP/1.1 200") and answer.count(b"HTTP/1.1") == 1


def test_connections_beyond_the_cap_get_503_at_once(tiny_model_dir):
    server = start(tiny_model_dir, max_connections=3)
    try:
        held = [connect(server) for _ in range(3)]
        time.sleep(0.2)                           # let the server register them
        extra = connect(server)
        answer = read_to_end(extra)
        assert answer.startswith(b"HTTP/1.1 503") and b"at most 3 connections" in answer
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:        # the server notices the closed ones, then serves again
            try:
                honest_encode(server)
                break
            except (httpx.HTTPError, AssertionError):
                time.sleep(0.1)
        honest_encode(server)
        status = httpx.get(f"{server.url}/status", timeout=30).json()
        assert status["counters"]["connections_refused"] >= 1 and status["limits"]["max_connections"] == 3
    finally:
        server.stop()
