"""Where a server pass's CPU goes, op by op, against in-process `Model.encode` on the same texts (torch.profiler).

The texts are run twice in one process, each under torch.profiler: as the model process runs them, passes of n
texts through `ModelRunner.embed` (30 one-text clients keep ~15 in flight), and as `Model.encode(texts,
batch_size=32)`. Both are warmed first (oneDNN compiles a bf16 kernel per shape). Printed: each op's self CPU ms and
calls on both sides, the largest first, and the totals; what the ops do not cover is Python between them.

    python benchmarks/pass_ops.py --data ../shared/data/en_corpus.txt.gz --texts 795 --size 15 --precision bf16
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from machine import cpu_description
from pass_sizes import served_items


def op_times(run) -> dict[str, tuple[float, int]]:
    """op name -> (self CPU ms, calls) of one run under the profiler."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        run()
    return {event.key: (event.self_cpu_time_total / 1000, event.count) for event in profiler.key_averages()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/en_corpus.txt.gz")
    parser.add_argument("--texts", type=int, default=795)
    parser.add_argument("--size", type=int, default=15, help="texts per server pass")
    parser.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="bf16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", type=int, default=25, help="ops shown")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(cpu_description(), f"| torch threads {args.threads} | precision {args.precision} | load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    model, runner, texts, items = served_items(args.data, args.texts, args.precision)
    groups = [items[start:start + args.size] for start in range(0, len(items), args.size)]

    def passes() -> None:
        for group in groups:
            runner.embed(group)

    def encode() -> None:
        model.encode(texts, batch_size=32)

    passes()
    encode()
    served, local = op_times(passes), op_times(encode)
    print(f"\n{len(texts)} texts: {len(groups)} passes of {args.size} (ModelRunner.embed) | Model.encode, batch 32")
    print("| op | passes: self CPU ms | calls | encode: self CPU ms | calls |\n|---|---:|---:|---:|---:|")
    for key in sorted(set(served) | set(local), key=lambda k: -served.get(k, (0.0, 0))[0])[:args.rows]:
        ours, theirs = served.get(key, (0.0, 0)), local.get(key, (0.0, 0))
        print(f"| {key} | {ours[0]:.1f} | {ours[1]} | {theirs[0]:.1f} | {theirs[1]} |")
    total_served, total_local = (sum(ms for ms, _ in table.values()) for table in (served, local))
    print(f"| total | {total_served:.1f} | | {total_local:.1f} | |  ({total_served / total_local:.3f}x)")
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
