"""The optional search index behind POST /search.

The query is embedded by the server's own batcher (same model, the pooling the index was built with),
and only the vector goes to `Index.search`. The index keeps its documents in SQLite, whose connections
belong to the thread that opened them, so one dedicated thread opens the index and runs every search.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import numpy as np

from bertkit.errors import BertkitError


class SearchIndex:
    def __init__(self, folder: str, served_model: Optional[str], dimension: int, default_pooling: str,
                 layers: str = "last"):
        self.folder = str(Path(folder).resolve())
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
        from bertkit.search import Index   # faiss is only needed when an index is served
        return Index.open(self.folder)

    async def search(self, vector: np.ndarray, k: int, filter: Optional[dict]) -> list:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self.index.search, vector, k, filter or None)

    def describe(self) -> dict:
        return {"folder": self.folder, "documents": self.documents, "pooling": self.pooling,
                "built_with": self.built_with, "warning": self.warning}

    def close(self) -> None:
        self._thread.submit(self.index.close).result()
        self._thread.shutdown()
