"""Tokenized, memory-mapped corpus shards: the corpus is tokenized once, in batches, then read by training.

A shard folder holds `manifest.json` and per shard three .npy files: `tokens` (uint16, or uint32 for
vocabularies over 65,535), `words` (uint8, 1 where a token starts a word: English `##` pieces continue a
word; with segmenter="jieba" so do the characters of one Chinese word) and `index` offsets (sentence
starts in tokens, document starts in sentences). Shards end at document boundaries.

Building streams: memory is bounded by one shard (`shard_tokens`), not the corpus. Each shard is written
under a temporary name and renamed, then recorded in the manifest with the corpus position after it, so an
interrupted build resumes after the last finished shard instead of starting over.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Sequence

import numpy as np

from bertkit.atomic_write import write_json
from bertkit.data.corpus import CorpusPosition, check_corpus_files, iter_documents
from bertkit.errors import BertkitError
from bertkit.folder_names import member

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SENTENCES_PER_CALL = 2000      # sentences per tokenizer call: one Python -> Rust crossing per batch
Segmenter = Literal["none", "jieba"]


@dataclass
class Shard:
    tokens: np.ndarray             # (N,) token ids, memory-mapped
    words: np.ndarray              # (N,) 1 = starts a word
    sentence_offsets: np.ndarray   # (S + 1,) token offset of each sentence
    doc_offsets: np.ndarray        # (D + 1,) sentence offset of each document

    @property
    def num_documents(self) -> int:
        return len(self.doc_offsets) - 1


def tokenizer_fingerprint(tokenizer) -> str:
    vocab = sorted(tokenizer.backend.get_vocab().items(), key=lambda kv: kv[1])
    digest = hashlib.sha1(json.dumps([vocab, tokenizer.lowercase]).encode("utf-8"))
    return digest.hexdigest()[:16]


def _inputs(paths: Sequence[Path]) -> list[dict]:
    return [{"path": str(p.resolve()), "size": p.stat().st_size} for p in paths]


def build_shards(paths: Sequence[str | Path], tokenizer, folder: str | Path, segmenter: Segmenter = "none",
                 shard_tokens: int = 16_000_000, progress: bool = False, encoding: str = "utf-8") -> Path:
    """Tokenize `paths` (text in `encoding`) into shards in `folder` (resuming an interrupted build there); returns
    the folder."""
    files = check_corpus_files(paths)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    identity = {"format": FORMAT_VERSION, "tokenizer": tokenizer_fingerprint(tokenizer), "segmenter": segmenter,
                "inputs": _inputs(files), **({"encoding": encoding} if encoding != "utf-8" else {})}
    manifest_path = folder / MANIFEST
    manifest = {**identity, "dtype": "uint16" if tokenizer.vocab_size <= 65535 else "uint32",
                "shards": [], "complete": False}
    if manifest_path.is_file():
        old = json.loads(manifest_path.read_text(encoding="utf-8"))
        if any(old.get(k) != v for k, v in identity.items()):
            changed = [k for k, v in identity.items() if old.get(k) != v]
            raise BertkitError(f"{folder} holds shards of another corpus or tokenizer ({', '.join(changed)} differ); "
                               "delete the folder or pass another shard folder")
        manifest = old
        if manifest["complete"]:
            return folder
    for stray in folder.glob("*.tmp*"):
        stray.unlink()
    start = CorpusPosition(**manifest["shards"][-1]["end"]) if manifest["shards"] else CorpusPosition()
    writer = _ShardWriter(tokenizer, segmenter, np.dtype(manifest["dtype"]))
    pending_docs: list[list[str]] = []
    pending_sentences = 0
    position = start

    def flush_shard() -> None:
        name = f"shard_{len(manifest['shards']):05d}"
        counts = writer.write(folder, name)
        manifest["shards"].append({"name": name, **counts, "end": position.__dict__})
        write_json(manifest_path, manifest)
        if progress:
            print(f"bertkit: wrote {name} ({counts['tokens']:,} tokens)", flush=True)

    for doc, position in iter_documents(files, start, encoding=encoding):
        pending_docs.append(doc)
        pending_sentences += len(doc)
        if pending_sentences >= SENTENCES_PER_CALL:
            writer.add(pending_docs)
            pending_docs, pending_sentences = [], 0
            if writer.num_tokens >= shard_tokens:
                flush_shard()
    writer.add(pending_docs)
    if writer.num_tokens:
        flush_shard()
    if not manifest["shards"]:
        raise BertkitError(f"no tokens came out of {', '.join(map(str, files))}; is the corpus empty?")
    manifest["complete"] = True
    write_json(manifest_path, manifest)
    return folder


def continuation_mask(tokenizer) -> np.ndarray:
    """(max id + 1,) bool: True for the `##` word pieces that continue a word (WordPiece), by token id."""
    vocab = tokenizer.backend.get_vocab()
    mask = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for token, index in vocab.items():
        mask[index] = token.startswith("##")
    return mask


class _ShardWriter:
    """Buffers one shard's tokens, word starts and offsets until it is written."""

    def __init__(self, tokenizer, segmenter: Segmenter, dtype: np.dtype):
        self.tokenizer, self.segmenter, self.dtype = tokenizer, segmenter, dtype
        self.continuation = continuation_mask(tokenizer)
        self._reset()

    def _reset(self) -> None:
        self.token_chunks: list[np.ndarray] = []
        self.word_chunks: list[np.ndarray] = []
        self.sentence_lengths: list[int] = []
        self.doc_sizes: list[int] = []
        self.num_tokens = 0

    def add(self, docs: list[list[str]]) -> None:
        sentences = [s for doc in docs for s in doc]
        if not sentences:
            return
        encodings = self.tokenizer.backend.encode_batch(sentences, add_special_tokens=False)
        kept = iter(range(len(sentences)))
        for doc in docs:
            size = 0
            for _ in doc:
                i = next(kept)
                ids = np.asarray(encodings[i].ids, dtype=np.int64)
                if not len(ids):
                    continue   # e.g. a line of control characters: nothing to learn from
                words = ~self.continuation[ids]
                if self.segmenter == "jieba":
                    words &= _jieba_word_starts(sentences[i], encodings[i].offsets)
                self.token_chunks.append(ids.astype(self.dtype))
                self.word_chunks.append(words.astype(np.uint8))
                self.sentence_lengths.append(len(ids))
                self.num_tokens += len(ids)
                size += 1
            if size:
                self.doc_sizes.append(size)

    def write(self, folder: Path, name: str) -> dict:
        sentence_offsets = np.concatenate([[0], np.cumsum(self.sentence_lengths)]).astype(np.int64)
        doc_offsets = np.concatenate([[0], np.cumsum(self.doc_sizes)]).astype(np.int64)
        arrays = {"tokens": np.concatenate(self.token_chunks), "words": np.concatenate(self.word_chunks),
                  "index": np.stack([np.pad(doc_offsets, (0, len(sentence_offsets) - len(doc_offsets)),
                                            constant_values=-1), sentence_offsets])}
        for kind, array in arrays.items():
            tmp = folder / f"{name}.{kind}.tmp.npy"
            np.save(tmp, array)
            os.replace(tmp, folder / f"{name}.{kind}.npy")
        counts = {"tokens": int(self.num_tokens), "sentences": len(self.sentence_lengths),
                  "documents": len(self.doc_sizes)}
        self._reset()
        return counts


