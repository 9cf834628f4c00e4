"""The boundary between the index and a vector library: what every vector backend must do.

A backend holds float32 vectors under int64 row ids (the document store maps user ids to row ids) and
answers top-k inner-product searches, optionally restricted to a set of allowed row ids. Each backend
lives in one adapter module (faiss_backend.py, milvus_backend.py); nothing else imports Faiss or Milvus.

Persistence is by generation: `save(folder, generation)` writes the backend's files for a new
generation without touching the previous one, so the index can switch generations atomically.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np


@dataclass
class BackendInfo:
    """What the backend built, for users and for the index manifest."""
    backend: str                 # "faiss" | "milvus"
    kind: str                    # the index structure actually in use: "flat" | "ivf" | "ivfpq" | ...
    count: int
    dim: int
    params: dict = field(default_factory=dict)  # nlist, nprobe, pq_m, ...
    note: str = ""               # e.g. why a requested IVF fell back to flat


class VectorBackend(Protocol):
    name: str
    dim: int

    def count(self) -> int: ...

    def add(self, row_ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors (N, dim) float32 under new row ids (N,) int64."""

    def remove(self, row_ids: np.ndarray) -> None:
        """Remove vectors by row id; unknown ids are ignored."""

    def search(self, queries: np.ndarray, k: int,
               allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k by inner product: (scores (Q, k) float32, row ids (Q, k) int64, -1 where fewer than k).

        `allowed` (int64 row ids) restricts the search to those rows; it is applied inside the search.
        """

    def fork(self, folder: Path, generation: int) -> None:
        """Direct further writes to a new generation, leaving the saved one untouched."""

    def prepare_for_save(self) -> None:
        """Restructure if the size now calls for another index kind (e.g. flat -> IVF)."""

    def save(self, folder: Path, generation: int) -> list[str]:
        """Write this generation's files into `folder`; return their names (relative to `folder`)."""

    def info(self) -> BackendInfo: ...

    def close(self) -> None: ...
