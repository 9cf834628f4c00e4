"""A 1M-vector index through bertkit's Index (SQLite documents + Faiss, IVF chosen by size): build, add,
delete, search; build time, peak RSS, p50/p99 latency of one query at a time, recall@10 against exact search.

Vectors: all-MiniLM-L6-v2 vectors (mean pooling, normalized) of `--seeds` real lines of en_corpus.txt.gz,
each repeated with Gaussian noise (per-dimension sigma 0.038: cosine ~0.8 to its seed) and normalized again,
so the collection has the clustered shape of real embeddings at 1M scale. Queries: `--queries` other real
lines (not seeds). Ground truth: faiss.IndexFlatIP over the same vectors (exact). `--vectors random`: uniform
random unit vectors and queries instead, the worst case for IVF (no cluster structure).

Each phase runs in its own process so that its peak RSS is its own:
  build   Index.create + add(1M ids, texts, vectors) in chunks + save (flat until save, then IVF is trained)
  add     open the saved index, add --add more vectors, save
  delete  open, delete --delete ids, save
  query   open, one query at a time through Index.search (vector in, documents out), k=10

    python benchmarks/index_scale.py --corpus ../shared/data/en_corpus.txt.gz --count 1000000 [--threads 2]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import cpu_description

CHUNK = 100_000
NOISE = 0.038


def peak_rss_mib() -> float:
    """This process's high-water RSS (VmHWM: unlike ru_maxrss, not inherited from the parent across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def vectors(seeds: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Rows start..stop of the collection: seed (row % seeds) plus noise seeded by the chunk, normalized;
    with no seeds (random mode), uniform random unit vectors."""
    out = []
    for chunk in range(start // CHUNK, -(-stop // CHUNK)):
        lo, hi = chunk * CHUNK, (chunk + 1) * CHUNK
        rng = np.random.default_rng([7, chunk])
        rows = rng.normal(0, NOISE, (CHUNK, seeds.shape[1])).astype(np.float32)
        if len(seeds):
            rows += seeds[np.arange(lo, hi) % len(seeds)]
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        out.append(rows[max(start, lo) - lo:min(stop, hi) - lo])
    return np.concatenate(out).astype(np.float32)


def encode_real(corpus: Path, seeds: int, queries: int, workdir: Path) -> None:
    import bertkit
    from bertkit.api import minilm_path
    lines, seen = [], set()
    with gzip.open(corpus, "rt", encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if 20 <= len(line) <= 400 and line not in seen:
                seen.add(line)
                lines.append(line)
            if len(lines) >= seeds + queries:
                break
    model = bertkit.load(minilm_path())
    encoded = model.encode(lines, pooling="mean", normalize=True, batch_size=64)
    np.save(workdir / "seeds.npy", encoded[:seeds])
    np.save(workdir / "queries.npy", encoded[seeds:seeds + queries])


def random_queries(dim: int, seeds: int, queries: int, workdir: Path) -> None:
    """The worst case for IVF: no cluster structure at all (uniform random unit vectors)."""
    rows = np.random.default_rng(99).normal(size=(queries, dim)).astype(np.float32)
    np.save(workdir / "seeds.npy", np.zeros((0, dim), np.float32))
    np.save(workdir / "queries.npy", rows / np.linalg.norm(rows, axis=1, keepdims=True))


def phase(name: str, args, workdir: Path) -> dict:
    import faiss
    faiss.omp_set_num_threads(args.threads)
    from bertkit.search import Index
    seeds = np.load(workdir / "seeds.npy")
    folder = workdir / "index"
    started = time.perf_counter()
    report: dict = {"phase": name}
    if name == "build":
        index = Index.create(folder, dim=np.load(workdir / "queries.npy").shape[1])
        for lo in range(0, args.count, CHUNK):
            hi = min(lo + CHUNK, args.count)
            index.add([f"v{i}" for i in range(lo, hi)], [f"doc {i}" for i in range(lo, hi)], vectors(seeds, lo, hi))
        added = time.perf_counter()
        info = index.save()
        report.update(add_s=added - started, save_s=time.perf_counter() - added, info=info.__dict__)
        index.close()
    elif name == "add":
        index = Index.open(folder)
        lo, hi = args.count, args.count + args.add
        index.add([f"v{i}" for i in range(lo, hi)], [f"doc {i}" for i in range(lo, hi)], vectors(seeds, lo, hi))
        report["info"] = index.save().__dict__
        index.close()
    elif name == "delete":
        index = Index.open(folder)
        missing = index.delete([f"v{i}" for i in range(0, args.delete)])
        report["info"] = index.save().__dict__
        report["missing"] = len(missing)
        index.close()
    elif name == "query":
        index = Index.open(folder)
        opened = time.perf_counter()
        queries = np.load(workdir / "queries.npy")
        latencies, found = [], []
        for query in queries:
            t = time.perf_counter()
            hits = index.search(query, k=10)
            latencies.append(time.perf_counter() - t)
            found.append([int(h.id[1:]) for h in hits])
        report.update(open_s=opened - started, p50_ms=1000 * float(np.percentile(latencies, 50)),
                      p99_ms=1000 * float(np.percentile(latencies, 99)), info=index.info().__dict__)
        np.save(workdir / "found.npy", np.asarray(found, dtype=np.int64))
        index.close()
    report["seconds"] = time.perf_counter() - started
    report["peak_rss_mib"] = peak_rss_mib()
    return report


def exact_top10(seeds: np.ndarray, queries: np.ndarray, total: int, deleted: int, threads: int) -> np.ndarray:
    import faiss
    faiss.omp_set_num_threads(threads)
    flat = faiss.IndexFlatIP(queries.shape[1])
    for lo in range(deleted, total, CHUNK):
        flat.add(vectors(seeds, lo, min(lo + CHUNK, total)))
    _, rows = flat.search(queries, 10)
    return rows + deleted           # flat rows count from the first kept vector


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", type=Path, default=Path("../shared/data/en_corpus.txt.gz"))
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--add", type=int, default=100_000)
    parser.add_argument("--delete", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vectors", choices=("real", "random"), default="real",
                        help="real: noisy copies of MiniLM vectors of real lines; random: uniform unit vectors")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args, args.workdir)))
        return
    import torch
    torch.set_num_threads(args.threads)
    print(f"# {cpu_description()}; {args.threads} threads; load {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if args.vectors == "real":
            encode_real(args.corpus, args.seeds, args.queries, workdir)
        else:
            random_queries(384, args.seeds, args.queries, workdir)
        base = [sys.executable, __file__, "--workdir", str(workdir)] + [
            f"--{k}={v}" for k, v in (("count", args.count), ("add", args.add), ("delete", args.delete),
                                      ("threads", args.threads))]
        seeds, queries = np.load(workdir / "seeds.npy"), np.load(workdir / "queries.npy")
        results = {}

        def run(name: str) -> dict:
            out = subprocess.run(base + ["--phase", name], check=True, capture_output=True, text=True)
            results[name] = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(results[name]), flush=True)
            return results[name]

        run("build")
        run("query")
        print(json.dumps({"recall@10": recall(np.load(workdir / "found.npy"),
                                              exact_top10(seeds, queries, args.count, 0, args.threads)),
                          "vectors": args.count}), flush=True)
        run("add")
        run("delete")
        run("query")
        found = np.load(workdir / "found.npy")
        print(json.dumps({"recall@10": recall(found, exact_top10(seeds, queries, args.count + args.add,
                                                                 args.delete, args.threads)),
                          "vectors": args.count + args.add - args.delete,
                          "deleted_ids_returned": int((found < args.delete).sum())}), flush=True)
    print(f"# load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
