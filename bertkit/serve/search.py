"""The optional search index behind POST /search.

The query is embedded by the server's own batcher (same model, the pooling the index was built with),
and only the vector goes to `Index.search`. The index keeps its documents in SQLite, whose connections
belong to the thread that opened them, so one dedicated thread opens the index and runs every search.

That one thread must never be held: each search has a deadline (the server's request timeout). A request
that waits longer for the thread gets TimeLimitExceeded and its queued search is dropped; a running filter
query is interrupted by SQLite at the deadline. `stuck_for()` tells /health when a search runs past its
deadline all the same (a part SQLite cannot interrupt), so a load balancer stops sending traffic.

The server follows the folder: `bertkit index add | update | delete` while it runs saves a new generation
(search/generations.py), and the next search, seeing index.json changed (one stat), opens that generation on
the search thread and answers from it. A new generation the server cannot use (another dimension, unreadable)
leaves the one it has answering, with the reason in GET /status.
"""
from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from bertkit.errors import BertkitError, TimeLimitExceeded
from bertkit.api import Index
from bertkit.search.encoding import check_probe
from bertkit.search.generations import MANIFEST


def _stamp(folder: str) -> Optional[tuple]:
    """What changes when a writer saves: index.json is replaced by a rename, so its inode and time change."""
    try:
        stat = os.stat(Path(folder) / MANIFEST)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


class SearchIndex:
    # the answering generation's settings (_take): queries are embedded as its documents were
    pooling: str
    built_with: Optional[str]             # the model folder that embedded the documents
    max_length: Optional[int]             # None: the model folder's
    long_texts: str                       # "sliding-window": a long query is averaged over windows, not cut
    stride: Optional[int]                 # the windows' overlap; None: features.window_stride's default
    dimension: Optional[int]
    warning: Optional[str]                # built with another model folder than the one served
    generation: int
    documents: int

    def __init__(self, folder: str, served_model: Optional[str], dimension: Callable[[str], int], default_pooling: str,
                 timeout_s: float = 30.0, layers: str = "last",
                 probe: Optional[Callable[[str, Optional[int]], Optional[np.ndarray]]] = None,
                 folder_max_length: Optional[int] = None):
        """dimension(pooling): the width of the served model's vectors with that pooling (a whitening applies to
        the pooling it was fitted on only, so an index built with another pooling holds other widths).
        probe(pooling, max_length): the served model's vector of the index's probe text (search/encoding.py), to
        check against the one each generation recorded. folder_max_length: the served folder's own length, which
        bertkit.search cuts queries at when the index recorded none (serve --max-length is /encode's)."""
        self.probe, self.folder_max_length = probe, folder_max_length
        self.folder = str(Path(folder).resolve())
        self.timeout_s = timeout_s
        self._busy_since: Optional[float] = None     # monotonic start of the search running now
        self.searches = self.timeouts = 0
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertkit-search")
        self.served_model, self.default_pooling, self.layers = served_model, default_pooling, layers
        self.model_dimension = dimension
        self.refresh_error: Optional[str] = None     # why the newest saved generation is not the one answering
        self._stamp = _stamp(self.folder)
        self.index = self._thread.submit(self._open).result()
        try:
            settings = self._thread.submit(self._settings_of, self.index).result()
        except BertkitError:
            self.close()
            raise
        self._take(settings)

    def _take(self, settings: dict[str, Any]) -> None:
        for key, value in settings.items():
            setattr(self, key, value)

    def _settings_of(self, index) -> dict[str, Any]:
        """On the search thread: check an opened generation against the served model; its query settings."""
        folder = self.folder
        spec: dict[str, Any] = index.encoder.spec() if index.encoder is not None else {}
        if (spec.get("layers") or self.layers) != self.layers:
            raise BertkitError(f"index {folder} was built from layers={spec['layers']!r}; the server embeds "
                               f"queries with layers={self.layers!r}: start it with --layers={spec['layers']}, "
                               "or rebuild the index with its layers")
        dimension = getattr(index.info(), "dim", None)
        pooling = spec.get("pooling") or self.default_pooling
        expected = self.model_dimension(pooling)
        if dimension is not None and int(dimension) != expected:
            raise BertkitError(f"index {folder} holds {dimension}-dimensional vectors but the model gives "
                               f"{expected} with pooling {pooling!r}; serve the model the index was built with "
                               f"({spec.get('model')}), or rebuild the index")
        built_with, served = spec.get("model"), self.served_model
        max_length = spec.get("max_length") or self.folder_max_length
        if self.probe is not None and index.probe is not None:
            check_probe(index.probe, self.probe(pooling, max_length), f"index {folder}", served or built_with)
        warning = None
        if built_with and served and Path(built_with).resolve() != Path(served).resolve():
            warning = (f"index {folder} was built with {built_with}; queries are embedded with "
                       f"{served}: results are only meaningful if both are the same model")
        return {"pooling": pooling, "built_with": built_with,
                "max_length": max_length, "long_texts": spec.get("long_texts") or "truncate",
                "stride": spec.get("stride"),
                "dimension": dimension, "warning": warning, "generation": index.generation,
                "documents": len(index)}

    def _open(self):
        return Index.open(self.folder)

    def _refresh(self, stamp: Optional[tuple]) -> None:
        """On the search thread: open the generation a writer saved since, check it, and answer from it."""
        if stamp == self._stamp:
            return                       # another request's refresh, queued first, already did it
        self._stamp = stamp
        try:
            fresh = Index.open(self.folder)
        except BertkitError as err:
            self.refresh_error = f"the newest saved generation cannot be opened: {err}"
            return
        if fresh.generation == self.generation:      # the newest saved generation is the one answering
            fresh.close()
            self.refresh_error = None
            return
        try:
            settings = self._settings_of(fresh)
        except BertkitError as err:
            fresh.close()
            self.refresh_error = str(err)
            return
        old, self.index, self.refresh_error = self.index, fresh, None
        self._take(settings)
        old.close()

    async def follow_folder(self) -> None:
        """Before a query is embedded: answer from the last saved generation (one stat when nothing changed)."""
        stamp = _stamp(self.folder)
        if stamp is None or stamp == self._stamp:
            return
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(self._thread, self._refresh, stamp)
        try:
            await asyncio.wait_for(asyncio.shield(job), self.timeout_s)
        except asyncio.TimeoutError:
            self.timeouts += 1
            raise TimeLimitExceeded(f"search: opening the index's new generation took over {self.timeout_s:g} s"
                                    ) from None

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
        return {"folder": self.folder, "generation": self.generation, "documents": self.documents,
                "pooling": self.pooling, "built_with": self.built_with, "warning": self.warning,
                "refresh_error": self.refresh_error, "searches": self.searches,
                "timeouts": self.timeouts,
                "running_s": round(time.monotonic() - since, 3) if since is not None else None}

    def close(self) -> None:
        self._thread.submit(self.index.close).result()
        self._thread.shutdown()
