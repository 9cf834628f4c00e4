"""The batcher alone: token-budget micro-batches, cross-request batching, kinds, errors, cancellation."""
from __future__ import annotations

import asyncio
import threading

import pytest

from bertkit.serve.batching import Batcher, QueueFull


class Recorder:
    def __init__(self, gate: threading.Event | None = None):
        self.batches: list[tuple[str, list]] = []
        self.gate = gate

    def __call__(self, kind, payloads):
        if self.gate is not None:
            self.gate.wait(5)
        self.batches.append((kind, list(payloads)))
        return [f"{kind}:{p}" for p in payloads]


def _entries(lengths):
    from bertkit.serve.batching import _Entry
    return [_Entry(None, i, "embed", length, i) for i, length in enumerate(lengths)]


def _lengths(batches):
    return [[e.length for e in batch] for batch in batches]


def test_micro_batches_are_sorted_and_within_limits():
    batcher = Batcher(Recorder(), max_batch_tokens=100, max_queued_items=100, max_batch_size=3)
    try:
        batches = batcher.micro_batches(_entries([50, 3, 40, 5, 30, 4, 100, 2, 2]))
        for lengths in _lengths(batches):
            assert lengths == sorted(lengths) and len(lengths) <= 3 and len(lengths) * max(lengths) <= 100
        assert sorted(e.index for b in batches for e in b) == list(range(9))
    finally:
        batcher.close()


@pytest.mark.parametrize("overhead, expected", [
    (10, [[5, 6, 7], [90]]),             # cheap passes: never pad short texts to 90
    (1000, [[5, 6, 7, 90]]),             # expensive passes (a GPU): one batch
])
def test_micro_batches_cut_where_padding_costs_more_than_a_pass(overhead, expected):
    batcher = Batcher(Recorder(), max_batch_tokens=1000, max_queued_items=100, batch_overhead_tokens=overhead)
    try:
        assert _lengths(batcher.micro_batches(_entries([90, 6, 5, 7]))) == expected
    finally:
        batcher.close()


def test_packed_kinds_take_one_pass_where_padding_costs_nothing():
    """A packed runner computes real tokens only: [5, 6, 7, 90] in one pass costs 108 + one overhead, where
    the padded cost model cuts off the 90 (test above). Row and padded-size limits still hold."""
    batcher = Batcher(Recorder(), max_batch_tokens=1000, max_queued_items=100, batch_overhead_tokens=10,
                      packed_kinds={"embed"})
    try:
        assert _lengths(batcher.micro_batches(_entries([90, 6, 5, 7]))) == [[5, 6, 7, 90]]
        batcher.max_batch_tokens = 200          # 4 x 90 > 200: the padded grid still bounds a pass
        batches = _lengths(batcher.micro_batches(_entries([90, 6, 5, 7])))
        assert len(batches) == 2 and all(len(b) * max(b) <= 200 for b in batches)
        batcher.max_batch_tokens, batcher.max_batch_size = 1000, 2
        assert all(len(b) <= 2 for b in _lengths(batcher.micro_batches(_entries([90, 6, 5, 7]))))
        batcher.max_batch_size = 32
        padded_kind = _entries([90, 6, 5, 7])
        for entry in padded_kind:
            entry.kind = "predict"              # a kind the runner pads keeps the padded cost model
        assert _lengths(batcher.micro_batches(padded_kind)) == [[5, 6, 7], [90]]
    finally:
        batcher.close()


def test_requests_from_many_clients_share_batches_and_keep_order():
    gate = threading.Event()
    recorder = Recorder(gate)
    batcher = Batcher(recorder, max_batch_tokens=1000, max_queued_items=1000)

    async def main():
        first = asyncio.ensure_future(batcher.submit("embed", [5], ["warm-up"], timeout=10))
        await asyncio.sleep(0.05)       # the worker holds the warm-up batch while the others queue
        others = [batcher.submit("embed", [3, 9], [f"r{i}a", f"r{i}b"], timeout=10) for i in range(5)]
        tasks = [asyncio.ensure_future(o) for o in others]
        await asyncio.sleep(0.05)
        gate.set()
        return await first, await asyncio.gather(*tasks)

    try:
        first, results = asyncio.run(main())
        assert first == ["embed:warm-up"]
        assert results == [[f"embed:r{i}a", f"embed:r{i}b"] for i in range(5)]
        assert len(recorder.batches) == 2 and len(recorder.batches[1][1]) == 10   # one batch for 5 clients
    finally:
        batcher.close()


def test_kinds_never_share_a_batch():
    gate = threading.Event()
    recorder = Recorder(gate)
    batcher = Batcher(recorder, max_batch_tokens=1000, max_queued_items=1000)

    async def main():
        tasks = [asyncio.ensure_future(batcher.submit(kind, [4], [kind], timeout=10))
                 for kind in ("embed", "predict", "embed", "predict")]
        await asyncio.sleep(0.05)
        gate.set()
        return await asyncio.gather(*tasks)

    try:
        assert asyncio.run(main()) == [["embed:embed"], ["predict:predict"], ["embed:embed"], ["predict:predict"]]
        assert all(len({p for p in payloads}) == 1 for _, payloads in recorder.batches)
    finally:
        batcher.close()


def test_errors_reach_the_request_and_the_worker_survives():
    calls = []

    def flaky(kind, payloads):
        calls.append(payloads)
        if "bad" in payloads:
            raise RuntimeError("model exploded")
        return payloads

    batcher = Batcher(flaky, max_batch_tokens=1000, max_queued_items=1000)

    async def main():
        with pytest.raises(RuntimeError, match="exploded"):
            await batcher.submit("embed", [1], ["bad"], timeout=5)
        return await batcher.submit("embed", [1], ["good"], timeout=5)

    try:
        assert asyncio.run(main()) == ["good"]
    finally:
        batcher.close()


def test_queue_limit_and_timeout():
    gate = threading.Event()
    batcher = Batcher(Recorder(gate), max_batch_tokens=100, max_queued_items=3)

    async def main():
        with pytest.raises(QueueFull):
            await batcher.submit("embed", [1] * 4, list("abcd"), timeout=5)
        with pytest.raises(asyncio.TimeoutError):
            await batcher.submit("embed", [1], ["slow"], timeout=0.05)

    try:
        asyncio.run(main())
    finally:
        gate.set()
        batcher.close()
