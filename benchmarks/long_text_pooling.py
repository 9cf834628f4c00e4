"""Texts longer than the model: head + tail (what training saw) against windows over the whole text, pooled (issue 19).

    python benchmarks/long_text_pooling.py --model runs/bbc --input ../shared/data/bbc_test.jsonl.gz

A fine-tuned classification folder reads at most max_length tokens; longer texts keep their first 128 and last 382
(Sun et al. 2019). TF-IDF reads every word. This scores the same folder four ways on the same file, no training:
`head+tail` (what `bertkit evaluate` does), `windows` (windows of max_length over the whole text, half-overlapping,
their class probabilities averaged), `windows+head+tail` (the head+tail view counted as one more window) and
`max-window` (the most confident window decides). Only texts longer than max_length can change.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_description  # noqa: E402

from bertkit.data.readers import read_text_examples  # noqa: E402
from bertkit.finetune.classification import SequenceFeature  # noqa: E402
from bertkit.finetune.inference import forward_features, stack  # noqa: E402
from bertkit.finetune.loaded import finetuned_model  # noqa: E402
from bertkit.finetune.metrics import classification_metrics  # noqa: E402
from bertkit.finetune.predictions import softmax  # noqa: E402


def windows(ids: list[int], budget: int) -> list[list[int]]:
    """[CLS] piece [SEP] rows of at most budget + 2 tokens covering the body, each starting half a window later."""
    body, stride = ids[1:-1], max(1, budget // 2)
    starts = range(0, max(1, len(body) - budget + stride), stride)
    return [[ids[0], *body[s:s + budget], ids[-1]] for s in starts if s < max(1, len(body))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a fine-tuned classification folder")
    parser.add_argument("--input", nargs="+", required=True, help="labelled JSONL files to score")
    args = parser.parse_args()
    print(f"# {cpu_description()}")
    net, task = finetuned_model(args.model)
    budget = task.max_length - 2
    print(f"| file | texts longer than {task.max_length} tokens | head+tail | windows | windows+head+tail | "
          "max-window |")
    print("|---|---:|---:|---:|---:|---:|")
    for path in args.input:
        examples = read_text_examples(path, labels=None)
        gold = [task.label_index[ex.label] for ex in examples]
        head_tail = softmax(stack(forward_features(net, task.encode(examples, quiet=True), task.tokenizer.pad_id)))
        full = task.tokenizer.encode_batch([ex.text for ex in examples], max_length=None, truncation=None).input_ids
        rows, owner = [], []
        for i, ids in enumerate(full):
            for piece in windows(list(ids), budget):
                rows.append(SequenceFeature(piece, [0] * len(piece), None))
                owner.append(i)
        probabilities = softmax(stack(forward_features(net, rows, task.tokenizer.pad_id)))
        owner = np.asarray(owner)
        counts = np.bincount(owner, minlength=len(examples))[:, None]
        mean = np.zeros_like(head_tail)
        np.add.at(mean, owner, probabilities)
        best = np.zeros_like(head_tail)
        np.maximum.at(best, owner, probabilities)
        ways = {"head+tail": head_tail, "windows": mean / counts, "windows+head+tail": (mean + head_tail) / (counts + 1),
                "max-window": best}
        scores = {name: classification_metrics(gold, p.argmax(-1), len(task.label_names)) for name, p in ways.items()}
        longer = sum(len(ids) > task.max_length for ids in full)
        print(f"| {Path(path).name} | {longer} of {len(examples)} | " + " | ".join(
            f"{s['accuracy']:.4f} / {s['macro_f1']:.4f}" for s in scores.values()) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
