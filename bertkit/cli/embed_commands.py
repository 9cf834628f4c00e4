"""`bertkit whiten`, `bertkit simcse`, `bertkit evaluate-embeddings`, `bertkit plot-embeddings`."""
from __future__ import annotations

import argparse
import json
import sys

from bertkit.job_config import FIT_SET, flat_keys, short_flags
from bertkit.cli.flags import add_config_flags, add_layers_flag, config_from_args, positive_int, skip_progress_bar_field
from bertkit.embed.config import SimCSEConfig
from bertkit.options import POOLINGS
from bertkit.progress import progress_wanted

_SIMCSE_HELP = {"train": ".txt: unsupervised SimCSE; .jsonl with text_a/text_b [/negative]: pairs or triplets",
                "dev": "pairs .jsonl evaluated during training", "model": "model folder to start from",
                "output": "model folder to write",
                "save_every": "save the training state every N steps (for --resume); 0: only at the end",
                "resume": "continue the interrupted run in --output from its last saved state"}


def _say(message: str) -> None:
    print(f"bertkit: {message}", file=sys.stderr)


def _encoding_flags(p) -> None:
    p.add_argument("--pooling", choices=POOLINGS[:-1], default=None, help="default: the model folder's, else mean")
    add_layers_flag(p, "default: the model folder's, else last")
    p.add_argument("--batch-size", type=positive_int, default=64)
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
                                          "Settings: SimCSEConfig defaults, then --config FILE.toml, then the "
                                          "flags, then --key=value overrides.")
    add_config_flags(p, SimCSEConfig, skip=skip_progress_bar_field(p) | FIT_SET, aliases=short_flags(SimCSEConfig),
                     help={flat_keys(SimCSEConfig).get(name, name): text for name, text in _SIMCSE_HELP.items()},
                     choices={"pooling": POOLINGS[:-1]},
                     metavars={"model": "DIR", "output": "DIR", "data.train": "FILE", "data.dev": "FILE"})
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
    from bertkit.embed.simcse import run_simcse

    config = config_from_args(SimCSEConfig, args)
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
