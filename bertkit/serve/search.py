"""The optional search index behind POST /search.

The query is embedded by the server's own batcher (same model, the pooling the index was built with),
and only the vector goes to `Index.search`. The index keeps its documents in SQLite, whose connections
belong to the thread that opened them, so one dedicated thread opens the index and runs every search.

That one thread must never be held: each search has a deadline (the server's request timeout). A request
that waits longer for the thread gets TimeLimitExceeded and its queued search is dropped; a running filter
query is interrupted by SQLite at the deadline. `stuck_for()` tells /health when a search runs past its
deadline all the same (a part SQLite cannot interrupt), so a load balancer stops sending traffic.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import numpy as np

from bertkit.errors import BertkitError, TimeLimitExceeded
from bertkit.api import Index


class SearchIndex:
    def __init__(self, folder: str, served_model: Optional[str], dimension: int, default_pooling: str,
                 timeout_s: float = 30.0, layers: str = "last"):
        self.folder = str(Path(folder).resolve())
        self.timeout_s = timeout_s
        self._busy_since: Optional[float] = None     # monotonic start of the search running now
        self.searches = self.timeouts = 0
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertkit-search")
        self.index = self._thread.submit(self._open).result()
        spec: dict[str, Any] = self.index.encoder.spec() if self.index.encoder is not None else {}
        self.pooling: str = spec.get("pooling") or default_pooling
        self.built_with: Optional[str] = spec.get("model")
        self.max_length: Optional[int] = spec.get("max_length")     # None: the model folder's
        if (spec.get("layers") or layers) != layers:
            self.close()
            raise BertkitError(f"index {folder} was built from layers={spec['layers']!r}; the server embeds "
                               f"queries with the model folder's layers={layers!r}, so rebuild the index with those")
        info = self.index.info()
        self.dimension = getattr(info, "dim", None)
        if self.dimension is not None and int(self.dimension) != dimension:
            self.close()
            raise BertkitError(f"index {folder} holds {self.dimension}-dimensional vectors but the model gives "
                               f"{dimension}; serve the model the index was built with ({self.built_with})")
        self.warning: Optional[str] = None
        if self.built_with and served_model and Path(self.built_with).resolve() != Path(served_model).resolve():
            self.warning = (f"index {folder} was built with {self.built_with}; queries are embedded with "
                            f"{served_model}: results are only meaningful if both are the same model")
        self.documents = self._thread.submit(len, self.index).result()

    def _open(self):
        return Index.open(self.folder)

    def _search(self, vector: np.ndarray, k: int, filter: Optional[dict], deadline: float) -> list:
        """On the search thread: what is left of the request's time bounds the filter query."""
        started = time.monotonic()
        if started >= deadline:
            raise TimeLimitExceeded("timed out waiting for the search thread")
        self._busy_since = started
        try:
            return self.index.search(vector, k, filter or None, timeout_s=deadline - started)
        finally:
            self._busy_since = None

    async def search(self, vector: np.ndarray, k: int, filter: Optional[dict]) -> list:
        """Raises TimeLimitExceeded when the answer is not there within `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + self.timeout_s
        self.searches += 1
        # Cancelling the wait also drops the search from the thread's queue if it has not started.
        job = loop.run_in_executor(self._thread, self._search, vector, k, filter, deadline)
        try:
            return await asyncio.wait_for(job, self.timeout_s)
        except (asyncio.TimeoutError, TimeLimitExceeded) as err:
            self.timeouts += 1
            why = str(err) if isinstance(err, TimeLimitExceeded) else "timed out waiting for the search thread"
            raise TimeLimitExceeded(f"search: {why} (limit {self.timeout_s:g} s)") from None

    def stuck_for(self) -> Optional[float]:
        """Seconds the running search has gone past its time limit, or None when it has not."""
        since = self._busy_since
        if since is None:
            return None
        over = time.monotonic() - since - self.timeout_s
        return over if over > 0 else None

    def describe(self) -> dict:
        since = self._busy_since
        return {"folder": self.folder, "documents": self.documents, "pooling": self.pooling,
                "built_with": self.built_with, "warning": self.warning, "searches": self.searches,
                "timeouts": self.timeouts,
                "running_s": round(time.monotonic() - since, 3) if since is not None else None}

    def close(self) -> None:
        self._thread.submit(self.index.close).result()
        self._thread.shutdown()
