"""The default fine-tune over many seeds, and variants of it, side by side (issue 19): is a recipe change worth more
than the seed-to-seed spread?

    python benchmarks/recipe_seeds.py --set bbc --model DIR --seeds 1 2 3 4 5 6 --parallel 10 --work /tmp/seeds \\
        --variant shipped-505:train.max_steps=505 --variant llrd0.9:train.max_steps=505,train.layerwise_lr_decay=0.9

Each (variant, seed) is one `checkpoint_choice.py` run (the default fine-tune with early stopping off and every
evaluation's dev and TEST scores logged; a variant adds its `--option` settings), --parallel of them at once (on one
GPU, ten MiniLM-L6 runs share it well). Jobs go in seed order, every variant of a seed before the next seed, so a
--deadline cut leaves the variants with equal seeds. The kept model of each run is replayed under the shipped rule
(the highest dev accuracy, ties to the lower dev loss, early stopping after PATIENCE evaluations without improvement
from EARLY_STOPPING_START of the run), and the table gives its test accuracy per seed, the mean, the spread and how
many runs reach --bar (the TF-IDF baseline's test accuracy). No rule reads the test scores.

`train.max_steps=505` stands in for a 2-core CPU: under the recipe's 30-minute cap a quiet AMD EPYC runs ~505
steps of BBC at 512 tokens (BENCHMARKS.md, "The moving average of the weights"), and the lr schedule ends there.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean, pstdev

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checkpoint_choice import replay  # noqa: E402

from bertkit.finetune.recipe import EARLY_STOPPING_START  # noqa: E402

VARIANTS = {   # the variants measured on BBC (BENCHMARKS.md, "The BBC recipe over 16 seeds")
    "shipped-505": ["train.max_steps=505"],
    "uncapped": ["train.time_budget=off"],
    "llrd0.9-505": ["train.max_steps=505", "train.layerwise_lr_decay=0.9"],
    "llrd0.8-505": ["train.max_steps=505", "train.layerwise_lr_decay=0.8"],
    "cosine-505": ["train.max_steps=505", "train.schedule=cosine"],
    "head-only-505": ["train.max_steps=505", "options.long_texts=truncate"],
}


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, options = text.partition(":")
    return name, [o for o in options.split(",") if o]


def kept_scores(evals: list[dict]) -> dict:
    """The evaluation the shipped rule keeps (each evaluation's share of the run as checkpoint_choice.py logs it)."""
    kept, _ = replay("ties-to-loss", evals, EARLY_STOPPING_START)
    return kept


def run_jobs(jobs: list[tuple[str, int, list[str]]], args: argparse.Namespace) -> None:
    script = str(Path(__file__).resolve().parent / "checkpoint_choice.py")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    started_at, running, queue = time.time(), {}, list(jobs)
    while queue or running:
        now = time.time() - started_at
        for key, process in list(running.items()):
            if process.poll() is not None:
                print(f"{now:6.0f} s: {key} done, exit {process.returncode}", flush=True)
                del running[key]
            elif args.deadline and now > args.deadline:
                process.kill()
                process.wait()
                print(f"{now:6.0f} s: {key} stopped at the deadline", flush=True)
                del running[key]
        if args.deadline and now > 0.75 * args.deadline:
            queue = []
        while queue and len(running) < args.parallel:
            name, seed, options = queue.pop(0)
            key = f"{name}-s{seed}"
            command = [sys.executable, script, "--set", args.set, "--data-dir", str(args.data_dir),
                       "--seed", str(seed), "--work", str(args.work / key), "--option", *options,
                       *(["--model", args.model] if args.model else [])]
            if args.cpus:
                command = ["taskset", "-c", args.cpus, *command]
            with open(args.work / f"{key}.log", "w") as log:
                running[key] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        time.sleep(1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", default="bbc")
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    parser.add_argument("--model", help="default: all-MiniLM-L6-v2 from its PyPI package")
    parser.add_argument("--work", type=Path, default=Path("/tmp/recipe-seeds"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:OPTION[,OPTION...]",
                        help="a variant and its fine-tune settings (checkpoint_choice.py --option); repeat. "
                             f"Default: {', '.join(VARIANTS)}")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each run")
    parser.add_argument("--cpus", default=None, help="taskset the runs onto these CPUs (e.g. 2-15)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds: no run starts after 75%% of it, and runs still going at it are stopped")
    parser.add_argument("--bar", type=float, default=0.9809, help="the accuracy to reach (BBC: TF-IDF's test)")
    parser.add_argument("--table-only", action="store_true", help="no runs: the table of the runs in --work")
    args = parser.parse_args()
    variants = dict(parse_variant(v) for v in args.variant) if args.variant else VARIANTS
    args.work.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        run_jobs([(name, seed, options) for seed in args.seeds for name, options in variants.items()], args)

    print(f"{args.set}: the kept model's test scores under the shipped rule; bar {args.bar:.4f}")
    print("| variant | runs | test accuracy, mean (sd) | min - max | macro-F1, mean | runs >= bar | by seed |")
    print("|---|---:|---:|---:|---:|---:|---|")
    every = {}
    for name in variants:
        kept = {}
        for seed in args.seeds:
            evals_file = args.work / f"{name}-s{seed}" / f"{args.set}-evals.json"
            if evals_file.exists():
                evals = json.loads(evals_file.read_text())
                kept[seed] = kept_scores(evals)
                every[f"{name}-s{seed}"] = evals
        if not kept:
            continue
        accuracy = [k["test_accuracy"] for k in kept.values()]
        print(f"| {name} | {len(kept)} | {mean(accuracy):.4f} ({pstdev(accuracy):.4f}) | {min(accuracy):.4f} - "
              f"{max(accuracy):.4f} | {mean(k['test_macro_f1'] for k in kept.values()):.4f} | "
              f"{sum(a >= args.bar - 1e-9 for a in accuracy)} / {len(kept)} | "
              + " ".join(f"{seed}: {k['test_accuracy']:.4f}" for seed, k in kept.items()) + " |")
    (args.work / "evals.json").write_text(json.dumps(every))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
