"""A residual hybrid (issue 19, a measurement): fine-tune the model on top of the TF-IDF model's opinion, so that it
learns what TF-IDF gets wrong, instead of pooling two models trained apart.

    python benchmarks/hybrid_residual.py --set chnsenticorp_like --model DIR --work /tmp/residual [--seed 42]

1. The TF-IDF baseline (the toolkit's `fit_baseline`: C chosen on dev) is fitted on train. Its log-probabilities
   are the prior: for each training row OUT-OF-FOLD (5 refits without that row's fold, at the chosen C, as the
   hybrid's stacker gets them), for dev and test from the model fitted on all of train. (In-fold train
   probabilities would be near 1 and leave the fine-tune nothing to learn.)
2. The default fine-tune (`bertkit finetune`, no flag beyond model, data and seed) runs with the loss
   cross-entropy(logits + scale x prior) and the dev evaluations that keep the best model scoring the same sum.
   The training rows, batches and recipe are the default fine-tune's; only the logits gain the prior.
3. The kept model's logits on test, plus scale x prior, are the residual hybrid's predictions. Also reported:
   the residual model alone (no prior), and the prior's scale chosen again on dev (the model was trained with
   `--scale`; the best scale at test time can differ).

Compare against the default fine-tune of the same model and seed and `--method hybrid` over it (the pooling of
the two models trained apart): BENCHMARKS.md, "A residual hybrid".
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_description  # noqa: E402

from bertkit.checkpoints import load_checkpoint  # noqa: E402
from bertkit.finetune import classification  # noqa: E402
from bertkit.finetune.config import FinetuneConfig  # noqa: E402
from bertkit.finetune.inference import forward_features, stack  # noqa: E402
from bertkit.finetune.job import run_finetune  # noqa: E402
from bertkit.finetune.linear.baseline import fit_baseline  # noqa: E402
from bertkit.finetune.linear.hybrid import out_of_fold  # noqa: E402
from bertkit.finetune.linear.logits import FinetunedHead  # noqa: E402
from bertkit.finetune.linear.model import log_probabilities  # noqa: E402
from bertkit.finetune.linear.splits import read_splits  # noqa: E402
from bertkit.finetune.metrics import classification_metrics, mean_cross_entropy  # noqa: E402
from bertkit.job_config import job_config  # noqa: E402

SCALES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
Task = classification.SequenceTask


class Priors:
    """The prior (N, K) of each split, found by the split's texts; K in the TF-IDF model's label order."""

    def __init__(self, label_names: list[str], scale: float):
        self.label_names, self.scale, self.tables = label_names, scale, []

    def add(self, texts: list[str], prior: np.ndarray) -> None:
        self.tables.append((texts, prior))

    def of(self, texts: list[str], label_names: list[str]) -> np.ndarray:
        for known, prior in self.tables:
            if known == texts:
                return self.scale * prior[:, [self.label_names.index(name) for name in label_names]]
        raise ValueError(f"no prior for these {len(texts)} texts (not one of the splits)")


PRIORS: list[Priors] = []          # the active priors; empty: SequenceTask as shipped
original = {name: getattr(Task, name) for name in ("encode", "make_targets", "loss", "evaluate")}


def encode(self, examples, quiet=False):
    features = original["encode"](self, examples, quiet)
    if not PRIORS:
        return features
    prior = PRIORS[0].of([ex.text for ex in examples], self.label_names)
    return [f._replace(label=(f.label, tuple(row))) for f, row in zip(features, prior)]


def make_targets(self, features, length):
    if not isinstance(features[0].label, tuple):
        return original["make_targets"](self, features, length)
    return torch.tensor([[label, *prior] for label, prior in (f.label for f in features)], dtype=torch.float)


def loss(self, logits, targets):
    if targets.dim() != 2:
        return original["loss"](self, logits, targets)
    weight = self.class_weights.to(logits.device) if self.class_weights is not None else None
    return F.cross_entropy(logits.float() + targets[:, 1:].to(logits.device), targets[:, 0].long(), weight=weight)


def evaluate(self, model, features, examples, batch_size=64):
    if not isinstance(features[0].label, tuple):
        return original["evaluate"](self, model, features, examples, batch_size)
    logits = stack(forward_features(model, features, self.tokenizer.pad_id, batch_size))
    logits = logits + np.array([prior for _, prior in (f.label for f in features)])
    labels = [label for label, _ in (f.label for f in features)]
    return {**classification_metrics(labels, logits.argmax(-1), self.num_labels),
            "loss": mean_cross_entropy(logits, labels)}


def accuracy(scores: np.ndarray, y: np.ndarray) -> float:
    return float((scores.argmax(-1) == y).mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="chnsenticorp_like")
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--model", required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/residual"))
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--scale", type=float, default=1.0, help="the prior's weight in training")
    parser.add_argument("--max-steps", type=int, default=None, help="a short run (smoke tests); default: the recipe's")
    args = parser.parse_args()
    print(f"# {cpu_description()}; torch threads {torch.get_num_threads()}", flush=True)
    files = {s: str(args.data_dir / f"{args.set}_{s}.jsonl.gz") for s in ("train", "dev", "test")}
    splits = read_splits("classification", files["train"], files["dev"], files["test"])
    started = time.perf_counter()
    tfidf, fit = fit_baseline(splits)
    k = splits.num_labels
    logp = {"train": log_probabilities(out_of_fold("classification", fit, splits.y.train, k)),
            "dev": log_probabilities(tfidf.scores(splits.dev)), "test": log_probabilities(tfidf.scores(splits.test))}
    y = {"dev": splits.y.dev, "test": np.array(splits.test_targets())}
    print(f"TF-IDF (C {fit.fitted.regularization:g}) and its out-of-fold train priors: "
          f"{time.perf_counter() - started:.0f} s; dev {accuracy(logp['dev'], y['dev']):.4f}, test "
          f"{accuracy(logp['test'], y['test']):.4f}, out-of-fold train {accuracy(logp['train'], splits.y.train):.4f}",
          flush=True)
    priors = Priors(splits.label_names, args.scale)
    for name, examples in (("train", splits.train), ("dev", splits.dev), ("test", splits.test)):
        priors.add([ex.text for ex in examples], logp[name])

    for name, function in (("encode", encode), ("make_targets", make_targets), ("loss", loss),
                           ("evaluate", evaluate)):
        setattr(Task, name, function)
    PRIORS.append(priors)
    output = args.work / f"{args.set}-s{args.seed}"
    values = dict(model=args.model, train=files["train"], dev=files["dev"], output=str(output), baseline=False,
                  seed=args.seed, **({"max_steps": args.max_steps} if args.max_steps else {}))
    try:
        run_finetune(job_config(FinetuneConfig, **values))
    finally:
        PRIORS.clear()

    head = FinetunedHead(load_checkpoint(str(output)))
    order = [head.label_names.index(name) for name in splits.label_names]
    logits = {s: head.logits(getattr(splits, s))[:, order] for s in ("dev", "test")}
    by_scale = {s: {"dev": accuracy(logits["dev"] + s * logp["dev"], y["dev"]),
                    "test": accuracy(logits["test"] + s * logp["test"], y["test"]),
                    "test_macro_f1": classification_metrics(
                        y["test"], (logits["test"] + s * logp["test"]).argmax(-1), k)["macro_f1"]}
                for s in sorted({*SCALES, args.scale})}
    chosen = max(by_scale, key=lambda s: (by_scale[s]["dev"], -abs(s - args.scale)))
    result = {"set": args.set, "seed": args.seed, "scale": args.scale,
              "tfidf": {"dev": accuracy(logp["dev"], y["dev"]), "test": accuracy(logp["test"], y["test"])},
              "residual_hybrid": by_scale[args.scale], "residual_model_alone": by_scale[0.0],
              "dev_chosen_scale": chosen, "at_dev_chosen_scale": by_scale[chosen], "by_scale": by_scale}
    (args.work / f"{args.set}-s{args.seed}.json").write_text(json.dumps(result, indent=1))
    print("| | dev accuracy | test accuracy | test macro-F1 |\n|---|---:|---:|---:|")
    print(f"| TF-IDF | {result['tfidf']['dev']:.4f} | {result['tfidf']['test']:.4f} | |")
    for label, row in ((f"residual hybrid (model + {args.scale:g} x prior)", by_scale[args.scale]),
                       ("the residual model alone", by_scale[0.0]),
                       (f"scale {chosen:g} chosen on dev", by_scale[chosen])):
        print(f"| {label} | {row['dev']:.4f} | {row['test']:.4f} | {row['test_macro_f1']:.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
