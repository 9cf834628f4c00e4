"""Issue 19: TF-IDF and a model's vectors in ONE logistic regression, against the TF-IDF part alone.

`bertkit finetune --method hybrid` stacks two parts (TF-IDF, the frozen model's vectors) or pools a fine-tuned
model's probabilities with TF-IDF. This measures the other reading of "one linear model over TF-IDF features and
the model's vectors": the standardized vectors appended to the TF-IDF features with a block weight w, w and C
chosen on dev, scored on test. Each row prints dev and test accuracy; the best-on-dev row is the one to read.

    python benchmarks/hybrid_joint.py --model MODEL_DIR --data-dir ../shared/data --set chnsenticorp_like \
        --cache /tmp/joint_vectors

Vectors come from bertkit's cache (`--cache`; `--method hybrid`'s run/vectors folder of the same model is reused).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from bertkit.checkpoints import load_checkpoint
from bertkit.finetune.linear.features import FeatureSpec, VectorBlock
from bertkit.finetune.linear.layer import C_GRID
from bertkit.finetune.linear.splits import read_splits
from bertkit.finetune.linear.training import fit_part, fit_tfidf_part, fit_vector_part
from bertkit.finetune.linear.vectors import cached_vectors, encoding_of, model_fingerprint


def accuracy(scores, gold) -> float:
    return float((scores.argmax(-1) == gold).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--set", default="chnsenticorp_like")
    parser.add_argument("--cache", required=True, help="vector cache folder")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.03, 0.1, 0.3])
    args = parser.parse_args()
    started = time.time()
    prefix = f"{args.data_dir}/{args.set}_"
    splits = read_splits("classification", prefix + "train.jsonl.gz", prefix + "dev.jsonl.gz",
                         prefix + "test.jsonl.gz")
    checkpoint = load_checkpoint(args.model)
    encoding = encoding_of(checkpoint)
    model_hash = model_fingerprint(Path(args.model))
    vectors = {split: cached_vectors(Path(args.cache), checkpoint, examples, encoding, False, model_hash, split)
               for split, examples in (("train", splits.train), ("dev", splits.dev), ("test", splits.test))}
    y, k, gold = splits.y, splits.num_labels, splits.test_targets()
    tfidf = fit_tfidf_part("classification", splits.train, splits.dev, y, k)
    spec = tfidf.part.features
    blocks = {name: spec.tfidf_blocks(examples)
              for name, examples in (("train", splits.train), ("dev", splits.dev), ("test", splits.test))}
    print(f"tfidf: C {tfidf.fitted.regularization}, dev {accuracy(tfidf.dev_scores, y.dev):.4f}, test "
          f"{accuracy(tfidf.part.layer.scores(blocks['test']), gold):.4f}", flush=True)
    probe = fit_vector_part("classification", vectors["train"], vectors["dev"], y, k, encoding)
    print(f"vectors: C {probe.fitted.regularization}, dev {accuracy(probe.dev_scores, y.dev):.4f}, test "
          f"{accuracy(probe.part.scores(splits.test, vectors['test']), gold):.4f}", flush=True)
    rows = []
    for weight in args.weights:
        block = VectorBlock.fit(encoding.pooling, encoding.normalize, encoding.max_length, vectors["train"], weight)
        joint = fit_part("classification", FeatureSpec(spec.tfidf, False, block),
                         blocks["train"] + [block.apply(vectors["train"])],
                         blocks["dev"] + [block.apply(vectors["dev"])], y, k, C_GRID)
        test = accuracy(joint.part.layer.scores(blocks["test"] + [block.apply(vectors["test"])]), gold)
        rows.append((accuracy(joint.dev_scores, y.dev), weight, joint.fitted.regularization, test))
        print(f"joint w {weight}: C {rows[-1][2]}, dev {rows[-1][0]:.4f}, test {test:.4f}", flush=True)
    dev, weight, c, test = max(rows)
    print(f"best on dev: joint w {weight}, C {c}: dev {dev:.4f}, test {test:.4f}; {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
