"""The search index: vectors in a backend (Faiss or Milvus), documents in SQLite, saved atomically.

    index = Index.create("idx", encoder=ModelTextEncoder(EncoderSpec("my-model"), load_model=bertkit.load))
    index.add(["a", "b"], ["first text", "second text"], metadata=[{"lang": "en"}, {"lang": "de"}])
    index.save()
    Index.open("idx", load_model=bertkit.load).search("a question", k=5, filter={"lang": "en"})

`bertkit.Index` is this class with `load_model=bertkit.load` built in (the search package does not import the
API above it): `bertkit.Index.open("idx")` loads the model recorded in the index on the first query.

Ids are the user's (any string). With metric "cosine" every vector is L2-normalized and scored by inner
product. Changes live in a working generation until `save()`, which switches the folder to them with
one atomic rename (see generations.py); a crash before that leaves the last saved index intact.

One writer at a time: the first change takes the folder's writer lock (writer_lock.py) and `save()` or
`close()` releases it; another writer waits up to `lock_timeout_s`, then gets an error naming the holder.
A writer whose index was opened before another writer saved builds on that newer generation, so no
save is ever lost. Readers take no lock and keep answering from the generation they opened.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertkit.errors import BertkitError
from bertkit.search import generations
from bertkit.search.backend import BackendInfo, VectorBackend
from bertkit.search.encoding import (LoadModel, ModelTextEncoder, TextEncoder, as_text_encoder, check_probe, probe_of,
                                    spec_from_manifest)
from bertkit.search.store import DocumentStore, FilterValue, metadata_json
from bertkit.search.writer_lock import WriterLock


class IdsAlreadyIndexed(BertkitError):
    """`add` of ids the index holds; `ids` in the order given."""

    def __init__(self, ids: list[str], where: str = ""):
        self.ids = ids
        shown = ", ".join(repr(i) for i in ids[:5])
        counted = "1 id is" if len(ids) == 1 else f"{len(ids)} ids are"
        super().__init__(f"{where}{counted} already in the index ({shown}); use `bertkit index update` "
                         "(Index.upsert) to replace them")


@dataclass(frozen=True)
class IndexSettings:
    backend: str = "faiss"          # "faiss" | "milvus"
    kind: str = "auto"              # faiss: "auto" (flat, IVF beyond ivf_threshold) | "flat" | "ivf" | "ivfpq"
    ivf_threshold: int = 50_000     # vectors above which "auto" switches from exact flat search to IVF
    metric: str = "cosine"          # "cosine" (normalized vectors, inner product) | "ip" (raw inner product)
    milvus_uri: str | None = None   # None: a Milvus Lite file inside the index folder; else a server URI


@dataclass(frozen=True)
class SearchHit:
    id: str
    score: float
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """{id, score, text, **metadata}; a metadata field named id, score, text or query (bertkit search's field
        for a hit of several queries) is kept as "metadata.<name>": it was dropped, hidden by the hit's own."""
        row = {"id": self.id, "score": self.score, "text": self.text}
        row.update((f"metadata.{k}" if k in (*row, "query") else k, v) for k, v in self.metadata.items())
        return row


def _backend_class(settings: IndexSettings):
    """The adapter class of settings.backend, imported here: an unknown backend, or one whose package is missing,
    is one error (called before any document is encoded, and again when the first vectors arrive)."""
    if settings.backend == "faiss":
        from bertkit.search.faiss_backend import FaissBackend
        return FaissBackend
    if settings.backend == "milvus":
        from bertkit.search.milvus_backend import MilvusBackend
        return MilvusBackend
    raise BertkitError(f"index backend {settings.backend!r} is not one of ['faiss', 'milvus']")


def _new_backend(settings: IndexSettings, dim: int, folder: Path, generation: int) -> VectorBackend:
    backend = _backend_class(settings)
    if settings.backend == "faiss":
        return backend(dim, kind=settings.kind, ivf_threshold=settings.ivf_threshold)
    return backend.create(folder, generation, dim, uri=settings.milvus_uri)


