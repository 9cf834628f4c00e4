"""BERT-whitening (Su et al. 2021, "Whitening Sentence Representations for Better Semantics and Faster
Retrieval"): map pooled vectors x to (x - mu) @ W with W = U diag(1/sqrt(s)) from the SVD of their
covariance, so the corpus vectors have zero mean and identity covariance; keeping the first k columns of
W also reduces the dimension.

Statistics are accumulated batch by batch (Chan et al.'s parallel update of mean and co-moment matrix),
so fitting never holds the corpus's vectors, only a (dim, dim) float64 matrix. The fitted transform is
saved in the model folder as `whitening.safetensors` and described under "whitening" in bertkit.json.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.errors import BertkitError, CheckpointError

WHITENING_FILE = "whitening.safetensors"
META_FILE = "bertkit.json"


@dataclass(frozen=True)
class Whitening:
    mean: np.ndarray     # (dim_in,)
    kernel: np.ndarray   # (dim_in, dim_out)
    count: int           # vectors it was fitted on

    @property
    def dim_in(self) -> int:
        return int(self.kernel.shape[0])

    @property
    def dim_out(self) -> int:
        return int(self.kernel.shape[1])

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """(N, dim_in) -> (N, dim_out) float32."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim_in:
            raise BertkitError(f"whitening fitted on {self.dim_in}-dim vectors cannot apply to shape {vectors.shape}")
        return ((vectors - self.mean) @ self.kernel).astype(np.float32)


class WhiteningStats:
    """Running mean and co-moment matrix of the vectors seen so far."""

    def __init__(self, dim: int):
        self.dim, self.count = dim, 0
        self.mean = np.zeros(dim, np.float64)
        self.comoment = np.zeros((dim, dim), np.float64)   # sum of (x - mean)(x - mean)^T

    def update(self, vectors: np.ndarray) -> None:
        batch = np.asarray(vectors, dtype=np.float64)
        if batch.ndim != 2 or batch.shape[1] != self.dim:
            raise BertkitError(f"expected vectors of dim {self.dim}, got shape {batch.shape}")
        if not np.isfinite(batch).all():
            raise BertkitError("cannot fit whitening: some vectors are NaN or infinite")
        n = len(batch)
        if n == 0:
            return
        batch_mean = batch.mean(axis=0)
        centered = batch - batch_mean
        delta = batch_mean - self.mean
        total = self.count + n
        self.comoment += centered.T @ centered + np.outer(delta, delta) * (self.count * n / total)
        self.mean += delta * (n / total)
        self.count = total

    def fit(self, dim: int | None = None) -> Whitening:
        """The whitening transform, optionally keeping only the `dim` leading directions."""
        if self.count < self.dim:
            raise BertkitError(
                f"whitening needs at least as many texts as vector dimensions: got {self.count} texts for "
                f"{self.dim}-dim vectors, so the covariance is singular; use a corpus of >= {self.dim} texts "
                f"(ideally many times more)")
        if dim is not None and not 1 <= dim <= self.dim:
            raise BertkitError(f"--dim {dim}: must be between 1 and the model's vector size {self.dim}")
        covariance = self.comoment / max(self.count - 1, 1)
        u, s, _ = np.linalg.svd(covariance)
        # Directions with (numerically) zero variance would be scaled to infinity; floor them.
        s = np.maximum(s, s[0] * 1e-8 if s[0] > 0 else 1e-12)
        kernel = u @ np.diag(1.0 / np.sqrt(s))
        if dim is not None:
            kernel = kernel[:, :dim]
        return Whitening(self.mean.astype(np.float32), kernel.astype(np.float32), self.count)


def fit_whitening(vector_batches, dim: int | None = None) -> Whitening:
    """Fit on an iterable of (N_i, D) arrays without holding them all."""
    stats = None
    for batch in vector_batches:
        batch = np.asarray(batch)
        if stats is None:
            stats = WhiteningStats(batch.shape[1])
        stats.update(batch)
    if stats is None:
        raise BertkitError("cannot fit whitening on an empty corpus")
    return stats.fit(dim)


def _read_meta(folder: Path) -> dict:
    path = folder / META_FILE
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from None


