"""How well vectors rank: retrieval metrics (recall@1/10, MRR@10, nDCG@10) and Spearman's rho.

Retrieval is exact (cosine over all corpus vectors, in chunks so memory stays bounded), so the numbers
describe the encoder, not an approximate index. Relevance is binary; a query may have several relevant
documents.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from bertkit.data.text import check_readable, iter_jsonl
from bertkit.embed.whitening import encode_composed
from bertkit.errors import BertkitError, InputFileError
from bertkit.tokenizer.tokenizer import EMPTY_TEXT


@dataclass(frozen=True)
class RetrievalMetrics:
    queries: int
    recall_at_1: float
    recall_at_10: float
    mrr_at_10: float
    ndcg_at_10: float

    def as_dict(self) -> dict:
        return asdict(self)


def _normalize(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def top_k(queries: np.ndarray, corpus: np.ndarray, k: int, chunk: int = 1024) -> np.ndarray:
    """(Q, k) corpus row indices by descending cosine similarity."""
    queries, corpus = _normalize(queries), _normalize(corpus)
    k = min(k, len(corpus))
    out = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), chunk):
        scores = queries[start:start + chunk] @ corpus.T                         # (chunk, N)
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
        out[start:start + chunk] = np.take_along_axis(part, order, axis=1)
    return out


def retrieval_metrics(query_vectors: np.ndarray, corpus_vectors: np.ndarray,
                      relevant: Sequence[set[int]]) -> RetrievalMetrics:
    """`relevant[i]` holds the corpus rows relevant to query i."""
    if len(relevant) != len(query_vectors):
        raise BertkitError(f"{len(query_vectors)} queries but {len(relevant)} relevance sets")
    ranked = top_k(query_vectors, corpus_vectors, 10)
    discounts = 1.0 / np.log2(np.arange(2, 12))
    recall1 = recall10 = mrr = ndcg = 0.0
    for row, wanted in zip(ranked, relevant):
        if not wanted:
            raise BertkitError("every query needs at least one relevant document")
        hits = np.array([int(r) in wanted for r in row[:10]], dtype=np.float64)
        recall1 += hits[:1].sum() / len(wanted)
        recall10 += hits.sum() / len(wanted)
        first = np.flatnonzero(hits)
        mrr += 1.0 / (first[0] + 1) if len(first) else 0.0
        ideal = discounts[:min(len(wanted), 10)].sum()
        ndcg += (hits * discounts[:len(hits)]).sum() / ideal
    n = len(relevant)
    return RetrievalMetrics(n, float(recall1 / n), float(recall10 / n), float(mrr / n), float(ndcg / n))


def rankdata(values: np.ndarray) -> np.ndarray:
    """Ranks starting at 1, ties given their average rank (as scipy.stats.rankdata)."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=np.float64)
    sorted_values = values[order]
    start = 0
    while start < len(values):
        stop = start
        while stop + 1 < len(values) and sorted_values[stop + 1] == sorted_values[start]:
            stop += 1
        ranks[order[start:stop + 1]] = (start + stop) / 2 + 1
        start = stop + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson correlation of the ranks)."""
    if len(a) != len(b) or len(a) < 2:
        raise BertkitError(f"Spearman needs two equally long lists of >= 2 scores (got {len(a)} and {len(b)})")
    ra, rb = rankdata(np.asarray(a)), rankdata(np.asarray(b))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denominator = np.sqrt((ra ** 2).sum() * (rb ** 2).sum())
    return float((ra * rb).sum() / denominator) if denominator > 0 else 0.0


def pair_similarities(vectors_a: np.ndarray, vectors_b: np.ndarray) -> np.ndarray:
    return (_normalize(vectors_a) * _normalize(vectors_b)).sum(axis=1)


# -- files ---------------------------------------------------------------------------------------------

def read_jsonl(path: str | Path, encoding: str = "utf-8") -> list[tuple[int, dict]]:
    path = check_readable(path, (".jsonl",))
    rows = list(iter_jsonl(path, encoding))
    if not rows:
        raise InputFileError(path, "is empty")
    return rows


def text_field(path, number: int, row: dict, field: str) -> str:
    """row[field], a non-empty string, or an InputFileError naming the file, line and field."""
    if not isinstance(row.get(field), str):
        raise InputFileError(path, f"missing string field {field!r}", line=number)
    if not row[field].strip():      # the encoder would name "text N" of a list the user never saw
        raise InputFileError(path, f"{field!r} {EMPTY_TEXT}", line=number)
    return row[field]


def _score(path, number: int, value) -> float:
    """A pair's gold score: a number, or a string that reads as one ("4.5" from a converted TSV)."""
    try:
        score = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None
    except ValueError:
        score = None
    if score is None or not np.isfinite(score):
        raise InputFileError(path, f"'score' must be a finite number, got {value!r}", line=number)
    return score