def _open_committed(folder: Path, nprobe: int | None) -> tuple[dict, DocumentStore, VectorBackend]:
    """(manifest, store, backend) of the generation index.json names. A writer that commits twice while
    this runs may delete that generation's files: then open the newer one it committed."""
    attempts = 3
    while True:
        attempts -= 1
        manifest = generations.read_manifest(folder)
        store = None
        try:
            store = DocumentStore(folder / manifest["store"], readonly=True)
            return manifest, store, _load_backend(IndexSettings(**manifest["settings"]), folder, manifest, nprobe)
        except Exception as err:
            if store is not None:
                store.close()
            if attempts == 0 or generations.read_manifest(folder)["generation"] == manifest["generation"]:
                if isinstance(err, BertkitError):
                    raise
                # not a writer's race: the files or the manifest's settings are broken (or were tampered with)
                raise BertkitError(f"{folder / generations.MANIFEST}: cannot open generation "
                                   f"{manifest['generation']} ({type(err).__name__}: {err})") from None


def _load_backend(settings: IndexSettings, folder: Path, manifest: dict, nprobe: int | None) -> VectorBackend:
    files, info = manifest["backend_files"], manifest["info"]
    if settings.backend == "faiss":
        from bertkit.search.faiss_backend import FaissBackend
        return FaissBackend.load(folder, files, info, settings.kind, settings.ivf_threshold, nprobe)
    from bertkit.search.milvus_backend import MilvusBackend
    return MilvusBackend.load(folder, files, info, uri=settings.milvus_uri)


