"""A lean load generator for benchmarks/serve.py: N keep-alive HTTP/1.1 connections on one asyncio loop.

The clients run on the same CPU as the server, so every millisecond they spend is taken from the server.
Thirty `http.client` threads (the first version) paid for thread switches, the GIL and a JSON encode per
request; here every request's bytes are built once before the clock starts, a response is read with one
header scan and one `readexactly`, and its vectors are decoded with orjson + numpy. Each answer is still
checked: status 200, one finite vector per text, and (`expected`) the first vector's cosine to in-process.
`run_load` also reports the CPU seconds this process spent, so the client's share of the machine is known.
"""
from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time

import numpy as np

try:
    import orjson
    loads = orjson.loads
except ImportError:  # pragma: no cover - orjson comes with bertkit[serve]
    loads = json.loads


def request_bytes(port: int, texts: list[str]) -> bytes:
    body = json.dumps({"texts": texts, "truncate": True, "encoding_format": "base64"}).encode()
    head = (f"POST /encode HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode("ascii") + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    at = lower.find(b"content-length:")
    if at < 0:
        raise ValueError(f"HTTP {status} without content-length")
    length = int(lower[at + 15:lower.find(b"\r\n", at)])
    return status, await reader.readexactly(length)


def check(payload: bytes, rows: list[int], expected: np.ndarray | None) -> float:
    """Raise on a malformed answer; return the first vector's cosine to in-process (1.0 when not checked)."""
    results = loads(payload)["results"]
    if len(results) != len(rows):
        raise ValueError(f"{len(results)} vectors for {len(rows)} texts")
    vectors = np.frombuffer(b"".join(base64.b64decode(v) for v in results), dtype="<f4").reshape(len(rows), -1)
    if not np.isfinite(vectors).all():
        raise ValueError("non-finite vectors")
    if expected is None:
        return 1.0
    reference = expected[rows[0]]
    return float(vectors[0] @ reference / (np.linalg.norm(vectors[0]) * np.linalg.norm(reference)))


async def _load(port: int, texts: list[str], clients: int, batch: int, seconds: float,
                expected: np.ndarray | None, repeat: bool) -> dict:
    chunks = [list(range(i, min(i + batch, len(texts)))) for i in range(0, len(texts), batch)]
    requests = [request_bytes(port, [texts[i] for i in rows]) for rows in chunks]
    order = itertools.cycle(range(len(chunks))) if repeat else iter(range(len(chunks)))
    latencies: list[float] = []
    errors: list[str] = []
    done_texts = [0]
    worst = [1.0]
    stop_at = time.perf_counter() + seconds

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < stop_at:
                k = next(order, None)          # one event loop: no lock needed
                if k is None:
                    return
                started = time.perf_counter()
                try:
                    writer.write(requests[k])
                    status, payload = await read_response(reader)
                    elapsed = time.perf_counter() - started
                    if status != 200:
                        raise ValueError(f"HTTP {status}: {payload[:200]!r}")
                    worst[0] = min(worst[0], check(payload, chunks[k], expected))
                except Exception as error:  # noqa: BLE001 - every failure is counted and reported
                    errors.append(str(error)[:200] or type(error).__name__)
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                latencies.append(elapsed)
                done_texts[0] += len(chunks[k])
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - started
    p50, p99 = np.percentile(np.asarray(latencies) * 1000, [50, 99]) if latencies else (float("nan"),) * 2
    return {"clients": clients, "texts_per_request": batch, "texts": done_texts[0], "requests": len(latencies),
            "seconds": round(wall, 2), "texts_per_s": round(done_texts[0] / wall, 1),
            "p50_ms": round(float(p50), 1), "p99_ms": round(float(p99), 1), "errors": len(errors),
            "first_errors": errors[:3], "worst_cosine_vs_in_process": round(worst[0], 6)}


def run_load(port: int, texts: list[str], clients: int, batch: int, seconds: float,
             expected: np.ndarray | None, repeat: bool = True) -> dict:
    """`clients` connections, each posting its next slice of `batch` texts (cycling through the list when
    `repeat`) with one request in flight, until `seconds` pass; what they measured, plus `client_cpu_s`."""
    cpu = time.process_time()
    result = asyncio.run(_load(port, texts, clients, batch, seconds, expected, repeat))
    result["client_cpu_s"] = round(time.process_time() - cpu, 2)
    return result
