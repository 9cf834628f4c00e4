"""Cross-client batching: one queue of texts, worker threads that run length-sorted micro-batches.

Requests from any number of clients put their items (one per text) in a shared queue and await an
asyncio future; the event loop never runs the model. A worker thread takes the oldest items (up to a few
batches' worth of tokens, so one huge request cannot make small ones wait behind all of it), sorts them
by length and cuts micro-batches of at most `max_batch_size` rows whose padded size (rows x longest row)
stays within `max_batch_tokens`. Where the runner pads (ONNX, /predict), short texts are batched with short
texts so that little compute is spent on padding; where it runs packed (the PyTorch embedding path: only the
real tokens go through the model), padding costs nearly nothing and fewer, fuller passes win.
"""
from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Hashable, Sequence

from bertkit.serve.metrics import BATCH_SIZE_BUCKETS, SECONDS_BUCKETS, Histogram

# How many micro-batches' worth of queued texts one worker takes at a time: enough to sort by length,
# few enough that a request arriving now is served after a bounded amount of earlier work.
GATHER_BATCHES = 8
# The fixed cost of one forward pass, in tokens' worth of compute, used to decide where to cut batches.
# Measured for MiniLM on one CPU thread (thread CPU time of B x T passes, least squares over B 1-32, T 16-64):
# a pass costs ~4.7 ms however small, a token ~0.13 ms in fp32 and ~0.046 ms in bf16 (AMX), so the fixed
# cost is ~36 tokens' worth in fp32 and ~100 in bf16; int8 runs its matmuls in bf16 where the CPU is fast at
# it and gets the bf16 figure. On a GPU, where work per token is tiny and kernel launches dominate, a pass
# costs about as much as a few thousand tokens.
CPU_BATCH_OVERHEAD_TOKENS = 48
CPU_BATCH_OVERHEAD_TOKENS_BY_PRECISION = {"fp32": CPU_BATCH_OVERHEAD_TOKENS, "bf16": 96, "int8": 96}
GPU_BATCH_OVERHEAD_TOKENS = 4096


def batch_overhead_tokens(device_type: str, precision: str) -> int:
    """The measured default of `--batch-overhead-tokens` for a device ("cpu", "cuda", ...) and precision."""
    if device_type == "cuda":
        return GPU_BATCH_OVERHEAD_TOKENS
    return CPU_BATCH_OVERHEAD_TOKENS_BY_PRECISION.get(precision, CPU_BATCH_OVERHEAD_TOKENS)
THROUGHPUT_WINDOW_S = 60.0   # tokens_per_second() averages over the last minute


def thread_clocks() -> tuple[float, float]:
    """(wall, this thread's CPU) seconds: a batch run in the worker thread is busy for the wall time between."""
    return time.perf_counter(), time.thread_time()


class QueueFull(Exception):
    """More texts are waiting than the server accepts; the client should retry later."""


@dataclass
class _Ticket:
    """One request: its results fill in as its items finish, in whatever batches they land."""
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    results: list
    remaining: int
    cancelled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def deliver(self, index: int, result: Any) -> None:
        with self.lock:
            self.results[index] = result
            self.remaining -= 1
            done = self.remaining == 0
        if done:
            self.loop.call_soon_threadsafe(_resolve, self.future, self.results)

    def fail(self, error: BaseException) -> None:
        with self.lock:
            if self.cancelled:
                return
            self.cancelled = True   # its other items are skipped: the request already has its answer
        self.loop.call_soon_threadsafe(_reject, self.future, error)


def _resolve(future: asyncio.Future, results: list) -> None:
    if not future.done():
        future.set_result(results)


