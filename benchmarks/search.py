"""Semantic search end to end: `bertkit index build` + `bertkit search` vs sentence-transformers + Faiss.

Task (from the Bible paraphrase pairs): for each old verse (KJV, `text_a`) retrieve its modern rendering
(WEB, `text_b`) among all test verses. Both sides use all-MiniLM-L6-v2 (mean pooling, normalized, cosine):
  bertkit:   the CLI commands, run in this process (index build from a documents .jsonl, then one
             `search` call with every query), output parsed from the printed JSON lines;
  reference: SentenceTransformer.encode(normalize_embeddings=True) + faiss.IndexFlatIP.
Reports recall@1 of both (they should agree to 0.005) and end-to-end indexing and query throughput
(model loading included on both sides, as a user would see it).

    python benchmarks/search.py --data /path/to/bible_pairs_test.jsonl.gz [--limit 500] [--threads 2]
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np


def load_pairs(path: Path, limit: int | None) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return rows[:limit] if limit else rows


def run_bertkit(rows: list[dict], model_dir: Path, workdir: Path, kind: str) -> dict:
    from bertkit.cli import main

    docs = workdir / "docs.jsonl"
    with open(docs, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps({"id": row["ref"], "text": row["text_b"], "book": row["ref"].rsplit(" ", 1)[0]},
                                    ensure_ascii=False) + "\n")
    index = workdir / "index"
    started = time.perf_counter()
    code = main(["index", "build", "--model", str(model_dir), "--input", str(docs), "--index", str(index),
                 "--kind", kind, "--batch-size", "64"])
    build_s = time.perf_counter() - started
    assert code == 0, "index build failed"
    queries = [row["text_a"] for row in rows]
    argv = ["search", "--index", str(index), "-k", "1"]
    for query in queries:
        argv += ["--query", query]
    out = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    search_s = time.perf_counter() - started
    assert code == 0, "search failed"
    hits = [json.loads(line) for line in out.getvalue().splitlines()]
    top = {}
    for hit in hits:
        top.setdefault(hit["query"] if len(queries) > 1 else queries[0], hit["id"])
    # Queries may repeat verbatim (identical KJV verses); compare per row through the query text.
    correct = sum(top.get(row["text_a"]) == row["ref"] for row in rows)
    return {"recall_at_1": correct / len(rows), "index_s": build_s, "query_s": search_s}


def run_reference(rows: list[dict], model_dir: Path) -> dict:
    import faiss
    from sentence_transformers import SentenceTransformer

    started = time.perf_counter()
    model = SentenceTransformer(str(model_dir), device="cpu")
    corpus = model.encode([row["text_b"] for row in rows], batch_size=64, normalize_embeddings=True,
                          convert_to_numpy=True)
    index = faiss.IndexFlatIP(corpus.shape[1])
    index.add(np.ascontiguousarray(corpus, dtype=np.float32))
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    model = SentenceTransformer(str(model_dir), device="cpu")   # a fresh process would load it again
    queries = model.encode([row["text_a"] for row in rows], batch_size=64, normalize_embeddings=True,
                           convert_to_numpy=True)
    _, ids = index.search(np.ascontiguousarray(queries, dtype=np.float32), 1)
    query_s = time.perf_counter() - started
    # Same rule as the bertkit side: a repeated query text counts as its first occurrence's answer.
    first = {}
    for row, hit in zip(rows, ids[:, 0]):
        first.setdefault(row["text_a"], rows[int(hit)]["ref"])
    correct = sum(first[row["text_a"]] == row["ref"] for row in rows)
    return {"recall_at_1": correct / len(rows), "index_s": index_s, "query_s": query_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data/bible_pairs_test.jsonl.gz")
    parser.add_argument("--limit", type=int, default=None, help="first N pairs only")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both sides")
    parser.add_argument("--kind", default="auto", help="bertkit index kind (auto|flat|ivf|ivfpq)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()

    import torch
    from bertkit.api import minilm_path

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = load_pairs(Path(args.data), args.limit)
    model_dir = minilm_path()
    with tempfile.TemporaryDirectory() as tmp:
        ours = run_bertkit(rows, model_dir, Path(tmp), args.kind)
    reference = run_reference(rows, model_dir)
    n = len(rows)
    result = {
        "data": str(args.data), "pairs": n, "model": "all-MiniLM-L6-v2", "torch_threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "bertkit": {**ours, "index_docs_per_s": n / ours["index_s"], "queries_per_s": n / ours["query_s"]},
        "reference": {**reference, "index_docs_per_s": n / reference["index_s"],
                      "queries_per_s": n / reference["query_s"]},
    }
    result["recall_at_1_diff"] = abs(ours["recall_at_1"] - reference["recall_at_1"])
    result["same_recall_within_0.005"] = result["recall_at_1_diff"] <= 0.005
    print(json.dumps(result, indent=2))
    print("\n| pipeline | recall@1 | indexing docs/s | queries/s |\n|---|---:|---:|---:|")
    for name, label in (("bertkit", "bertkit index build + search (CLI)"),
                        ("reference", "sentence-transformers + faiss.IndexFlatIP")):
        r = result[name]
        print(f"| {label} | {r['recall_at_1']:.4f} | {r['index_docs_per_s']:.1f} | {r['queries_per_s']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
