"""TF-IDF features computed exactly as scikit-learn's TfidfVectorizer computes them, without scikit-learn.

A saved folder holds each block's analyzer, vocabulary (term -> column) and idf; `TfidfBlock.transform`
re-implements the vectorizer's transform step by step, so a reloaded model gives the same numbers as the
fitted scikit-learn pipeline (a test holds them to 1e-6):
  analyzer (lower-case, then word n-grams of `(?u)\\b\\w\\w+\\b` tokens, or character n-grams: `char_wb`
  pads each whitespace-separated word with a space, `char` runs over the whole text after runs of
  whitespace become one space; `jieba`: jieba's words, unigrams and bigrams) -> counts of in-vocabulary
  terms -> sublinear tf (1 + ln count) -> x idf -> L2 norm per block.
Fitting (fit_tfidf_blocks) needs scikit-learn; loading and transforming need numpy only (and jieba for a
block that was fitted with it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, NamedTuple, Optional, Sequence

import numpy as np

from bertkit.errors import BertkitError

AnalyzerKind = Literal["word", "char_wb", "char", "jieba"]
TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")     # scikit-learn's default token_pattern
_WHITE_SPACES = re.compile(r"\s\s+")              # scikit-learn's _white_spaces


@dataclass(frozen=True)
class Analyzer:
    kind: AnalyzerKind
    ngram_min: int = 1
    ngram_max: int = 1

    def __call__(self, text: str) -> list[str]:
        if self.kind == "jieba":
            return _word_ngrams(jieba_words(text), self.ngram_min, self.ngram_max)
        text = text.lower()
        if self.kind == "word":
            return _word_ngrams(TOKEN_PATTERN.findall(text), self.ngram_min, self.ngram_max)
        if self.kind == "char_wb":
            return _char_wb_ngrams(text, self.ngram_min, self.ngram_max)
        return _char_ngrams(text, self.ngram_min, self.ngram_max)


def _word_ngrams(tokens: list[str], min_n: int, max_n: int) -> list[str]:
    grams = list(tokens) if min_n == 1 else []
    for n in range(max(min_n, 2), min(max_n + 1, len(tokens) + 1)):
        grams.extend(" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    return grams


def _char_ngrams(text: str, min_n: int, max_n: int) -> list[str]:
    text = _WHITE_SPACES.sub(" ", text)
    grams = list(text) if min_n == 1 else []
    for n in range(max(min_n, 2), min(max_n + 1, len(text) + 1)):
        grams.extend(text[i:i + n] for i in range(len(text) - n + 1))
    return grams


def _char_wb_ngrams(text: str, min_n: int, max_n: int) -> list[str]:
    grams = []
    for word in _WHITE_SPACES.sub(" ", text).split():
        word = f" {word} "
        for n in range(min_n, max_n + 1):
            grams.extend(word[i:i + n] for i in range(max(1, len(word) - n + 1)))
            if len(word) <= n:          # a word shorter than n is counted once (as scikit-learn does)
                break
    return grams


def jieba_words(text: str) -> list[str]:
    """Lower-cased jieba words (precise mode), whitespace dropped."""
    try:
        import jieba
    except ImportError:
        raise BertkitError("this model's TF-IDF features include jieba words: pip install jieba "
                           "(or pip install 'bertkit[zh]')") from None
    jieba.setLogLevel(60)   # no "Building prefix dict" lines on every first use
    return [w for w in jieba.lcut(text.lower()) if w.strip()]


def jieba_available() -> bool:
    try:
        import jieba  # noqa: F401
    except ImportError:
        return False
    return True


def is_chinese(texts: Sequence[str], sample: int = 2000) -> bool:
    """True when at least a third of the non-space characters (of the first `sample` texts) are CJK."""
    chars = cjk = 0
    for text in texts[:sample]:
        for ch in text:
            if not ch.isspace():
                chars += 1
                cjk += "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf"
    return chars > 0 and cjk / chars >= 1 / 3


def default_analyzers(texts: Sequence[str]) -> list[Analyzer]:
    """English and other space-separated text: word 1-2-grams + char_wb 2-5-grams. Chinese: character
    1-3-grams, plus jieba words (1-2-grams) when jieba is installed."""
    if is_chinese(texts):
        return [Analyzer("char", 1, 3)] + ([Analyzer("jieba", 1, 2)] if jieba_available() else [])
    return [Analyzer("word", 1, 2), Analyzer("char_wb", 2, 5)]


class SparseRows(NamedTuple):
    """Rows of a sparse matrix in CSR form (what scipy.sparse.csr_matrix holds), numpy only."""
    indptr: np.ndarray       # (N + 1,) int64
    indices: np.ndarray      # (nnz,) int64 column of each value
    data: np.ndarray         # (nnz,) float64
    width: int               # number of columns

    def dot(self, weight: np.ndarray, chunk_values: int = 1 << 18) -> np.ndarray:
        """(N, width) @ (width, K) -> (N, K), float64; rows in chunks of about `chunk_values` stored values."""
        rows = len(self.indptr) - 1
        out = np.zeros((rows, weight.shape[1]), dtype=np.float64)
        start = 0
        while start < rows:
            stop = int(np.searchsorted(self.indptr, self.indptr[start] + chunk_values, side="right")) - 1
            stop = min(max(stop, start + 1), rows)
            span = slice(self.indptr[start], self.indptr[stop])
            products = weight[self.indices[span]].astype(np.float64) * self.data[span, None]   # (nnz, K)
            _row_sums(out[start:stop], products, self.indptr[start:stop + 1] - self.indptr[start])
            start = stop
        return out

    def multiply(self, other: "SparseRows") -> "SparseRows":
        """Elementwise product of two matrices of the same shape (column indices sorted per row)."""
        indptr, indices, data = [0], [], []
        for r in range(len(self.indptr) - 1):
            a = slice(self.indptr[r], self.indptr[r + 1])
            b = slice(other.indptr[r], other.indptr[r + 1])
            common, ia, ib = np.intersect1d(self.indices[a], other.indices[b], assume_unique=True,
                                            return_indices=True)
            indices.append(common)
            data.append(self.data[a][ia] * other.data[b][ib])
            indptr.append(indptr[-1] + len(common))
        return SparseRows(np.asarray(indptr, dtype=np.int64), _concat(indices, np.int64), _concat(data, np.float64),
                          self.width)

    def row_sums(self) -> np.ndarray:
        sums = np.zeros(len(self.indptr) - 1)
        _row_sums(sums[:, None], self.data[:, None], self.indptr)
        return sums


def _row_sums(out: np.ndarray, values: np.ndarray, indptr: np.ndarray) -> None:
    """out[r] += sum of values[indptr[r]:indptr[r+1]] for every non-empty row r."""
    nonempty = np.flatnonzero(np.diff(indptr))
    if nonempty.size:
        out[nonempty] += np.add.reduceat(values, indptr[nonempty], axis=0)


def _concat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)


@dataclass
class TfidfBlock:
    """One vectorizer: its analyzer, vocabulary (term -> column) and idf (float64, one per column)."""
    analyzer: Analyzer
    vocabulary: dict[str, int]
    idf: np.ndarray

    @property
    def width(self) -> int:
        return len(self.idf)

    def transform(self, texts: Sequence[str]) -> SparseRows:
        indptr, indices, counts = [0], [], []
        for text in texts:
            row: dict[int, int] = {}
            for term in self.analyzer(text):
                column = self.vocabulary.get(term)
                if column is not None:
                    row[column] = row.get(column, 0) + 1
            order = sorted(row)
            indices.extend(order)
            counts.extend(row[c] for c in order)
            indptr.append(len(indices))
        columns = np.asarray(indices, dtype=np.int64)
        values = np.log(np.asarray(counts, dtype=np.float64)) + 1.0 if counts else np.zeros(0)   # sublinear tf
        values *= self.idf[columns]
        pointer = np.asarray(indptr, dtype=np.int64)
        norms = np.zeros(len(texts))
        _row_sums(norms[:, None], (values * values)[:, None], pointer)
        norms = np.sqrt(norms)
        norms[norms == 0.0] = 1.0                   # an empty row stays zero (sklearn's normalize does the same)
        values /= np.repeat(norms, np.diff(pointer))
        return SparseRows(pointer, columns, values, self.width)


def fit_tfidf_blocks(analyzers: Sequence[Analyzer], texts: Sequence[str], min_df: int = 1,
                     max_features: Optional[int] = None) -> tuple[list[TfidfBlock], list]:
    """Fit one scikit-learn TfidfVectorizer per analyzer; returns our blocks and the fitted vectorizers
    (the reference the saved blocks are checked against)."""
    vectorizers = [sklearn_vectorizer(a, min_df, max_features).fit(texts) for a in analyzers]
    blocks = []
    for analyzer, vectorizer in zip(analyzers, vectorizers):
        vocabulary = {term: int(column) for term, column in vectorizer.vocabulary_.items()}
        blocks.append(TfidfBlock(analyzer, vocabulary, np.asarray(vectorizer.idf_, dtype=np.float64)))
    return blocks, vectorizers


def sklearn_vectorizer(analyzer: Analyzer, min_df: int = 1, max_features: Optional[int] = None):
    from sklearn.feature_extraction.text import TfidfVectorizer

    common = dict(sublinear_tf=True, min_df=min_df, max_features=max_features, dtype=np.float64)
    if analyzer.kind == "jieba":
        return TfidfVectorizer(analyzer=analyzer, **common)
    return TfidfVectorizer(analyzer=analyzer.kind, ngram_range=(analyzer.ngram_min, analyzer.ngram_max),
                           lowercase=True, **common)
