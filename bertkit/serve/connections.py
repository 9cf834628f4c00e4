"""Connection limits for slow or idle clients: what uvicorn alone does not bound.

uvicorn closes a keep-alive connection that stays idle between requests (`timeout_keep_alive`), but a client
that sends its request headers one byte at a time, or connects and sends nothing, holds its connection
(and a file descriptor) for as long as it likes; so does one that announces a body and never sends it.
This module adds, around uvicorn's own HTTP protocol (httptools or h11, whichever uvicorn picks):

- a header deadline: the request line and headers must be complete within `header_timeout_s` of the
  connection opening or of the previous response (so idle keep-alive time counts too); else 408 and close;
- a header size cap (`max_header_bytes`): more before the headers end is 431 and close (uvicorn's httptools
  parser takes headers of any size, 20 MB in a test; with h11, its own `max_incomplete_event_size` does this);
- a connection cap (`max_connections`): a connection beyond it gets 503 at once and is closed.

The body deadline (`body_timeout_s`, 408) lives in the ASGI guard (guard.py), which reads every body.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from bertkit.serve.stats import ServerStats

REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float
    max_header_bytes: int
    max_connections: int
    keep_alive_timeout_s: float


def raw_response(status: int, detail: str) -> bytes:
    """A complete HTTP/1.1 response that ends the connection, for use below the ASGI app."""
    body = json.dumps({"detail": detail}).encode()
    head = (f"HTTP/1.1 {status} {REASONS[status]}\r\ncontent-type: application/json\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n" + ("retry-after: 1\r\n" if status == 503 else "") + "\r\n")
    return head.encode("ascii") + body


def guarded_protocol(limits: ConnectionLimits, stats: ServerStats) -> type:
    """uvicorn's HTTP protocol class with the limits above (pass it as uvicorn's `http`)."""

    class GuardedHTTPProtocol(AutoHTTPProtocol):
        _deadline = None
        _waiting_after = None     # the request cycle before the headers being waited for (None: the first)
        _in_headers = False       # httptools: between the start of a request and the end of its headers
        _header_bytes = 0

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                stats.connections_refused += 1
                self._end(503, f"this server holds at most {limits.max_connections} connections "
                               "(max_connections in GET /status); retry shortly")
                return
            self._await_headers()

        def _await_headers(self) -> None:
            self._cancel_deadline()
            self._waiting_after = self.cycle
            self._deadline = self.loop.call_later(limits.header_timeout_s, self._headers_late)

        def _waiting_for_headers(self) -> bool:
            # A new cycle appears once a request's headers are parsed; until its response completes the
            # connection is busy with that request, not waiting for the next one.
            return self.cycle is self._waiting_after and (self.cycle is None or self.cycle.response_complete)

        def _headers_late(self) -> None:
            self._deadline = None
            if self._waiting_for_headers() and not self.transport.is_closing():
                stats.slow_clients_closed += 1
                self._end(408, f"request headers not complete within {limits.header_timeout_s:g} s")

        def _cancel_deadline(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _end(self, status: int, detail: str) -> None:
            self._cancel_deadline()
            self.transport.write(raw_response(status, detail))
            self.transport.close()

        # httptools calls these two around every request's headers (h11 never does; it caps sizes itself).
        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_headers, self._header_bytes = True, 0

        def on_headers_complete(self) -> None:
            self._in_headers = False
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._in_headers and not self.transport.is_closing():
                # Whole chunks count: the one that starts a request may also end the previous body, so the
                # count can run a chunk high, never low.
                self._header_bytes += len(data)
                if self._header_bytes > limits.max_header_bytes:
                    stats.slow_clients_closed += 1
                    self._end(431, f"request headers over {limits.max_header_bytes} bytes")

        def send_400_response(self, msg: str) -> None:
            # h11 ends a header block over its max_incomplete_event_size (= max_header_bytes) with a 400:
            # answer 431 as for httptools. (httptools protocols have no `conn`.)
            conn = getattr(self, "conn", None)
            if conn is not None and len(conn.trailing_data[0]) > limits.max_header_bytes:
                stats.slow_clients_closed += 1
                self._end(431, f"request headers over {limits.max_header_bytes} bytes")
                return
            super().send_400_response(msg)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_headers()       # the next request on this keep-alive connection

        def connection_lost(self, exc: Optional[Exception]) -> None:
            self._cancel_deadline()
            super().connection_lost(exc)

    return GuardedHTTPProtocol


def uvicorn_options(limits: ConnectionLimits, stats: ServerStats) -> dict:
    """Keyword arguments for uvicorn.run / uvicorn.Config that apply `limits`."""
    return {"http": guarded_protocol(limits, stats), "timeout_keep_alive": limits.keep_alive_timeout_s,
            "h11_max_incomplete_event_size": limits.max_header_bytes}
