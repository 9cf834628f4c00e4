"""Milvus adapter (pymilvus): the only module that imports pymilvus.

Two modes, one API. Without a URI the vectors live in a Milvus Lite database (a local folder, PyPI
`milvus-lite`) inside the index folder, one per generation like every other index file, so saves stay
atomic. With a URI (`http://host:19530`) they live in a Milvus server or cluster; the collection there
is live (Milvus persists each write itself), so only the SQLite document store follows the generations:
use one writer and save after each batch. Filters restrict the search with a primary-key expression
(`pk in [...]`), pushed down into Milvus one page of at most FILTER_CHUNK ids at a time; each page's top k is
exact, so the merged top k over all pages is the filter's exact top k, however many documents it matches.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bertkit.errors import BertkitError
from bertkit.search.backend import BackendInfo
from bertkit.search.generations import copy_generation_file

try:
    from pymilvus import DataType, MilvusClient
except ImportError as err:  # pragma: no cover - depends on the environment
    raise BertkitError("the Milvus backend needs pymilvus: pip install pymilvus milvus-lite") from err

COLLECTION = "bertkit_vectors"
INSERT_BATCH = 2000      # rows per insert call: stays far below gRPC's message size limit
FILTER_CHUNK = 16384     # ids per `pk in [...]` page: keeps one expression (~100 KB) well inside gRPC's limits
MAX_TOP_K = 16384        # Milvus's largest top-k


def _lite_name(generation: int) -> str:
    return f"vectors.{generation}.milvus.db"  # Milvus Lite requires a name ending in .db


class MilvusBackend:
    name = "milvus"

    def __init__(self, dim: int, uri: str, remote: bool):
        self.dim, self.uri, self.remote = dim, uri, remote
        self.client = self._connect(uri)
        if not self.client.has_collection(COLLECTION):
            self._create_collection()

    def _connect(self, uri: str) -> MilvusClient:
        client = MilvusClient(uri)
        if client.has_collection(COLLECTION):
            client.load_collection(COLLECTION)  # a reopened collection starts released
        return client

    def _disconnect(self) -> None:
        self.client.close()
        if not self.remote:
            # Milvus Lite serves a .db folder from a server inside this process that outlives the client
            # and holds a lock on the folder; stopping it flushes the folder and lets others open it.
            from milvus_lite.server_manager import server_manager_instance
            server_manager_instance.release_server(self.uri)

    def _create_collection(self) -> None:
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("pk", DataType.INT64, is_primary=True)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dim)
        index_params = self.client.prepare_index_params()
        # Milvus Lite serves FLAT (exact); a server picks its own structure with AUTOINDEX.
        index_params.add_index(field_name="vector", index_type="AUTOINDEX" if self.remote else "FLAT",
                               metric_type="IP")
        # Strong consistency: a search right after a write sees it, as with Faiss.
        self.client.create_collection(COLLECTION, schema=schema, index_params=index_params,
                                      consistency_level="Strong")
        self.client.load_collection(COLLECTION)

    @classmethod
    def create(cls, folder: Path, generation: int, dim: int, uri: str | None = None) -> "MilvusBackend":
        if uri:
            return cls(dim, uri, remote=True)
        return cls(dim, str(Path(folder) / _lite_name(generation)), remote=False)

    @classmethod
    def load(cls, folder: Path, files: list[str], info: dict, uri: str | None = None) -> "MilvusBackend":
        if uri:
            return cls(int(info["dim"]), uri, remote=True)
        return cls(int(info["dim"]), str(Path(folder) / files[0]), remote=False)

    def fork(self, folder: Path, generation: int) -> None:
        if self.remote:
            return
        self._disconnect()  # Milvus Lite must release its files before they are copied
        copy_generation_file(folder, Path(self.uri).name, _lite_name(generation))
        self.uri = str(Path(folder) / _lite_name(generation))
        self.client = self._connect(self.uri)

    def count(self) -> int:
        rows = self.client.query(COLLECTION, filter="", output_fields=["count(*)"])
        return int(rows[0]["count(*)"])

    def add(self, row_ids: np.ndarray, vectors: np.ndarray) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise BertkitError(f"vectors of shape {vectors.shape} do not fit this index of dim {self.dim}")
        for start in range(0, len(row_ids), INSERT_BATCH):
            rows = [{"pk": int(r), "vector": v.tolist()}
                    for r, v in zip(row_ids[start:start + INSERT_BATCH], vectors[start:start + INSERT_BATCH])]
            self.client.upsert(COLLECTION, rows)

    def remove(self, row_ids: np.ndarray) -> None:
        for start in range(0, len(row_ids), FILTER_CHUNK):
            chunk = [int(r) for r in row_ids[start:start + FILTER_CHUNK]]
            if chunk:
                self.client.delete(COLLECTION, ids=chunk)

    def search(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None):
        queries = np.asarray(queries, dtype=np.float32)
        scores = np.zeros((len(queries), k), np.float32)
        ids = np.full((len(queries), k), -1, np.int64)
        if allowed is not None and len(allowed) == 0:
            return scores, ids
        if k > MAX_TOP_K:
            raise BertkitError(f"k {k} is more than Milvus returns from one search ({MAX_TOP_K}); lower k or "
                               "use the Faiss backend")
        pages = [""] if allowed is None else [
            f"pk in [{','.join(str(int(a)) for a in allowed[start:start + FILTER_CHUNK])}]"
            for start in range(0, len(allowed), FILTER_CHUNK)]
        hits_per_query: list[list[tuple[float, int]]] = [[] for _ in queries]
        for expression in pages:
            results = self.client.search(COLLECTION, data=[q.tolist() for q in queries], limit=k,
                                         filter=expression, output_fields=["pk"],
                                         search_params={"metric_type": "IP"})
            for row, hits in enumerate(results):
                hits_per_query[row].extend((float(hit["distance"]), int(hit["pk"] if "pk" in hit else hit["id"]))
                                           for hit in hits)
        for row, hits in enumerate(hits_per_query):
            for col, (score, pk) in enumerate(sorted(hits, key=lambda hit: (-hit[0], hit[1]))[:k]):
                ids[row, col], scores[row, col] = pk, score
        return scores, ids

    def prepare_for_save(self) -> None:
        pass

    def save(self, folder: Path, generation: int) -> list[str]:
        if self.remote:
            self.client.flush(COLLECTION)
            return []
        # Closing makes Milvus Lite write everything to its folder; reopen to keep serving.
        self._disconnect()
        self.client = self._connect(self.uri)
        return [Path(self.uri).name]

    def info(self) -> BackendInfo:
        params = {"uri": self.uri} if self.remote else {}
        return BackendInfo("milvus", "flat" if not self.remote else "autoindex", self.count(), self.dim, params)

    def close(self) -> None:
        self._disconnect()
