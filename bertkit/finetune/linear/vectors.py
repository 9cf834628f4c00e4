"""The frozen model's sentence vectors for the linear probe and the hybrid, and their cache.

Vectors come from the folder's one sentence-embedding path, the one `Model.encode` runs (model/sentence.py:
its pooling, layers, dense layers, whitening, normalization and max length; features.encode_texts batches
by length), so a probe's vectors are exactly the model's vectors. The linear-probe and hybrid folders keep
that pipeline (saved with their encoder), so prediction makes the same vectors again.
Pairs are encoded side by side and joined as [u, v, |u - v|, u * v].

Training encodes train and dev once and caches them in the run folder as .npy files (numpy's own format,
read with allow_pickle=False), keyed by a hash of the model's weights, the encoding options and the texts,
so running again with other settings skips the encoder.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bertkit.atomic_write import write_file
from bertkit.checkpoints import Checkpoint
from bertkit.data.readers import TextExample
from bertkit.errors import BertkitError
from bertkit.features import EncodeOptions, encode_texts
from bertkit.finetune.linear.features import VectorBlock, pair_vectors
from bertkit.train.saved_score import hash_file

ENCODE_BATCH_SIZE = 64


def encoding_of(checkpoint: Checkpoint, max_length: Optional[int] = None) -> VectorBlock:
    """The folder's own sentence settings (pooling, normalize, max_length unless `max_length` is given)."""
    if checkpoint.tokenizer is None:
        raise BertkitError(f"{checkpoint.path}: the model folder has no vocab.txt or tokenizer.json to encode text")
    limit = checkpoint.config.max_length
    if max_length is not None and not 2 < max_length <= limit:
        raise BertkitError(f"--max-length {max_length}: {checkpoint.path} encodes 3 to {limit} tokens per text")
    settings = checkpoint.sentence.config
    return VectorBlock(settings.pooling, settings.normalize, max_length or settings.max_length or limit,
                       np.zeros(0), np.zeros(0))


def encode_examples(checkpoint: Checkpoint, examples: Sequence[TextExample], encoding: VectorBlock,
                    pairs: bool, batch_size: int = ENCODE_BATCH_SIZE, progress: bool = False) -> np.ndarray:
    """(N, D) vectors of the texts, or (N, 4D) [u, v, |u-v|, u*v] for pairs."""
    sentence = checkpoint.sentence.build(checkpoint.encoder, encoding.pooling, normalize=encoding.normalize)
    options = EncodeOptions(batch_size=batch_size, max_length=encoding.max_length, progress=progress)
    was_training = checkpoint.encoder.training
    checkpoint.encoder.eval()
    try:
        first = encode_texts(sentence, checkpoint.tokenizer, [ex.text for ex in examples], options)
        if not pairs:
            return first
        second = encode_texts(sentence, checkpoint.tokenizer, [ex.text_pair or "" for ex in examples], options)
        return pair_vectors(first, second)
    finally:
        checkpoint.encoder.train(was_training)


def model_fingerprint(folder: Path) -> str:
    """SHA-256 of the folder's weight files and config (what decides the vectors)."""
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if path.is_file() and (path.suffix in (".safetensors", ".bin") or path.name in ("config.json", "vocab.txt",
                                                                                            "tokenizer.json")):
            digest.update(path.name.encode())
            hash_file(digest, path)
    return digest.hexdigest()


def cache_key(model: str, encoding: VectorBlock, pairs: bool, examples: Sequence[TextExample]) -> str:
    digest = hashlib.sha256(json.dumps([model, encoding.pooling, encoding.normalize, encoding.max_length,
                                        pairs]).encode())
    for ex in examples:
        digest.update(json.dumps([ex.text, ex.text_pair]).encode())
    return digest.hexdigest()[:32]


def cached_vectors(cache: Optional[Path], checkpoint: Checkpoint, examples: Sequence[TextExample],
                   encoding: VectorBlock, pairs: bool, model_hash: str, what: str) -> np.ndarray:
    """Vectors from `cache` when an earlier run encoded the same texts with the same model, else encoded now
    (and stored there)."""
    path = cache / f"{what}-{cache_key(model_hash, encoding, pairs, examples)}.npy" if cache else None
    if path is not None and path.is_file():
        try:
            vectors = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            vectors = None                      # a damaged cache file: encode again
        if vectors is not None and vectors.ndim == 2 and vectors.shape[0] == len(examples):
            print(f"bertkit: {what}: {len(examples):,} vectors from the cache {path}", file=sys.stderr)
            return vectors
    vectors = encode_examples(checkpoint, examples, encoding, pairs, progress=True)
    if path is not None:
        def save(tmp: Path) -> None:
            with open(tmp, "wb") as handle:
                np.save(handle, vectors, allow_pickle=False)
        write_file(path, save)
    return vectors
