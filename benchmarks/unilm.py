"""UniLM seq2seq paraphrasing on the Bible pairs: does a BERT MLM fine-tuned with the seq2seq mask turn a King
James verse into text closer to its modern (World English Bible) version than the KJV verse itself is?

    python benchmarks/unilm.py --data-dir ../shared/data --model runs/en-mlm --max-train-examples 20000 \
        --epochs 2 --test-pairs 300 --json unilm.json

Data: bible_pairs_{train,test}.jsonl.gz of the developer data kit, text_a = KJV verse (source), text_b = WEB
verse (target); train and test hold different books. Training: `bertkit finetune --task seq2seq` (in-process:
run_seq2seq_finetune) on a seeded random sample of the training pairs, no dev set. Evaluation on a seeded random
sample of N test pairs (`--test-pairs`), greedy decoding unless `--num-beams` (beam search) or
`--no-repeat-ngram-size` (never repeat an n-gram of the output) ask otherwise:

Retrieval metric: the N WEB targets form the collection (and, second table rows, all 2,990 test targets), weighted by TF-IDF (lowercased word tokens, idf from
the N targets, smoothed: log((1 + N) / (1 + df)) + 1, l2-normalized). For each source verse, the query is
either the generated text (UniLM) or the KJV source itself (copy-the-input baseline); the rank of its true
target among all N targets by cosine gives MRR and recall@1 / @5 (ties count against the query: rank = 1 +
number of targets scoring >= the true one, minus itself). Also reported: the mean cosine of each query to its
own target, and the teacher-forced target loss per token on the same N pairs.
"""
from __future__ import annotations

from bertkit.job_config import job_config
import argparse
import gzip
import json
import math
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def read_rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def words(text: str) -> list[str]:
    return WORD.findall(text.lower().replace("\u2019", "'"))