def _reject(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


@dataclass
class _Entry:
    ticket: _Ticket
    index: int
    kind: Hashable
    length: int
    payload: Any
    queued_at: float = 0.0      # time.perf_counter() at submit


@dataclass
class BatcherStats:
    """Updated by the workers under the batcher's lock; read it under the same lock (`Batcher.snapshot`)."""
    batches: int = 0
    items: int = 0
    padded_tokens: int = 0
    real_tokens: int = 0
    busy_seconds: float = 0.0
    cpu_seconds: float = 0.0        # the model's CPU seconds in passes (worker threads' or the model process's)
    batch_sizes: Histogram = field(default_factory=lambda: Histogram(BATCH_SIZE_BUCKETS))
    queue_seconds: Histogram = field(default_factory=lambda: Histogram(SECONDS_BUCKETS))   # per text
    recent: deque = field(default_factory=deque)    # (finished at, real tokens) of the last minute's batches

    def tokens_per_second(self, now: float) -> float:
        while self.recent and self.recent[0][0] < now - THROUGHPUT_WINDOW_S:
            self.recent.popleft()
        return sum(tokens for _, tokens in self.recent) / THROUGHPUT_WINDOW_S


RunBatch = Callable[[Hashable, list], list]


class Batcher:
    """`await submit(kind, lengths, payloads)` -> results in order; `run_batch(kind, payloads)` runs in a thread.

    Items of different kinds (say, embeddings and classifier predictions) never share a micro-batch.
    `run_batch` returns one result per payload; an exception fails every request in that micro-batch.
    """

    def __init__(self, run_batch: RunBatch, max_batch_tokens: int, max_queued_items: int, workers: int = 1,
                 max_batch_size: int = 32, batch_overhead_tokens: int = CPU_BATCH_OVERHEAD_TOKENS,
                 packed_kinds: Collection[Hashable] = (), clocks: Callable[[], tuple[float, float]] = thread_clocks):
        """packed_kinds: the kinds `run_batch` runs packed (a pass costs its real tokens, not rows x longest).
        clocks: (busy, CPU) seconds, read before and after `run_batch` in the worker thread: the model's time."""
        self.run_batch = run_batch
        self.clocks = clocks
        self.packed_kinds = frozenset(packed_kinds)
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_size = max_batch_size
        self.batch_overhead_tokens = batch_overhead_tokens
        self.max_queued_items = max_queued_items
        self.stats = BatcherStats()
        self._queue: deque[_Entry] = deque()
        self._condition = threading.Condition()
        self._stopping = False
        self._in_progress = 0
        self._threads = [threading.Thread(target=self._work, name=f"bertkit-model-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def in_progress(self) -> int:
        """Texts a worker has taken and not finished yet."""
        return self._in_progress

    async def submit(self, kind: Hashable, lengths: Sequence[int], payloads: Sequence[Any],
                     timeout: float) -> list:
        """Queue the items and wait for all their results; asyncio.TimeoutError after `timeout` seconds."""
        if not payloads:
            return []
        loop = asyncio.get_running_loop()
        ticket = _Ticket(loop, loop.create_future(), [None] * len(payloads), len(payloads))
        with self._condition:
            if self._stopping:
                raise QueueFull("the server is shutting down")
            if len(self._queue) + len(payloads) > self.max_queued_items:
                raise QueueFull(f"{len(self._queue)} texts are already waiting for the model "
                                f"(limit {self.max_queued_items})")
            now = time.perf_counter()
            for index, (length, payload) in enumerate(zip(lengths, payloads)):
                self._queue.append(_Entry(ticket, index, kind, max(1, int(length)), payload, now))
            self._condition.notify_all()
        try:
            return await asyncio.wait_for(asyncio.shield(ticket.future), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            ticket.cancelled = True    # workers drop its remaining items
            raise

    def snapshot(self) -> dict:
        """Copies of the counters and histograms, consistent with each other (for /metrics)."""
        with self._condition:
            stats = self.stats
            return {"batches": stats.batches, "items": stats.items, "padded_tokens": stats.padded_tokens,
                    "real_tokens": stats.real_tokens, "busy_seconds": stats.busy_seconds,
                    "cpu_seconds": stats.cpu_seconds,
                    "batch_sizes": copy.deepcopy(stats.batch_sizes),
                    "queue_seconds": copy.deepcopy(stats.queue_seconds),
                    "tokens_per_second": stats.tokens_per_second(time.perf_counter()),
                    "queued": len(self._queue), "in_progress": self._in_progress}

    def close(self) -> None:
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)

    # --- worker side -------------------------------------------------------------------------------------
    def _take(self) -> list[_Entry] | None:
        """Oldest live entries of the oldest entry's kind, up to GATHER_BATCHES batches' worth."""
        with self._condition:
            while True:
                while self._queue and self._queue[0].ticket.cancelled:
                    self._queue.popleft()
                if self._queue:
                    break
                if self._stopping:
                    return None
                self._condition.wait()
            kind = self._queue[0].kind
            budget = GATHER_BATCHES * self.max_batch_tokens
            max_rows = GATHER_BATCHES * self.max_batch_size
            taken, kept, tokens = [], deque(), 0
            while self._queue:
                entry = self._queue.popleft()
                if entry.ticket.cancelled:
                    continue
                if entry.kind != kind:
                    kept.append(entry)
                    continue
                if taken and (tokens + entry.length > budget or len(taken) >= max_rows):
                    self._queue.appendleft(entry)
                    break
                taken.append(entry)
                tokens += entry.length
            kept.extend(self._queue)
            self._queue = kept
            self._in_progress += len(taken)
            return taken

    def micro_batches(self, entries: list[_Entry]) -> list[list[_Entry]]:
        """Length-sorted batches of at most max_batch_size rows and max_batch_tokens padded tokens, cut where
        they cost least: a forward pass costs a fixed overhead plus rows x longest row tokens where the runner
        pads, plus its real tokens where it runs packed (entries of a kind in packed_kinds).

        Padded, with few texts of mixed lengths (batch-of-one clients), one batch would pad every text to the
        longest; cutting [5, 6, 7, 90] into [5, 6, 7] + [90] does a third of the work. Packed, the padding is
        not computed and the fewest passes cost least. Dynamic programming over the sorted lengths finds the
        cheapest cuts: O(n x max_batch_size) steps, n <= GATHER_BATCHES x that.
        """
        ordered = sorted(entries, key=lambda e: e.length)
        n = len(ordered)
        packed = n > 0 and ordered[0].kind in self.packed_kinds
        real = [0] * (n + 1)                    # real[j]: tokens of ordered[:j]
        for j, entry in enumerate(ordered):
            real[j + 1] = real[j] + entry.length
        best = [0.0] + [float("inf")] * n       # best[j]: cheapest cost of batching ordered[:j]
        cut = [0] * (n + 1)
        for j in range(1, n + 1):
            longest = ordered[j - 1].length      # sorted ascending: the last row is the longest
            for i in range(j - 1, max(-1, j - 1 - self.max_batch_size), -1):
                rows = j - i
                if rows > 1 and rows * longest > self.max_batch_tokens:
                    break
                work = real[j] - real[i] if packed else rows * longest
                cost = best[i] + self.batch_overhead_tokens + work
                if cost < best[j]:
                    best[j], cut[j] = cost, i
        batches: list[list[_Entry]] = []
        j = n
        while j > 0:
            batches.append(ordered[cut[j]:j])
            j = cut[j]
        return batches[::-1]

    def _work(self) -> None:
        while True:
            entries = self._take()
            if entries is None:
                return
            for batch in self.micro_batches(entries):
                try:
                    self._run([e for e in batch if not e.ticket.cancelled])
                finally:
                    with self._condition:
                        self._in_progress -= len(batch)

    def _run(self, batch: list[_Entry]) -> None:
        if not batch:
            return
        started, (busy, cpu) = time.perf_counter(), self.clocks()
        try:
            results = self.run_batch(batch[0].kind, [e.payload for e in batch])
        except Exception as error:  # noqa: BLE001 - handed to the waiting requests, not swallowed
            for entry in batch:
                entry.ticket.fail(error)
            return
        finally:
            busy_after, cpu_after = self.clocks()
            self._record(batch, started, time.perf_counter(), busy_after - busy, cpu_after - cpu)
        for entry, result in zip(batch, results):
            if not entry.ticket.cancelled:
                entry.ticket.deliver(entry.index, result)

    def _record(self, batch: list[_Entry], started: float, finished: float, busy: float, cpu: float) -> None:
        real = sum(e.length for e in batch)
        with self._condition:   # several workers may finish at once
            stats = self.stats
            stats.batches += 1
            stats.items += len(batch)
            stats.padded_tokens += len(batch) * max(e.length for e in batch)
            stats.real_tokens += real
            stats.busy_seconds += busy
            stats.cpu_seconds += cpu
            stats.batch_sizes.observe(len(batch))
            for entry in batch:
                stats.queue_seconds.observe(started - entry.queued_at)
            stats.recent.append((finished, real))
            stats.tokens_per_second(finished)     # drops batches older than the window
