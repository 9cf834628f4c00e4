"""Faiss adapter: the only module that imports faiss.

Vectors live under the index's int64 row ids (IndexIDMap2 for flat, native ids for IVF). The structure
follows the collection's size: exact flat search while small, IVF (inverted lists, k-means trained on
the stored vectors) beyond `ivf_threshold`, IVF-PQ (compressed codes) only when asked. IVF needs about
39 training points per list (Faiss warns below that), so an IVF request on too few vectors falls back to
flat and says so. Filters become a Faiss IDSelector applied inside the search.
"""
from __future__ import annotations

import logging
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.errors import BertkitError
from bertkit.search.backend import BackendInfo

try:
    import faiss
except ImportError as err:  # pragma: no cover - depends on the environment
    raise BertkitError("the search index needs Faiss: pip install 'bertkit[search]' (faiss-cpu)") from err

log = logging.getLogger("bertkit.search")

KINDS = ("auto", "flat", "ivf", "ivfpq")
POINTS_PER_LIST = 39       # Faiss's own minimum of training points per centroid
# k-means trains on at most this many sampled vectors per list (Faiss suggests 39-256). Its cost is
# sample x lists x dim per iteration: at 1M vectors (4,000 lists) 256 per list means training on all 1M
# (4,000 lists on 160k vectors alone took 128 s on 2 busy cores); with 64, recall@10 against exact search
# stayed 0.999 (BENCHMARKS.md, benchmarks/index_scale.py).
TRAIN_POINTS_PER_LIST = 64
MIN_LISTS = 16             # fewer lists than this is no faster than flat
PQ_BITS = 8                # one byte per sub-vector code: 256 centroids per sub-quantizer
FLAT_HEADER = struct.Struct("<4s i q q q B i 4s i q q q B i Q")   # IndexIDMap2 over IndexFlatIP, to the vectors