@functools.cache
def _jieba():
    """jieba (optional dependency: bertkit[zh]), its own log lines ("Building prefix dict ...": not the run's, and
    deaf to --quiet) silenced once."""
    import jieba

    jieba.setLogLevel(60)
    return jieba


def _jieba_word_starts(text: str, offsets: list[tuple[int, int]]) -> np.ndarray:
    """1 for tokens that start a jieba word: the characters of one Chinese word are masked together
    (Cui et al. 2019, Chinese BERT-wwm)."""
    jieba = _jieba()
    starts, inside = set(), set()
    position = 0
    for word in jieba.cut(text):
        starts.add(position)
        inside.update(range(position + 1, position + len(word)))
        position += len(word)
    return np.array([not (start in inside and start not in starts) for start, _ in offsets], dtype=bool)


def open_shards(folder: str | Path) -> list[Shard]:
    """Memory-map every shard of a complete build."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise BertkitError(f"{folder}: no {MANIFEST}; build the shards first")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if not manifest.get("complete"):
        raise BertkitError(f"{folder}: the shard build did not finish; run it again to resume it")
    shards = []
    for i, entry in enumerate(manifest["shards"]):
        name = entry.get("name") if isinstance(entry, dict) else None
        member(folder, name, manifest_path, f"shards[{i}].name", BertkitError)     # the manifest may be tampered
        index = np.load(folder / f"{name}.index.npy")
        docs = index[0][index[0] >= 0]
        shards.append(Shard(np.load(folder / f"{name}.tokens.npy", mmap_mode="r"),
                            np.load(folder / f"{name}.words.npy", mmap_mode="r"), index[1], docs))
    return shards


def read_manifest(folder: str | Path) -> Optional[dict]:
    path = Path(folder) / MANIFEST
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
