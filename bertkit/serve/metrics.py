"""GET /metrics: the server's counters in Prometheus' text exposition format (version 0.0.4).

Written by hand rather than with prometheus_client: a dozen series of counters, gauges and histograms need
~100 lines, not a dependency. Names follow Prometheus' conventions: `_total` counters, `_seconds` units,
cumulative `le` buckets ending in +Inf. Throughput is `bertkit_tokens_total` (use `rate()`), with a
`bertkit_tokens_per_second` gauge over the last minute for dashboards without PromQL.
"""
from __future__ import annotations

import bisect
import math
from typing import Iterable, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Texts per forward pass (the batcher cuts at max_batch_size, 32 by default).
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# Seconds: a text's wait in the queue before its batch starts; a request's whole time in the server.
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Histogram:
    """Cumulative-bucket histogram; the caller serializes observe() (one thread, or under its lock)."""

    def __init__(self, buckets: Sequence[float]):
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)      # the last one: above every bucket (+Inf only)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def samples(self, name: str, labels: str = "") -> list[str]:
        sep = "," if labels else ""
        lines, running = [], 0
        for bound, count in zip((*self.buckets, math.inf), self.counts):
            running += count
            lines.append(f'{name}_bucket{{{labels}{sep}le="{_number(bound)}"}} {running}')
        braces = f"{{{labels}}}" if labels else ""
        lines += [f"{name}_sum{braces} {_number(self.sum)}", f"{name}_count{braces} {self.count}"]
        return lines


def _number(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels(**pairs: object) -> str:
    return ",".join(f'{key}="{_escape(str(value))}"' for key, value in pairs.items())


class Exposition:
    """Builds the text body: one HELP/TYPE header per metric family, then its samples."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[str]) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]

    def scalar(self, name: str, kind: str, help_text: str, value: float) -> None:
        self.family(name, kind, help_text, [f"{name} {_number(value)}"])

    def histogram(self, name: str, help_text: str, histogram: Histogram) -> None:
        self.family(name, "histogram", help_text, histogram.samples(name))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render(stats, batcher: dict, info: dict[str, str]) -> str:
    """The /metrics body from ServerStats, a `Batcher.snapshot()` and the model's description labels."""
    out = Exposition()
    out.family("bertkit_info", "gauge", "The served model (value always 1).", [f"bertkit_info{{{labels(**info)}}} 1"])
    out.scalar("bertkit_uptime_seconds", "gauge", "Seconds since the server started.", stats.uptime())
    out.family("bertkit_requests_total", "counter", "HTTP requests by route and status code.",
               [f"bertkit_requests_total{{{labels(route=route, status=status)}}} {count}"
                for (route, status), count in sorted(stats.by_route.items())])
    errors = {"busy": stats.rejected_busy, "timeout": stats.timeouts, "non_finite": stats.non_finite,
              "model": stats.model_errors, "connection_refused": stats.connections_refused,
              "slow_client": stats.slow_clients_closed, "body_timeout": stats.body_timeouts}
    out.family("bertkit_errors_total", "counter", "Requests refused or failed by the server, by cause (HTTP "
               "4xx answers to bad input are in bertkit_requests_total).",
               [f"bertkit_errors_total{{{labels(kind=kind)}}} {count}" for kind, count in errors.items()])
    out.family("bertkit_request_duration_seconds", "histogram", "Time from request to response, by route.",
               [line for route, histogram in sorted(stats.durations.items())
                for line in histogram.samples("bertkit_request_duration_seconds", labels(route=route))])
    out.scalar("bertkit_texts_total", "counter", "Texts embedded.", stats.texts)
    out.scalar("bertkit_tokens_total", "counter", "Tokens run through the model (all routes, special tokens "
               "included, padding excluded).", batcher["real_tokens"])
    out.scalar("bertkit_padded_tokens_total", "counter", "Tokens computed including padding.",
               batcher["padded_tokens"])
    out.scalar("bertkit_tokens_per_second", "gauge", "Tokens through the model per second over the last minute.",
               batcher["tokens_per_second"])
    out.scalar("bertkit_batches_total", "counter", "Forward passes (micro-batches).", batcher["batches"])
    out.scalar("bertkit_model_busy_seconds_total", "counter", "Seconds the model spent on forward passes.",
               batcher["busy_seconds"])
    out.scalar("bertkit_model_cpu_seconds_total", "counter",
               "CPU seconds the model (its threads or its process) spent on forward passes.", batcher["cpu_seconds"])
    out.histogram("bertkit_batch_size", "Texts per forward pass.", batcher["batch_sizes"])
    out.histogram("bertkit_queue_seconds", "Time a text waited in the queue before its forward pass started.",
                  batcher["queue_seconds"])
    out.scalar("bertkit_queued_texts", "gauge", "Texts waiting for the model now.", batcher["queued"])
    out.scalar("bertkit_in_progress_texts", "gauge", "Texts in a forward pass now.", batcher["in_progress"])
    return out.text()