def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_whitening(folder: str | Path, whitening: Whitening, pooling: str, layers: str = "last") -> None:
    """Write whitening.safetensors into a model folder and describe it in its bertkit.json.

    The transform only fits vectors made the same way, so the pooling and layers it was fitted with are
    recorded, and become the folder's encode defaults.
    """
    from safetensors.numpy import save_file

    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: no such model folder")
    _write_atomic(folder / WHITENING_FILE, lambda tmp: save_file(
        {"mean": np.ascontiguousarray(whitening.mean), "kernel": np.ascontiguousarray(whitening.kernel)},
        str(tmp), metadata={"count": str(whitening.count)}))
    meta = _read_meta(folder)
    meta["whitening"] = {"file": WHITENING_FILE, "dim_in": whitening.dim_in, "dim_out": whitening.dim_out,
                         "fitted_on": whitening.count, "pooling": pooling, "layers": layers}
    meta["encode"] = {**meta.get("encode", {}), "pooling": pooling}
    text = json.dumps(meta, indent=2, ensure_ascii=False) + "\n"
    _write_atomic(folder / META_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def load_whitening(folder: str | Path) -> Whitening | None:
    """The whitening saved in a model folder, or None when it has none."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    folder = Path(folder)
    info = _read_meta(folder).get("whitening")
    if not info:
        return None
    path = folder / info.get("file", WHITENING_FILE)
    if not path.is_file():
        raise CheckpointError(f"{folder}/{META_FILE} names whitening file {path.name}, which is missing; "
                              f"refit with `bertkit whiten` or remove the \"whitening\" entry")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{path}: unreadable whitening file ({err})") from None
    mean, kernel = tensors["mean"], tensors["kernel"]
    if kernel.shape != (info["dim_in"], info["dim_out"]) or mean.shape != (info["dim_in"],):
        raise CheckpointError(f"{path}: shapes {mean.shape}, {kernel.shape} do not match bertkit.json "
                              f"({info['dim_in']} -> {info['dim_out']})")
    return Whitening(mean, kernel, int(info.get("fitted_on", 0)))


def encode_unwhitened(model, texts: list[str], **options) -> np.ndarray:
    """Pooled vectors before any saved whitening (what whitening is fitted on)."""
    return np.asarray(model.encode(texts, whiten=False, **options), dtype=np.float32)


def encode_composed(model, texts: list[str], normalize: bool = False, **options) -> np.ndarray:
    """The model folder's full composition: pooling -> saved whitening -> optional L2 normalization,
    the same steps for documents, queries and served vectors."""
    return np.asarray(model.encode(texts, normalize=normalize, **options), dtype=np.float32)


def iter_corpus(path: str | Path, field: str = "text"):
    """Texts of a .txt (one per non-empty line) or .jsonl (`field` of each object) file, streamed."""
    from bertkit.data.text import check_readable, iter_lines

    path = check_readable(path, (".txt", ".jsonl"))
    is_jsonl = path.name.removesuffix(".gz").endswith(".jsonl")
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        if not is_jsonl:
            yield line
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            from bertkit.errors import InputFileError
            raise InputFileError(path, f"invalid JSON ({err.msg})", line=number) from None
        if not isinstance(row, dict) or not isinstance(row.get(field), str):
            from bertkit.errors import InputFileError
            raise InputFileError(path, f"expected an object with a string field {field!r}", line=number)
        yield row[field]


def _chunks(items, size: int):
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def whiten_model(model_dir: str | Path, corpus: str | Path, output: str | Path, dim: int | None = None,
                 pooling: str | None = None, layers: str = "last", batch_size: int = 64,
                 max_length: int | None = None, chunk_size: int = 4096) -> Whitening:
    """Fit whitening on a corpus's pooled vectors and save the model plus the whitening to `output`."""
    import bertkit

    model = bertkit.load(model_dir)
    pooling = pooling or model.encode_defaults.get("pooling", "mean")
    batches = (encode_unwhitened(model, texts, batch_size=batch_size, max_length=max_length, pooling=pooling,
                            layers=layers, normalize=False)
               for texts in _chunks(iter_corpus(corpus), chunk_size))
    whitening = fit_whitening(batches, dim)
    if Path(output).resolve() != Path(model_dir).resolve():
        model.save(output)
    save_whitening(output, whitening, pooling=pooling, layers=layers)
    return whitening