class TfidfIndex:
    """TF-IDF vectors of a collection of texts; rank(query, i) = rank of text i for the query."""

    def __init__(self, texts: list[str]):
        docs = [Counter(words(t)) for t in texts]
        df = Counter(w for doc in docs for w in doc)
        self.vocab = {w: j for j, w in enumerate(sorted(df))}
        n = len(texts)
        self.idf = np.array([math.log((1 + n) / (1 + df[w])) + 1 for w in sorted(df)])
        self.matrix = np.stack([self.vector(doc) for doc in docs])

    def vector(self, counts: Counter) -> np.ndarray:
        v = np.zeros(len(self.vocab))
        for w, c in counts.items():
            j = self.vocab.get(w)
            if j is not None:
                v[j] = c * self.idf[j]
        norm = np.linalg.norm(v)
        return v / norm if norm else v

    def ranks(self, queries: list[str], owns: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Rank (1 = best) of text owns[i] (default: i) for query i, and the cosine of query i to it."""
        sims = np.stack([self.vector(Counter(words(q))) for q in queries]) @ self.matrix.T   # (N, collection)
        own = sims[np.arange(len(queries)), np.asarray(owns if owns is not None else range(len(queries)))]
        return (sims >= own[:, None]).sum(axis=1), own


def retrieval(ranks: np.ndarray, own: np.ndarray) -> dict:
    return {"mrr": float((1.0 / ranks).mean()), "recall@1": float((ranks == 1).mean()),
            "recall@5": float((ranks <= 5).mean()), "mean_cosine_to_target": float(own.mean())}


def write_training_pairs(data: Path, seed: int, limit: int | None, path: Path) -> int:
    """A seeded random sample of bible_pairs_train as {"text_a", "text_b"} JSONL (what read_pairs reads) -> rows."""
    rows = read_rows(data / "bible_pairs_train.jsonl.gz")
    random.Random(seed).shuffle(rows)      # the file is in canonical order: sample all books
    rows = rows[:limit]
    path.write_text("".join(json.dumps({"text_a": r["text_a"], "text_b": r["text_b"]}, ensure_ascii=False) + "\n"
                            for r in rows), encoding="utf-8")
    return len(rows)


def train(args, data: Path, output: Path) -> dict:
    from bertkit.finetune.seq2seq.job import Seq2SeqConfig, run_seq2seq_finetune

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.jsonl"
        count = write_training_pairs(data, args.seed, args.max_train_examples, path)
        config = job_config(Seq2SeqConfig, model=args.model, train=str(path), output=str(output), epochs=args.epochs, lr=args.lr,
                               batch_size=args.batch_size, max_length=args.max_length, seed=args.seed,
                               progress_bar=False, device=args.device, precision=args.precision)
        started = time.perf_counter()
        result = run_seq2seq_finetune(config)
    return {"train_pairs": count, "epochs": result.epochs, "steps": result.steps,
            "train_seconds": result.train_seconds, "wall_seconds": time.perf_counter() - started}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--model", required=True, help="a bertkit MLM folder (English vocabulary) to fine-tune")
    parser.add_argument("--output", type=Path, default=None, help="the fine-tuned folder (default: temp)")
    parser.add_argument("--skip-training", action="store_true", help="evaluate --output as it is")
    parser.add_argument("--max-train-examples", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=80, help="[CLS] source [SEP] target [SEP] tokens")
    parser.add_argument("--test-pairs", type=int, default=300)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--num-beams", type=int, default=1, help="beam search width (default 1 = greedy)")
    parser.add_argument("--no-repeat-ngram-size", type=int, default=0, help="ban repeated n-grams (0 = off)")
    parser.add_argument("--examples", type=int, default=5, help="example outputs to print")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                        help="training precision (bf16: autocast on CPU too; fast with AMX)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    from bertkit.finetune.seq2seq.job import Pair, Seq2SeqGenerator, evaluate_pairs

    with tempfile.TemporaryDirectory() as tmp:
        output = args.output or Path(tmp) / "unilm"
        report = {"model": args.model, "settings": {k: getattr(args, k) for k in (
            "max_train_examples", "epochs", "lr", "batch_size", "max_length", "test_pairs", "max_new_tokens",
            "num_beams", "no_repeat_ngram_size", "seed", "precision")}}
        if not args.skip_training:
            report["training"] = train(args, args.data_dir, output)
            print(f"trained: {report['training']}", file=sys.stderr, flush=True)
        all_test = read_rows(args.data_dir / "bible_pairs_test.jsonl.gz")
        picked = random.Random(args.seed).sample(range(len(all_test)), min(args.test_pairs, len(all_test)))
        test = [all_test[i] for i in picked]
        sources, targets = [r["text_a"] for r in test], [r["text_b"] for r in test]
        generator = Seq2SeqGenerator(output, args.device)
        pairs = [Pair(s, t, i) for i, (s, t) in enumerate(zip(sources, targets))]
        report["test_loss"] = evaluate_pairs(generator.model, generator.tokenizer, pairs, generator.max_length)
        started = time.perf_counter()
        generated = generator.decode(sources, args.max_new_tokens, num_beams=args.num_beams,
                                     no_repeat_ngram_size=args.no_repeat_ngram_size)
        report["decode_seconds"] = time.perf_counter() - started
    index = TfidfIndex(targets)
    report["unilm"] = retrieval(*index.ranks(generated))
    report["copy"] = retrieval(*index.ranks(sources))
    # the harder collection: every WEB verse of the test books, so near-duplicate verses compete too
    everything = TfidfIndex([r["text_b"] for r in all_test])
    report["unilm_all"] = retrieval(*everything.ranks(generated, picked))
    report["copy_all"] = retrieval(*everything.ranks(sources, picked))
    report["examples"] = [{"ref": r["ref"], "source": s, "generated": g, "target": t}
                          for r, s, g, t in list(zip(test, sources, generated, targets))[:args.examples]]
    report["generated"] = generated          # all outputs, in test-sample order, for inspection
    print(f"\n{len(test)} test pairs (seed {args.seed}); rank of the true WEB verse by TF-IDF cosine to the query, "
          f"among the {len(test)} sampled targets or all {len(all_test)} test targets")
    print("| query | collection | MRR | recall@1 | recall@5 | mean cosine to own target |\n"
          "|---|---|---:|---:|---:|---:|")
    for suffix, collection in (("", f"{len(test)} sampled"), ("_all", f"all {len(all_test)}")):
        for name, label in (("copy", "KJV source (copy the input)"), ("unilm", "UniLM output")):
            r = report[name + suffix]
            print(f"| {label} | {collection} | {r['mrr']:.3f} | {r['recall@1']:.3f} | {r['recall@5']:.3f} | "
                  f"{r['mean_cosine_to_target']:.3f} |")
    print(f"\nteacher-forced target loss {report['test_loss']['loss']:.3f} (perplexity "
          f"{report['test_loss']['perplexity']:.1f}); decoding {report['decode_seconds']:.0f} s")
    for ex in report["examples"]:
        print(f"\n{ex['ref']}\n  KJV: {ex['source']}\n  gen: {ex['generated']}\n  WEB: {ex['target']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
