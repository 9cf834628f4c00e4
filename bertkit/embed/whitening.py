"""BERT-whitening (Su et al. 2021, "Whitening Sentence Representations for Better Semantics and Faster
Retrieval"): map pooled vectors x to (x - mu) @ W with W = U diag(1/sqrt(s)) from the SVD of their
covariance, so the corpus vectors have zero mean and identity covariance; keeping the first k columns of
W also reduces the dimension.

Statistics are accumulated batch by batch (Chan et al.'s parallel update of mean and co-moment matrix),
so fitting never holds the corpus's vectors, only a (dim, dim) float64 matrix. The fitted transform is a step
of the model's sentence path (model/sentence.py), saved in the model folder as `whitening.safetensors` and
described under "whitening" in bertkit.json (checkpoints/sentence.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bertkit.checkpoints.sentence import load_whitening, save_whitening  # noqa: F401  (the file format)
from bertkit.data.text import check_readable, iter_lines
from bertkit.errors import BertkitError, InputFileError
from bertkit.model.sentence import SentencePipeline, Whitening
from bertkit.progress import progress_bar


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

    def fit(self, dim: int | None = None, pooling: str = "mean", layers: str = "last") -> Whitening:
        """The whitening transform, optionally keeping only the `dim` leading directions; `pooling` and
        `layers` record how the vectors it was fitted on were made."""
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
        return Whitening(self.mean.astype(np.float32), kernel.astype(np.float32), self.count, pooling, layers)


def fit_whitening(vector_batches, dim: int | None = None, pooling: str = "mean", layers: str = "last") -> Whitening:
    """Fit on an iterable of (N_i, D) arrays without holding them all."""
    stats = None
    for batch in vector_batches:
        batch = np.asarray(batch)
        if stats is None:
            stats = WhiteningStats(batch.shape[1])
        stats.update(batch)
    if stats is None:
        raise BertkitError("cannot fit whitening on an empty corpus")
    return stats.fit(dim, pooling, layers)


def encode_unwhitened(model, texts: list[str], **options) -> np.ndarray:
    """Pooled vectors before any saved whitening (what whitening is fitted on)."""
    return np.asarray(model.encode(texts, whiten=False, **options), dtype=np.float32)


def encode_composed(model, texts: list[str], normalize: bool = False, **options) -> np.ndarray:
    """The model folder's full composition: pooling -> saved whitening -> optional L2 normalization,
    the same steps for documents, queries and served vectors."""
    return np.asarray(model.encode(texts, normalize=normalize, **options), dtype=np.float32)


def iter_corpus(path: str | Path, field: str = "text"):
    """Texts of a .txt (one per non-empty line) or .jsonl (`field` of each object) file, streamed."""
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
            raise InputFileError(path, f"invalid JSON ({err.msg})", line=number) from None
        if not isinstance(row, dict) or not isinstance(row.get(field), str):
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


def whiten_model(model, corpus: str | Path, output: str | Path, dim: int | None = None,
                 pooling: str | None = None, layers: str | None = None, batch_size: int = 64,
                 max_length: int | None = None, chunk_size: int = 4096, progress: bool = False) -> Whitening:
    """Fit whitening on a corpus's pooled vectors and save the loaded `model` (`bertkit.load(folder)`) with it
    (and the folder's other sentence settings) to `output`; the fitted pooling and layers become the folder's
    defaults."""
    pooling = pooling or model.sentence.config.pooling
    layers = layers or model.sentence.config.layers
    width = model.sentence_encoder(pooling, layers, normalize=False, whiten=False).dim
    if dim is not None and not 1 <= dim <= width:      # now, not after encoding the whole corpus
        raise BertkitError(f"--dim {dim}: must be between 1 and the model's vector size {width}")
    bar = progress_bar(None, progress)    # the corpus is streamed: its length is unknown until the end
    batches = (_counted(bar, texts, encode_unwhitened(model, texts, batch_size=batch_size, max_length=max_length,
                                                      pooling=pooling, layers=layers, normalize=False))
               for texts in _chunks(iter_corpus(corpus), chunk_size))
    try:
        whitening = fit_whitening(batches, dim, pooling, layers)
    finally:
        if bar is not None:
            bar.close()
    settings = model.sentence.config.replace(pooling=pooling, layers=layers)
    model.sentence = SentencePipeline(settings, model.sentence.dense, whitening)
    model.save(output)
    return whitening


def _counted(bar, texts: list[str], vectors: np.ndarray) -> np.ndarray:
    if bar is not None:
        bar.update(len(texts))
    return vectors
