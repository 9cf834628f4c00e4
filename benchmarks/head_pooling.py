"""What should the classification head read: the pooler over [CLS] (transformers' BertForSequenceClassification, the
toolkit's head) or the mean of the last layer (the pooling a sentence-transformers model such as all-MiniLM-L6-v2 was
trained with)? Issue 19, a measurement only.

    python benchmarks/head_pooling.py --set bbc --work /tmp/head_pooling [--pooling mean|pooler] [--seed 42]
    python benchmarks/head_pooling.py --set wordnet_lexname --work /tmp/head_pooling
    python benchmarks/head_pooling.py --set bbc --work /tmp/head_pooling --frozen [--max-length 256]

Each run is `bertkit finetune` with no flag beyond model and data (all-MiniLM-L6-v2 unless --model), then
`bertkit evaluate` on test. With --pooling mean both commands run in a process whose fine-tuned model feeds the
head the masked mean of the last layer's tokens instead of the pooler output; nothing else changes (recipe, seed,
head, its initialization). The mean-pooled head is not the toolkit's: a folder trained that way would not load as
transformers' BertForSequenceClassification. Prints one JSON line per run.

--frozen instead fits logistic regression (standardized inputs, C in 0.1 / 1 / 10) on the FROZEN model's vectors of
the training texts, pooled each way (mean, [CLS], pooler), and scores test: how good a start each reading is.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from datasets import DEFAULT_DATA_DIR, load, write_splits  # noqa: E402
from machine import cpu_description  # noqa: E402
from run_bertkit import bertkit  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
import torch  # noqa: E402

from bertkit.api import load as bertkit_load, minilm_path  # noqa: E402
from bertkit.cli import main as cli_main  # noqa: E402
from bertkit.finetune import model as finetune_model  # noqa: E402
from bertkit.model.head_registry import HEADS  # noqa: E402
from bertkit.model.pooling import masked_mean  # noqa: E402


def run_cli_with_mean_head(argv: list[str]) -> int:
    """The bertkit CLI, with FinetuneModel's summary heads reading the masked mean of the last layer."""
    pooler_forward = finetune_model.FinetuneModel.forward

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if HEADS[self.head_key].reads != "summary":
            return pooler_forward(self, input_ids, attention_mask, token_type_ids)
        out = self.encoder(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
        tokens = out.last_hidden_state                                  # (B, T, C)
        return self.head(masked_mean(tokens, mask).to(tokens.dtype))    # (B, L)

    finetune_model.FinetuneModel.forward = forward
    return cli_main(argv)


def frozen_probe(model: str, splits, max_length: int) -> list[dict]:
    encoder = bertkit_load(model)
    train_y, test_y = [r["label"] for r in splits.train], [r["label"] for r in splits.test]
    rows = []
    for pooling in ("mean", "cls", "pooler"):
        train, test = (np.asarray(encoder.encode([r["text"] for r in part], pooling=pooling, max_length=max_length,
                                                 normalize=False)) for part in (splits.train, splits.test))
        mean, scale = train.mean(0), train.std(0) + 1e-6
        for c in (0.1, 1.0, 10.0):
            probe = LogisticRegression(C=c, max_iter=3000).fit((train - mean) / scale, train_y)
            rows.append({"pooling": pooling, "C": c, "test_accuracy": probe.score((test - mean) / scale, test_y)})
    return rows


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--cli":
        return run_cli_with_mean_head(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="bbc", help="a set of benchmarks/datasets.py")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    parser.add_argument("--work", required=True)
    parser.add_argument("--pooling", default="mean", choices=("mean", "pooler"))
    parser.add_argument("--model", default=None, help="default: all-MiniLM-L6-v2")
    parser.add_argument("--seed", type=int, default=None, help="passed as --seed (default: the CLI's)")
    parser.add_argument("--frozen", action="store_true", help="linear probes on the frozen vectors instead")
    parser.add_argument("--max-length", type=int, default=256, help="tokens per text for --frozen")
    args = parser.parse_args()
    splits = load(args.set, args.data_dir)
    if args.frozen:
        for row in frozen_probe(args.model or str(minilm_path()), splits, args.max_length):
            print(json.dumps({"set": args.set, "cpu": cpu_description(), "max_length": args.max_length, **row}))
        return 0
    work = Path(args.work)
    files = write_splits(splits, work / "data")
    entry = ("-m", "bertkit") if args.pooling == "pooler" else (__file__, "--cli")
    output = work / (f"{args.set}_{args.pooling}" + ("" if args.seed is None else f"_seed{args.seed}"))
    train = ["finetune", "--task", "classification", "--model", args.model or str(minilm_path()),
             "--train", str(files["train"]), "--dev", str(files["dev"]), "--output", str(output)]
    if args.seed is not None:
        train += ["--seed", str(args.seed)]
    start = time.time()
    fitted = json.loads(bertkit(*train, entry=entry))
    wall = time.time() - start
    test = json.loads(bertkit("evaluate", "--model", str(output), "--input", str(files["test"]),
                              entry=entry))
    print(json.dumps({"set": args.set, "pooling": args.pooling, "seed": args.seed, "cpu": cpu_description(),
                      "dev": fitted["dev"], "steps": fitted["steps"], "train_wall_s": round(wall, 1),
                      "test": {k: test[k] for k in ("accuracy", "macro_f1")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