@dataclass(frozen=True)
class RetrievalTask:
    queries: list[str]
    corpus: list[str]
    relevant: list[set[int]]


def read_retrieval_files(queries_path, corpus_path) -> RetrievalTask:
    """Corpus: {"id", "text"} per line. Queries: {"text", "relevant": id or [ids]} per line."""
    corpus_rows = read_jsonl(corpus_path)
    position: dict[str, int] = {}
    corpus = []
    for number, row in corpus_rows:
        if "id" not in row:
            raise InputFileError(corpus_path, "missing field 'id'", line=number)
        if str(row["id"]) in position:
            raise InputFileError(corpus_path, f"id {row['id']!r} appears twice", line=number)
        position[str(row["id"])] = len(corpus)
        corpus.append(text_field(corpus_path, number, row, "text"))
    queries, relevant = [], []
    for number, row in read_jsonl(queries_path):
        if "relevant" not in row:
            raise InputFileError(queries_path, f"missing field 'relevant' (the corpus id or ids this query should "
                                               f"find; fields: {', '.join(map(str, row))})", line=number)
        wanted = row["relevant"]
        wanted = wanted if isinstance(wanted, list) else [wanted]
        missing = [w for w in wanted if str(w) not in position]
        if wanted == [None] or missing:
            raise InputFileError(queries_path, f"'relevant' must name corpus ids; not in the corpus: "
                                               f"{missing or [None]}", line=number)
        queries.append(text_field(queries_path, number, row, "text"))
        relevant.append({position[str(w)] for w in wanted})
    return RetrievalTask(queries, corpus, relevant)


def read_pairs(path, encoding: str = "utf-8", limit: int | None = None
               ) -> tuple[list[str], list[str], list[float] | None]:
    """{"text_a", "text_b"[, "score"]} per line: scored pairs (Spearman) or paraphrase pairs (retrieval); the first
    `limit` rows only when given."""
    a, b, scores = [], [], []
    for number, row in read_jsonl(path, encoding)[:limit]:
        a.append(text_field(path, number, row, "text_a"))
        b.append(text_field(path, number, row, "text_b"))
        if "score" in row:
            scores.append(_score(path, number, row["score"]))
    if scores and len(scores) != len(a):
        raise InputFileError(path, "some rows have a 'score' and some do not; score every pair or none")
    return a, b, scores or None


def paraphrase_targets(texts_b: Sequence[str]) -> tuple[list[str], list[set[int]]]:
    """Unlabelled pairs as retrieval: the distinct text_b form the corpus (a text shared by several pairs is one
    document, so finding it counts for each of them), and pair i's relevant document is its own text_b."""
    corpus = list(dict.fromkeys(texts_b))
    where = {t: i for i, t in enumerate(corpus)}
    return corpus, [{where[t]} for t in texts_b]


def evaluate_model(model, queries=None, corpus=None, pairs=None, pooling: str | None = None,
                   layers: str | None = None, batch_size: int = 64, max_length: int | None = None,
                   progress: bool = False) -> dict:
    """Metrics of a loaded model's (`bertkit.load(folder)`) full composition (pooling, saved whitening) on the
    given files."""
    if not pairs and not (queries and corpus):
        raise BertkitError("pass --queries and --corpus (retrieval), or --pairs (scored or paraphrase pairs)")

    def encode(texts):
        return encode_composed(model, texts, batch_size=batch_size, max_length=max_length, pooling=pooling,
                               layers=layers, normalize=False, progress=progress)

    results: dict = {}
    if queries and corpus:
        task = read_retrieval_files(queries, corpus)
        results["retrieval"] = retrieval_metrics(encode(task.queries), encode(task.corpus), task.relevant).as_dict()
    if pairs:
        a, b, scores = read_pairs(pairs)
        if scores is not None:
            results["spearman"] = spearman(pair_similarities(encode(a), encode(b)), scores)
        else:
            corpus, relevant = paraphrase_targets(b)
            metrics = retrieval_metrics(encode(a), encode(corpus), relevant)
            results["pairs_retrieval"] = metrics.as_dict()
    return results