class Index:
    # How a model folder named by an encoder spec is loaded when no loader is passed: none here (the search
    # package sits below the API); bertkit.Index sets bertkit.load.
    load_model: LoadModel | None = None

    def __init__(self, folder: Path, settings: IndexSettings, encoder: TextEncoder | None,
                 store: DocumentStore, backend: VectorBackend | None, generation: int,
                 lock: WriterLock | None = None, lock_timeout_s: float = 0.0, load_model: LoadModel | None = None):
        self.folder, self.settings = Path(folder), settings
        self.encoder = as_text_encoder(encoder, load_model or self.load_model)
        self.store, self.backend, self.generation = store, backend, generation
        self.lock_timeout_s = lock_timeout_s
        self._lock = lock   # held while writing: store and backend then write to generation + 1
        self.probe: list[float] | None = None           # the recorded encoder's vector of PROBE_TEXT (index.json)
        self._encoder_probe: list[float] | None = None  # this index's encoder's, once it has encoded

    @property
    def _working(self) -> bool:
        return self._lock is not None

    # -- opening ----------------------------------------------------------------------------------
    @classmethod
    def create(cls, folder: str | Path, encoder: TextEncoder | None = None, dim: int | None = None,
               settings: IndexSettings = IndexSettings(), overwrite: bool = False,
               lock_timeout_s: float = 0.0, load_model: LoadModel | None = None) -> "Index":
        folder = Path(folder)
        if settings.metric not in ("cosine", "ip"):
            raise BertkitError(f"index metric {settings.metric!r} is not one of ['cosine', 'ip']")
        _backend_class(settings)
        if settings.backend == "milvus" and settings.kind not in ("auto", "flat"):
            # it was ignored: Milvus Lite searches FLAT, a Milvus server picks its own structure (AUTOINDEX)
            raise BertkitError(f"index kind {settings.kind!r} is a faiss structure; the milvus backend chooses its "
                               "own (flat in Milvus Lite, AUTOINDEX on a server): leave --kind out, or use "
                               "--backend faiss")
        if (folder / generations.MANIFEST).exists() and not overwrite:
            raise BertkitError(f"{folder} already holds an index; open it, or pass overwrite to replace it")
        folder.mkdir(parents=True, exist_ok=True)
        lock = WriterLock.acquire(folder, lock_timeout_s)
        try:
            exists = (folder / generations.MANIFEST).exists()
            if exists and not overwrite:    # another writer built one while this one waited for the lock
                raise BertkitError(f"{folder} already holds an index; open it, or pass overwrite to replace it")
            # Overwriting builds the next generation beside the old index, which stays usable until save().
            current = generations.read_manifest(folder)["generation"] if exists else 0
            target = current + 1
            generations.remove_generation(folder, target)  # leftovers of a writer that died before saving
            store = DocumentStore(folder / f"store.{target}.sqlite")
            backend = _new_backend(settings, dim, folder, target) if dim else None
        except BaseException:
            lock.release()
            raise
        return cls(folder, settings, encoder, store, backend, current, lock, lock_timeout_s, load_model)

    @classmethod
    def open(cls, folder: str | Path, encoder: TextEncoder | None = None, nprobe: int | None = None,
             lock_timeout_s: float = 0.0, load_model: LoadModel | None = None) -> "Index":
        """Open the last saved generation. Writing to it takes the writer lock, waiting up to lock_timeout_s.

        Queries are encoded by `encoder` (a TextEncoder or a loaded model), else by the encoder recorded in the
        index, whose model folder `load_model` (default: the class's; bertkit.Index: bertkit.load) loads on
        first use."""
        folder = Path(folder)
        if nprobe is not None and (isinstance(nprobe, bool) or not isinstance(nprobe, int) or nprobe < 1):
            raise BertkitError(f"nprobe {nprobe!r}: the number of IVF lists to probe must be an integer >= 1 "
                               "(leave it out for the one chosen at build)")
        load_model = load_model or cls.load_model
        manifest, store, backend = _open_committed(folder, nprobe)    # index.json read once, here
        spec = None           # the recorded encoder, when no encoder is given to embed queries
        if encoder is None and manifest.get("encoder") is not None:
            try:
                spec = spec_from_manifest(manifest["encoder"], folder / generations.MANIFEST)
            except BertkitError:
                store.close()
                raise
        if encoder is None and spec is not None and load_model is None:
            store.close()
            raise BertkitError(f"{folder}: the index was built with model {spec.model}; "
                               "open it with bertkit.Index.open, or pass encoder=bertkit.load(folder) or "
                               "load_model=bertkit.load")
        if encoder is None and spec is not None:
            encoder = ModelTextEncoder(spec, load_model)
        index = cls(folder, IndexSettings(**manifest["settings"]), encoder, store, backend, manifest["generation"],
                    lock_timeout_s=lock_timeout_s, load_model=load_model)
        index.probe = manifest.get("probe")
        return index

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the index; changes not saved are dropped (their files deleted) and the writer lock released."""
        self.store.close()
        if self.backend is not None:
            self.backend.close()
        if self._lock is not None:
            generations.remove_generation(self.folder, self.generation + 1)
            self._release()

    def __len__(self) -> int:
        return self.store.count()

    # -- writing ----------------------------------------------------------------------------------
    def _begin_write(self) -> None:
        """Take the writer lock and move writes to generation g+1: a copy of the last saved generation's
        files that the next save() commits."""
        if self._working:
            return
        lock = WriterLock.acquire(self.folder, self.lock_timeout_s)
        try:
            manifest = generations.read_manifest(self.folder)
            if manifest["generation"] != self.generation:
                self._reopen()           # another writer saved since this index was opened: build on that
            target = self.generation + 1
            generations.remove_generation(self.folder, target)  # leftovers of a writer that died before saving
            self.store.close()
            generations.copy_generation_file(self.folder, self.store.path.name, f"store.{target}.sqlite")
            self.store = DocumentStore(self.folder / f"store.{target}.sqlite")
            if self.backend is not None:
                self.backend.fork(self.folder, target)
        except BaseException:
            lock.release()
            raise
        self._lock = lock

    def _reopen(self) -> None:
        nprobe = getattr(self.backend, "nprobe_override", None)   # a search setting of this reader: keep it
        self.store.close()
        if self.backend is not None:
            self.backend.close()
        manifest, self.store, self.backend = _open_committed(self.folder, nprobe)
        self.settings, self.generation = IndexSettings(**manifest["settings"]), manifest["generation"]
        self.probe = manifest.get("probe")
        if self._encoder_probe is not None:
            check_probe(self.probe, self._encoder_probe, self.folder, self.encoder.spec().get("model"))

    def _release(self) -> None:
        self._lock.release()
        self._lock = None

    def _vectors(self, texts: Sequence[str], vectors: np.ndarray | None) -> np.ndarray:
        if vectors is None:
            if self.encoder is None:
                raise BertkitError("this index has no encoder: pass vectors, or create it with a model")
            self._check_encoder()
            vectors = self.encoder.encode(list(texts))
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim == 1:
            vectors = vectors[None, :]
        if self.settings.metric == "cosine":
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.where(norms > 0, norms, 1.0)  # an all-zero vector stays zero, not NaN
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _check_encoder(self) -> None:
        """Before the encoder's first vectors: it must give the vectors the index recorded (check_probe)."""
        if self._encoder_probe is None:
            probe = probe_of(self.encoder)
            check_probe(self.probe, probe, self.folder, self.encoder.spec().get("model"))
            self._encoder_probe = probe

    def add(self, ids: Sequence, texts: Sequence[str], vectors: np.ndarray | None = None,
            metadata: Sequence[dict] | None = None) -> None:
        """Add new documents; an id already in the index is an error (use `upsert` to replace)."""
        self._write(ids, texts, vectors, metadata, replace=False)

    def upsert(self, ids: Sequence, texts: Sequence[str], vectors: np.ndarray | None = None,
               metadata: Sequence[dict] | None = None) -> None:
        """Add documents, replacing the text, vector and metadata of ids already in the index."""
        self._write(ids, texts, vectors, metadata, replace=True)

    def _write(self, ids, texts, vectors, metadata, replace: bool) -> None:
        ids = [str(i) for i in ids]
        texts = [str(t) for t in texts]
        metadata = [{} if m is None else m for m in metadata] if metadata is not None else [{} for _ in ids]
        if not (len(ids) == len(texts) == len(metadata)):
            raise BertkitError(f"got {len(ids)} ids, {len(texts)} texts and {len(metadata)} metadata entries")
        for doc_id, fields in zip(ids, metadata):     # before anything is written: no vector without its row
            try:
                metadata_json(fields)
            except BertkitError as err:
                raise BertkitError(f"document {doc_id!r}: {err}") from None
        metadata = [dict(m) for m in metadata]
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            dup = next(i for i in ids if i in seen or seen.add(i))
            raise BertkitError(f"id {dup!r} appears twice in one batch")
        if not ids:
            return
        vectors = self._vectors(texts, vectors)
        if len(vectors) != len(ids):
            raise BertkitError(f"got {len(ids)} ids but {len(vectors)} vectors")
        self._begin_write()
        if self.backend is None:
            self.backend = _new_backend(self.settings, vectors.shape[1], self.folder, self.generation + 1)
        existing = self.store.row_ids_for(ids)
        if existing and not replace:
            raise IdsAlreadyIndexed([i for i in ids if i in existing])
        next_row = self.store.next_row_id()
        row_ids = []
        for doc_id in ids:
            if doc_id in existing:
                row_ids.append(existing[doc_id])
            else:
                row_ids.append(next_row)
                next_row += 1
        row_array = np.asarray(row_ids, dtype=np.int64)
        self.backend.remove(np.asarray(list(existing.values()), dtype=np.int64))
        self.backend.add(row_array, vectors)
        self.store.put(list(zip(row_ids, ids, texts, metadata)))

    def delete(self, ids: Sequence) -> list[str]:
        """Delete documents by id; returns the ids that were not in the index."""
        ids = [str(i) for i in ids]
        self._begin_write()
        found = self.store.row_ids_for(ids)
        rows = np.asarray(list(found.values()), dtype=np.int64)
        if self.backend is not None:
            self.backend.remove(rows)
        self.store.remove(rows.tolist())
        return [i for i in ids if i not in found]

    def save(self) -> BackendInfo | None:
        """Commit all changes since the last save, atomically; returns what the backend built."""
        if not self._working:
            return self.info()
        target = self.generation + 1
        if self.backend is None:
            raise BertkitError("nothing to save: the index has no documents yet")
        committed = (generations.read_manifest(self.folder)["generation"]
                     if (self.folder / generations.MANIFEST).exists() else 0)
        if committed != self.generation:   # the lock rules this out unless its file was deleted under us
            raise BertkitError(f"index {self.folder}: another writer saved generation {committed} while this one "
                               f"was writing (was {self.folder / 'writer.lock'} deleted?); these changes are "
                               "not saved, so that nothing already saved is overwritten")
        self.backend.prepare_for_save()
        backend_files = self.backend.save(self.folder, target)
        self.store.commit()
        info = self.backend.info()
        manifest = {
            "generation": target,
            "store": f"store.{target}.sqlite",
            "backend_files": backend_files,
            "settings": asdict(self.settings),
            "encoder": self.encoder.spec() if self.encoder is not None else None,
            "probe": self._encoder_probe if self._encoder_probe is not None else self.probe,
            "info": asdict(info),
            "documents": self.store.count(),
        }
        generations.commit_manifest(self.folder, manifest, backend_files + [manifest["store"]])
        # The previous generation stays one more save: a reader that has just read the old manifest
        # can still open its files.
        generations.remove_other_generations(self.folder, keep={target, self.generation})
        self.generation, self.probe = target, manifest["probe"]
        self._release()
        return info

    def info(self) -> BackendInfo | None:
        return self.backend.info() if self.backend is not None else None

    # -- searching --------------------------------------------------------------------------------
    def _query_vectors(self, queries) -> np.ndarray:
        if isinstance(queries, np.ndarray):
            return self._vectors([], queries)
        return self._vectors(queries, None)

    def search(self, query: str | np.ndarray, k: int = 10, filter: dict[str, FilterValue] | None = None,
               timeout_s: float | None = None) -> list[SearchHit]:
        """Top-k documents for one query (a text, or a vector of the index's dim)."""
        queries = [query] if isinstance(query, str) else np.asarray(query, dtype=np.float32).reshape(1, -1)
        return self.search_many(queries, k, filter, timeout_s)[0]

    def search_many(self, queries: Sequence[str] | np.ndarray, k: int = 10,
                    filter: dict[str, FilterValue] | None = None,
                    timeout_s: float | None = None) -> list[list[SearchHit]]:
        """Top-k documents for each query; `filter` keeps documents whose metadata matches every field.

        timeout_s bounds the filter's SQL query (TimeLimitExceeded when it runs longer)."""
        if k < 1:
            raise BertkitError(f"k must be >= 1, got {k}")
        query_vectors = self._query_vectors(queries)
        if self.backend is None or len(query_vectors) == 0:
            return [[] for _ in range(len(query_vectors))]
        if query_vectors.shape[1] != self.backend.dim:
            raise BertkitError(f"query vectors have dim {query_vectors.shape[1]}, this index holds dim "
                               f"{self.backend.dim}; encode queries with the model that built the index")
        allowed = None
        if filter:
            allowed = np.asarray(self.store.matching_row_ids(filter, timeout_s), dtype=np.int64)
        scores, rows = self.backend.search(query_vectors, k, allowed)
        documents = self.store.get(sorted({int(r) for r in rows.ravel() if r >= 0}))
        results = []
        for score_row, id_row in zip(scores, rows):
            hits = [SearchHit(documents[int(r)].doc_id, float(s), documents[int(r)].text,
                              documents[int(r)].metadata)
                    for s, r in zip(score_row, id_row) if r >= 0 and int(r) in documents]
            results.append(hits)
        return results