def _check_flat_sizes(path: Path, dim: int) -> None:
    """Faiss allocates what a file's header claims before it reads the data: a 1 KB file claiming 3 GB of
    vectors took 3 GB. For the flat layout bertkit writes (IndexIDMap2 over IndexFlatIP) the claimed count of
    floats must be count x dim and fit in the file; other layouts are left to faiss."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(FLAT_HEADER.size)
    if len(head) < FLAT_HEADER.size or head[:4] != b"IxM2" or head[37:41] != b"IxFI":
        return
    fields = FLAT_HEADER.unpack(head)
    inner_dim, count, floats = fields[8], fields[9], fields[14]
    if inner_dim != dim or count < 0 or floats != count * dim or 4 * floats > size - FLAT_HEADER.size:
        raise BertkitError(f"{path}: its header claims {count:,} vectors of {inner_dim} dimensions ({floats:,} "
                           f"floats) in a file of {size:,} bytes, with index.json saying {dim} dimensions; the file "
                           "is damaged or was edited")


@dataclass(frozen=True)
class IndexPlan:
    kind: str          # "flat" | "ivf" | "ivfpq"
    nlist: int = 0
    nprobe: int = 0
    pq_m: int = 0
    note: str = ""


def plan_index(count: int, dim: int, requested: str, ivf_threshold: int) -> IndexPlan:
    """Choose the index structure for `count` vectors: flat while small, IVF beyond the threshold."""
    if requested not in KINDS:
        raise BertkitError(f"index kind {requested!r} is not one of {list(KINDS)}")
    if requested == "flat" or (requested == "auto" and count < ivf_threshold):
        return IndexPlan("flat")
    kind = "ivf" if requested == "auto" else requested
    # sqrt(N) scaling of the list count is the usual Faiss guidance; 4x keeps lists short at query time.
    nlist = min(int(4 * math.sqrt(max(count, 1))), count // POINTS_PER_LIST, 65536)
    pq_m = _pq_subquantizers(dim) if kind == "ivfpq" else 0
    needed = max(MIN_LISTS * POINTS_PER_LIST, 2 ** PQ_BITS * POINTS_PER_LIST if kind == "ivfpq" else 0)
    if nlist < MIN_LISTS or count < needed:
        note = (f"{kind} asked for, but {count} vectors are too few to train it (needs >= {needed}); "
                f"using an exact flat index")
        return IndexPlan("flat", note=note)
    # Default nprobe=1 misses many neighbours; probing ~1/16 of the lists keeps recall high.
    nprobe = min(nlist, max(8, nlist // 16))
    return IndexPlan(kind, nlist=nlist, nprobe=nprobe, pq_m=pq_m)


def _pq_subquantizers(dim: int) -> int:
    """Largest divisor of dim up to min(64, dim // 2): one byte per sub-vector of >= 2 dims."""
    for m in range(min(64, max(dim // 2, 1)), 0, -1):
        if dim % m == 0:
            return m
    return 1


class FaissBackend:
    name = "faiss"

    def __init__(self, dim: int, kind: str = "auto", ivf_threshold: int = 50_000, nprobe: int | None = None):
        if kind not in KINDS:
            raise BertkitError(f"index kind {kind!r} is not one of {list(KINDS)}")
        self.dim, self.requested, self.ivf_threshold = dim, kind, ivf_threshold
        self.plan = IndexPlan("flat")
        self.nprobe_override = nprobe
        self.index = self._new_flat()

    # -- building ---------------------------------------------------------------------------------
    def _new_flat(self):
        return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))

    def _new_ivf(self, plan: IndexPlan, train: np.ndarray):
        quantizer = faiss.IndexFlatIP(self.dim)
        if plan.kind == "ivfpq":
            index = faiss.IndexIVFPQ(quantizer, self.dim, plan.nlist, plan.pq_m, PQ_BITS,
                                   faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexIVFFlat(quantizer, self.dim, plan.nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(train)
        # A hashtable id -> list map makes remove_ids() a lookup instead of a scan of every list.
        index.set_direct_map_type(faiss.DirectMap.Hashtable)
        return index

    def _all_vectors(self) -> tuple[np.ndarray, np.ndarray]:
        assert self.plan.kind == "flat", "only flat indexes are rebuilt from their own vectors"
        ids = faiss.vector_to_array(self.index.id_map).astype(np.int64)
        vectors = self.index.index.reconstruct_n(0, self.index.ntotal) if len(ids) else np.zeros((0, self.dim))
        return ids, np.ascontiguousarray(vectors, dtype=np.float32)

    def fork(self, folder: Path, generation: int) -> None:
        pass  # the Faiss index is held in memory; save() writes the new generation's file

    def prepare_for_save(self) -> None:
        if self.plan.kind != "flat":
            return  # an IVF index keeps accepting vectors; its lists stay usable as it grows
        plan = plan_index(self.count(), self.dim, self.requested, self.ivf_threshold)
        if plan.note and plan.note != self.plan.note:
            log.warning(plan.note)
        if plan.kind == "flat":
            self.plan = plan
            return
        ids, vectors = self._all_vectors()
        sample = vectors[np.random.default_rng(0).permutation(len(vectors))[:plan.nlist * TRAIN_POINTS_PER_LIST]]
        index = self._new_ivf(plan, sample)
        index.add_with_ids(vectors, ids)
        log.info("built %s index: %d vectors, %d lists, nprobe %d", plan.kind, len(ids), plan.nlist, plan.nprobe)
        self.index, self.plan = index, plan

    # -- the backend interface --------------------------------------------------------------------
    def count(self) -> int:
        return int(self.index.ntotal)

    def add(self, row_ids: np.ndarray, vectors: np.ndarray) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise BertkitError(f"vectors of shape {vectors.shape} do not fit this index of dim {self.dim}")
        self.index.add_with_ids(vectors, np.ascontiguousarray(row_ids, dtype=np.int64))

    def remove(self, row_ids: np.ndarray) -> None:
        if len(row_ids):
            row_ids = np.ascontiguousarray(row_ids, dtype=np.int64)  # the selector points into this array
            self.index.remove_ids(faiss.IDSelectorArray(row_ids))

    @property
    def nprobe(self) -> int:
        return self.nprobe_override or self.plan.nprobe

    def search(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None):
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if allowed is not None and len(allowed) == 0 or self.count() == 0:
            return np.zeros((len(queries), k), np.float32), np.full((len(queries), k), -1, np.int64)
        selector = None
        if allowed is not None:
            allowed = np.ascontiguousarray(allowed, dtype=np.int64)
            selector = faiss.IDSelectorBatch(allowed)
        if self.plan.kind == "flat":
            params = faiss.SearchParameters(sel=selector) if selector is not None else None
            return self.index.search(queries, k, params=params)
        nprobe = self.nprobe
        while True:
            params = faiss.SearchParametersIVF(sel=selector, nprobe=nprobe) if selector is not None \
                else faiss.SearchParametersIVF(nprobe=nprobe)
            scores, ids = self.index.search(queries, k, params=params)
            # A narrow filter can leave the probed lists without k allowed vectors: probe more lists
            # rather than return short results.
            wanted = min(k, len(allowed)) if allowed is not None else min(k, self.count())
            if nprobe >= self.plan.nlist or (ids >= 0).sum(axis=1).min() >= wanted:
                return scores, ids
            nprobe = min(self.plan.nlist, nprobe * 4)

    def save(self, folder: Path, generation: int) -> list[str]:
        name = f"vectors.{generation}.faiss"
        faiss.write_index(self.index, str(Path(folder) / name))
        return [name]

    @classmethod
    def load(cls, folder: Path, files: list[str], info: dict, kind: str, ivf_threshold: int,
             nprobe: int | None = None) -> "FaissBackend":
        backend = cls(int(info["dim"]), kind=kind, ivf_threshold=ivf_threshold, nprobe=nprobe)
        path = Path(folder) / files[0]
        _check_flat_sizes(path, backend.dim)
        backend.index = faiss.read_index(str(path))
        if backend.index.d != backend.dim:
            raise BertkitError(f"{path}: holds {backend.index.d}-dimensional vectors where index.json says "
                               f"{backend.dim}; the folder was edited or mixed up")
        params = info.get("params", {})
        backend.plan = IndexPlan(info["kind"], nlist=params.get("nlist", 0), nprobe=params.get("nprobe", 0),
                                 pq_m=params.get("pq_m", 0), note=info.get("note", ""))
        return backend

    def info(self) -> BackendInfo:
        params = {}
        if self.plan.kind != "flat":
            params = {"nlist": self.plan.nlist, "nprobe": self.nprobe}
            if self.plan.pq_m:
                params["pq_m"] = self.plan.pq_m
        return BackendInfo("faiss", self.plan.kind, self.count(), self.dim, params, self.plan.note)

    def close(self) -> None:
        pass
