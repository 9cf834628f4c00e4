"""`bertkit finetune`, `bertkit evaluate`, `bertkit predict`: thin shells over bertkit.finetune.

finetune settings come from FinetuneConfig defaults, then `--config FILE.toml`, then the flags below, then
`--key=value` / `--options.key=value` overrides for everything else (e.g. --options.doc_stride=64).
"""
from __future__ import annotations

import argparse
import json
import sys

from bertkit.finetune.model import TASKS

# flag -> FinetuneConfig field, for the flags every user needs; the rest go through --key=value overrides.
_FLAGS = {"task": str, "model": str, "train": str, "dev": str, "output": str, "epochs": int, "lr": float,
          "batch_size": int, "max_length": int, "seed": int, "warmup_ratio": float, "eval_every": int,
          "early_stopping_patience": int, "layerwise_lr_decay": float, "schedule": str, "metric": str,
          "encoding": str, "device": str, "max_train_examples": int, "max_dev_examples": int}


def register(subparsers) -> None:
    p = subparsers.add_parser("finetune", help="fine-tune a model on labeled data (classification, NER, QA...)",
                              description="Train a task head (and the encoder) on a labeled file; writes the best "
                                          "model folder to --output, with metrics.json and run/ (config, versions, log).")
    p.add_argument("--task", choices=TASKS)
    p.add_argument("--model", help="model folder to start from")
    p.add_argument("--train", help="training file: .jsonl/.tsv/.csv (classification), .jsonl/.conll (ner), "
                                   "SQuAD .json (qa); .gz allowed")
    p.add_argument("--dev", help="dev file, evaluated every epoch (or --eval-every steps); picks the best model")
    p.add_argument("--output", help="folder for the best model")
    p.add_argument("--config", help="TOML file with FinetuneConfig keys")
    p.add_argument("--epochs", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--max-length", type=int, help="tokens per row; longer NER/QA inputs are windowed")
    p.add_argument("--seed", type=int)
    p.add_argument("--warmup-ratio", type=float)
    p.add_argument("--schedule", choices=("linear", "cosine", "constant", "slanted_triangular"))
    p.add_argument("--eval-every", type=int, help="evaluate every N steps (default: every epoch)")
    p.add_argument("--metric", help="dev metric that picks the best model (default: the task's main metric)")
    p.add_argument("--early-stopping-patience", type=int, help="stop after N evaluations without improvement")
    p.add_argument("--layerwise-lr-decay", type=float, help="lr x d per layer below the top (e.g. 0.9)")
    p.add_argument("--gradual-unfreezing", action="store_true", default=None)
    p.add_argument("--skip-bad-rows", action="store_true", default=None,
                   help="write bad rows to OUTPUT.rejects.jsonl and go on instead of stopping")
    p.add_argument("--encoding", help="input encoding, e.g. gb18030 (default utf-8)")
    p.add_argument("--max-train-examples", type=int, help="use only the first N training rows")
    p.add_argument("--max-dev-examples", type=int, help="use only the first N dev rows")
    p.add_argument("--device", help="cpu, cuda or auto")
    p.set_defaults(func=run_finetune_command, accepts_overrides=True)

    p = subparsers.add_parser("evaluate", help="score a fine-tuned model on a labeled file (JSON metrics)")
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--task", choices=TASKS, help="fail unless the model was fine-tuned for this task")
    p.add_argument("--encoding", default="utf-8")
    p.add_argument("--batch-size", type=int, default=64)
    p.set_defaults(func=run_evaluate_command)

    p = subparsers.add_parser("predict", help="predict labels, entities or answers for a file (JSONL out)")
    p.add_argument("--model", required=True)
    p.add_argument("--input", required=True, help=".jsonl/.tsv/.csv/.txt, .conll, or SQuAD .json")
    p.add_argument("--output", required=True, help="output .jsonl")
    p.add_argument("--task", choices=TASKS, help="fail unless the model was fine-tuned for this task")
    p.add_argument("--encoding", default="utf-8")
    p.add_argument("--batch-size", type=int, default=64)
    p.set_defaults(func=run_predict_command)


def run_finetune_command(args: argparse.Namespace) -> int:
    import dataclasses

    from bertkit.config import apply_overrides, load_config
    from bertkit.finetune.job import FinetuneConfig, run_finetune

    config = load_config(FinetuneConfig, args.config, [])
    given = {name: getattr(args, name) for name in _FLAGS if getattr(args, name) is not None}
    for flag in ("gradual_unfreezing", "skip_bad_rows"):
        if getattr(args, flag):
            given[flag] = True
    config = dataclasses.replace(config, **given)
    config = apply_overrides(config, args.overrides)
    result = run_finetune(config)
    print(json.dumps({"output": str(result.output), "dev": result.metrics, "epochs": result.epochs,
                      "steps": result.steps, "train_seconds": round(result.train_seconds, 1)}, indent=2))
    return 0


def run_evaluate_command(args: argparse.Namespace) -> int:
    from bertkit.finetune.predict import evaluate_file

    metrics = evaluate_file(args.model, args.data, args.encoding, args.batch_size, args.task)
    print(json.dumps(metrics, indent=2, ensure_ascii=False))
    return 0


def run_predict_command(args: argparse.Namespace) -> int:
    from bertkit.finetune.predict import predict_file

    count = predict_file(args.model, args.input, args.output, args.encoding, args.batch_size, args.task)
    print(f"bertkit: wrote {count} predictions to {args.output}", file=sys.stderr)
    return 0
