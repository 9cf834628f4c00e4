"""Which TF-IDF features work for sentence pairs: the baseline's blocks, compared on one split.

For pair-classification the baseline gives the linear model, per analyzer, T(a) and T(b) (each text's own
TF-IDF), T(a) * T(b) (the terms both share, weighted) and their sum, the cosine. This script fits the same
logistic regression (C chosen on dev, as `bertkit baseline` does) on subsets of those blocks and prints test
accuracy and macro-F1 for each, so the choice rests on a measurement.

    python benchmarks/tfidf_pairs.py --data-dir ../shared/data [--set bible_pairs] [--max-train 8000]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import datasets  # noqa: E402  (benchmarks/datasets.py)

from bertkit.data.readers import TextExample  # noqa: E402
from bertkit.finetune.linear.layer import C_GRID, fit_classifier, scores_metrics, to_scipy  # noqa: E402
from bertkit.finetune.linear.splits import Splits  # noqa: E402
from bertkit.finetune.linear.training import Targets, fit_tfidf_part, targets  # noqa: E402

# Per analyzer the pair blocks come as [T(a), T(b), T(a) * T(b), cosine]; these pick among them.
VARIANTS = {
    "T(a), T(b)": (0, 1),
    "T(a) * T(b), cosine": (2, 3),
    "cosine only": (3,),
    "T(a), T(b), T(a) * T(b), cosine (bertkit baseline)": (0, 1, 2, 3),
}


def examples(rows: list[dict]) -> list[TextExample]:
    return [TextExample(r["text"], r["text_pair"], r["label"], i + 1) for i, r in enumerate(rows)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=datasets.DEFAULT_DATA_DIR)
    parser.add_argument("--set", default="bible_pairs")
    parser.add_argument("--max-train", type=int, default=None, help="a stratified subset of train (faster)")
    args = parser.parse_args(argv)
    print(f"cpu: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}")
    data = datasets.load(args.set, args.data_dir)
    train, dev, test = (examples(part) for part in (datasets.subsample(data.train, args.max_train), data.dev,
                                                     data.test))
    names = sorted({ex.label for ex in train})
    splits = Splits("pair-classification", train, dev, None, names,
                    Targets(targets("pair-classification", train, names), targets("pair-classification", dev, names)))
    started = time.perf_counter()
    full = fit_tfidf_part(splits.task, train, dev, splits.y, len(names))
    spec = full.part.features
    blocks = {name: spec.tfidf_blocks(part) for name, part in (("train", train), ("dev", dev), ("test", test))}
    print(f"{args.set}: train {len(train):,} / dev {len(dev):,} / test {len(test):,} pairs; features in "
          f"{time.perf_counter() - started:.0f} s")
    gold = targets(splits.task, test, names)
    print("| features (per analyzer) | C | test accuracy | test macro-F1 | fit s |\n|---|---:|---:|---:|---:|")
    for name, picked in VARIANTS.items():
        chosen = {part: [b for i, b in enumerate(values) if i % 4 in picked] for part, values in blocks.items()}
        started = time.perf_counter()
        fitted = fit_classifier(to_scipy(chosen["train"]), splits.y.train, to_scipy(chosen["dev"]), splits.y.dev,
                                len(names), C_GRID)
        metrics = scores_metrics(splits.task, fitted.layer.scores(chosen["test"]), gold, len(names))
        print(f"| {name} | {fitted.regularization:g} | {metrics['accuracy']:.3f} | {metrics['macro_f1']:.3f} | "
              f"{time.perf_counter() - started:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
