"""`bertkit whiten`, `bertkit simcse`, `bertkit evaluate-embeddings`, `bertkit plot-embeddings`."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from bertkit.config import apply_overrides, load_config
from bertkit.options import LAYER_STRATEGIES, POOLINGS
from bertkit.progress import progress_wanted

# flag -> SimCSEConfig field for the common flags; everything else via --key=value overrides.
SIMCSE_FLAGS = {"model": "model", "train": "train", "output": "output", "mode": "mode", "dev": "dev",
                "pooling": "pooling", "batch_size": "batch_size", "epochs": "epochs", "max_steps": "max_steps",
                "lr": "lr", "max_length": "max_length", "temperature": "temperature", "seed": "seed",
                "save_every": "save_every", "resume": "resume"}


def _say(message: str) -> None:
    print(f"bertkit: {message}", file=sys.stderr)


def _encoding_flags(p) -> None:
    p.add_argument("--pooling", choices=POOLINGS[:-1], default=None, help="default: the model folder's, else mean")
    p.add_argument("--layers", choices=LAYER_STRATEGIES, default=None, help="default: the model folder's, else last")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=None)


def register(subparsers) -> None:
    p = subparsers.add_parser("whiten", help="fit BERT-whitening on a corpus and save it with the model")
    p.add_argument("--model", required=True)
    p.add_argument("--corpus", required=True, help=".txt (one text per line) or .jsonl (field text)")
    p.add_argument("--output", required=True, help="model folder to write (may equal --model)")
    p.add_argument("--dim", type=int, default=None, help="keep the K leading whitened dimensions")
    _encoding_flags(p)
    p.set_defaults(func=run_whiten)

    p = subparsers.add_parser("simcse", help="contrastive sentence-embedding training (SimCSE / MNRL)",
                              description="`.txt` trains unsupervised SimCSE; `.jsonl` with text_a/text_b "
                                          "[/negative] trains on pairs or triplets with in-batch negatives. "
                                          "Other SimCSEConfig fields: --key=value.")
    p.add_argument("--model", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--config", default=None, help="TOML file with SimCSEConfig fields")
    p.add_argument("--mode", choices=("auto", "unsupervised", "pairs"), default=None)
    p.add_argument("--dev", default=None, help="pairs .jsonl evaluated during training")
    p.add_argument("--pooling", choices=POOLINGS[:-1], default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--max-length", type=int, default=None)
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--save-every", type=int, default=None, help="save the training state every N steps (for --resume)")
    p.add_argument("--resume", action="store_true", default=None,
                   help="continue the interrupted run in --output from its last saved state")
    p.set_defaults(func=run_simcse_command, accepts_overrides=True)

    p = subparsers.add_parser("evaluate-embeddings", help="retrieval metrics / Spearman of a model's vectors",
                              description="--queries Q --corpus C: recall@1/10, MRR@10, nDCG@10 (queries: "
                                          "{text, relevant}; corpus: {id, text}). --pairs P: text_a/text_b "
                                          "pairs, Spearman when rows have a score, else text_a -> text_b "
                                          "retrieval.")
    p.add_argument("--model", required=True)
    p.add_argument("--queries", default=None)
    p.add_argument("--corpus", default=None)
    p.add_argument("--pairs", default=None)
    _encoding_flags(p)
    p.set_defaults(func=run_evaluate)

    p = subparsers.add_parser("plot-embeddings", help="2-D PCA (and t-SNE) picture of labeled texts, as PNG")
    p.add_argument("--model", required=True)
    p.add_argument("--input", required=True, help=".jsonl with text and label (or .txt)")
    p.add_argument("--output", required=True, help="PNG file")
    p.add_argument("--method", choices=("auto", "pca", "tsne"), default="auto",
                   help="auto: PCA, plus t-SNE when scikit-learn is installed")
    p.add_argument("--max-points", type=int, default=5000)
    _encoding_flags(p)
    p.set_defaults(func=run_plot)


def run_whiten(args: argparse.Namespace) -> int:
    from bertkit.api import load
    from bertkit.embed.whitening import whiten_model

    whitening = whiten_model(load(args.model), args.corpus, args.output, dim=args.dim, pooling=args.pooling,
                             layers=args.layers, batch_size=args.batch_size, max_length=args.max_length,
                             progress=progress_wanted())
    _say(f"fitted whitening on {whitening.count} texts ({whitening.dim_in} -> {whitening.dim_out} dims); "
         f"saved with the model in {args.output}")
    return 0


def run_simcse_command(args: argparse.Namespace) -> int:
    from bertkit.embed.simcse import SimCSEConfig, run_simcse


    config = load_config(SimCSEConfig, args.config, [])
    given = {field: getattr(args, flag) for flag, field in SIMCSE_FLAGS.items() if getattr(args, flag) is not None}
    config = apply_overrides(dataclasses.replace(config, **given), args.overrides)
    result = run_simcse(config)
    final = f"; last evaluation {result.last_eval}" if result.last_eval else ""
    _say(f"trained {result.steps} steps in {result.elapsed_s:.0f}s, saved to {config.output}{final}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from bertkit.api import load
    from bertkit.embed.evaluation import evaluate_model

    results = evaluate_model(load(args.model), args.queries, args.corpus, args.pairs, pooling=args.pooling,
                             layers=args.layers, batch_size=args.batch_size, max_length=args.max_length,
                             progress=progress_wanted())
    print(json.dumps(results, indent=2))
    return 0


def run_plot(args: argparse.Namespace) -> int:
    from bertkit.api import load
    from bertkit.embed.plot import plot_model

    result = plot_model(load(args.model), args.input, args.output, args.method, pooling=args.pooling,
                        layers=args.layers, max_points=args.max_points, batch_size=args.batch_size,
                        max_length=args.max_length, progress=progress_wanted())
    note = f" ({result.note})" if result.note else ""
    _say(f"plotted {result.points} texts ({', '.join(result.methods)}) to {result.path}{note}")
    return 0
