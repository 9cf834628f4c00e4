"""Counters and latency percentiles for GET /status. Touched only on the event loop: no locks needed."""
from __future__ import annotations

import time
from collections import Counter, deque

import numpy as np

from bertkit.serve.metrics import SECONDS_BUCKETS, Histogram

LATENCY_WINDOW = 10_000   # the most recent requests that the percentiles describe


class ServerStats:
    def __init__(self) -> None:
        self.started = time.time()
        self.requests: Counter[str] = Counter()       # by endpoint
        self.responses: Counter[int] = Counter()      # by HTTP status
        self.by_route: Counter[tuple[str, int]] = Counter()   # (endpoint, status): what /metrics counts
        self.durations: dict[str, Histogram] = {}     # seconds per request, by endpoint
        self.texts = 0
        self.tokens = 0
        self.truncated = 0
        self.rejected_busy = 0
        self.timeouts = 0
        self.non_finite = 0
        self.model_errors = 0
        self.connections_refused = 0      # over max_connections
        self.slow_clients_closed = 0      # headers late or too large (408 / 431)
        self.body_timeouts = 0            # body late (408)
        self._latency_ms: dict[str, deque] = {}

    def record(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests[endpoint] += 1
        self.responses[status] += 1
        self.by_route[(endpoint, status)] += 1
        self.durations.setdefault(endpoint, Histogram(SECONDS_BUCKETS)).observe(seconds)
        self._latency_ms.setdefault(endpoint, deque(maxlen=LATENCY_WINDOW)).append(seconds * 1000.0)

    def latency(self) -> dict[str, dict[str, float]]:
        report = {}
        for endpoint, values in self._latency_ms.items():
            if values:
                p50, p90, p99 = np.percentile(np.fromiter(values, dtype=np.float64), [50, 90, 99])
                report[endpoint] = {"count": len(values), "p50_ms": round(float(p50), 2),
                                    "p90_ms": round(float(p90), 2), "p99_ms": round(float(p99), 2)}
        return report

    def uptime(self) -> float:
        return time.time() - self.started

    def as_dict(self) -> dict:
        return {"uptime_s": round(self.uptime(), 1),
                "requests": dict(self.requests),
                "responses": {str(k): v for k, v in sorted(self.responses.items())},
                "texts": self.texts, "tokens": self.tokens, "truncated": self.truncated,
                "rejected_busy": self.rejected_busy, "timeouts": self.timeouts, "non_finite": self.non_finite,
                "model_errors": self.model_errors, "connections_refused": self.connections_refused,
                "slow_clients_closed": self.slow_clients_closed, "body_timeouts": self.body_timeouts}
