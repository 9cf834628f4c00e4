"""Fine-tuning before and after a change of the job layer: the same bertkit fine-tune (benchmarks/finetune.py's
run_bertkit: MiniLM-L6 on BBC news, fp32) run from two source trees, interleaved round by round, each round a fresh
process per side, same thread count. Prints the CPU, each round, and the median training s/epoch and test accuracy.

    python benchmarks/fit_before_after.py --before /work/main --after . --rounds 3 --max-train-examples 300
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import cpu_description  # noqa: E402

ONE_RUN = """
import argparse, json, sys, tempfile
from pathlib import Path
import torch
torch.set_num_threads({threads})
import finetune
args = argparse.Namespace(**json.loads(sys.argv[1]))
with tempfile.TemporaryDirectory() as tmp:
    print(json.dumps(finetune.run_bertkit(args, Path(args.data_dir), Path(tmp))))
"""


def run_side(tree: Path, settings: dict, threads: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree.resolve()), str(HERE)])}
    out = subprocess.run([sys.executable, "-c", ONE_RUN.format(threads=threads), json.dumps(settings)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="source tree of the code before the change")
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--max-train-examples", type=int, default=300)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args(argv)
    settings = dict(data_dir=str(Path(args.data_dir).resolve()), max_length=args.max_length, epochs=1, lr=5e-5,
                    batch_size=32, seed=42, max_train_examples=args.max_train_examples, device="cpu", bf16=False)
    print(cpu_description(), f"| torch threads {args.threads}", flush=True)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for round_ in range(args.rounds):
        sides = ("before", "after") if round_ % 2 == 0 else ("after", "before")   # alternate who goes first
        for side in sides:
            result = run_side(getattr(args, side), settings, args.threads)
            runs[side].append(result)
            print(f"round {round_ + 1} {side:6}: {json.dumps(result)}", flush=True)
    for side, results in runs.items():
        print(f"{side:6}: median train s/epoch {statistics.median(r['train_s_per_epoch'] for r in results):.1f}, "
              f"test accuracy {[round(r['test_accuracy'], 4) for r in results]}")
    ratio = (statistics.median(r["train_s_per_epoch"] for r in runs["before"])
             / statistics.median(r["train_s_per_epoch"] for r in runs["after"]))
    print(f"after is {ratio:.2f}x as fast as before per training epoch (median of {args.rounds} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
