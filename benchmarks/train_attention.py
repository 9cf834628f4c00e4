"""A MiniLM (all-MiniLM-L6-v2) training step on CPU under bf16 autocast, by attention path:

  explicit  softmax, model/dropout.py's dropout on the (B, H, T, T) probabilities, @V (the path before
            model/attention_dropout.py; encoder._attention_with_weights, which need_weights still takes)
  chunked   model/attention_dropout.py: the same numbers, in cache-sized chunks, probabilities recomputed in
            backward, at every length (SelfAttention takes it from CHUNKED_MIN_KEYS keys)
  flash     SDPA's flash kernel with attention dropout set to 0: a floor, not the same model
  default   what SelfAttention takes (explicit below CHUNKED_MIN_KEYS keys, chunked from there)
  fp32      the default path without autocast: the fine-tune recipe's choice where bf16 matmuls are not fast

Shapes: batch x length; "p" pads the rows to lengths drawn uniformly from [T/2, T] (a key mask, as real batches
have). A step: forward, cross-entropy of a 5-way head over [CLS], backward, AdamW. Each variant runs in its own
process (peak RSS is the process's), the variants interleaved round by round; ms per step is the median of a
process's timed steps, and the table gives the median over rounds.

    OMP_NUM_THREADS=1 python benchmarks/train_attention.py --threads 1 --rounds 3
    python benchmarks/train_attention.py --threads 2 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_description  # noqa: E402

VARIANTS = ("explicit", "chunked", "flash", "default", "fp32")
SHAPES = ("16x512", "32x128", "32x48", "16x512p", "32x128p")    # p: padded, row lengths uniform in [T/2, T]


def worker(variant: str, shape: str, threads: int, steps: int) -> dict:
    import bertkit.model.encoder as encoder_module
    from bertkit.api import minilm_path
    from bertkit.checkpoints.io import load_checkpoint

    batch, length = (int(n) for n in shape.rstrip("p").split("x"))
    padded = shape.endswith("p")
    torch.set_num_threads(threads)
    encoder = load_checkpoint(str(minilm_path())).encoder
    if variant == "explicit":
        encoder_module.attention_with_dropout = lambda q, k, v, mask, causal, p: encoder_module._attention_with_weights(
            q, k, v, mask, causal, p)[0]
    if variant == "chunked":
        encoder_module.CHUNKED_MIN_KEYS = 0
    for module in encoder.modules():
        if isinstance(module, encoder_module.SelfAttention) and variant == "flash":
            module.dropout_p = 0.0
    encoder.train()
    head = torch.nn.Linear(encoder.config.hidden_size, 5)
    optimizer = torch.optim.AdamW(list(encoder.parameters()) + list(head.parameters()), lr=1e-5)
    rng = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (batch, length), generator=rng)
    lengths = (torch.randint(length // 2, length + 1, (batch,), generator=rng) if padded
               else torch.full((batch,), length))
    lengths[0] = length                                                    # the batch is T long
    mask = (torch.arange(length) < lengths[:, None]).long()                # (B, T): 1 for real tokens
    labels = torch.randint(0, 5, (batch,), generator=rng)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant != "fp32"):
            out = encoder(ids, attention_mask=mask)
            loss = torch.nn.functional.cross_entropy(head(out.last_hidden_state[:, 0]).float(), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return {"ms": statistics.median(times[2:]) * 1000,
            "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="per process; the first two are warm-up")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--worker", nargs=2, metavar=("VARIANT", "SHAPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.threads, args.steps)))
        return 0
    shapes = args.shapes.split(",")
    variants = args.variants.split(",")
    print(f"# {cpu_description()}; {args.threads} thread(s); load before: {os.getloadavg()}")
    results = {(v, s): [] for v in variants for s in shapes}
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    for _ in range(args.rounds):
        for shape in shapes:
            for variant in variants:
                out = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--steps",
                                      str(args.steps), "--worker", variant, shape],
                                     env=env, check=True, capture_output=True, text=True).stdout
                results[variant, shape].append(json.loads(out.splitlines()[-1]))
    print(f"# load after: {os.getloadavg()}")
    print("| batch x length | " + " | ".join(f"{v} ms, peak RSS" for v in variants)
          + " | explicit / chunked | fp32 / default |")
    print("|---|" + "---|" * (len(variants) + 2))
    for shape in shapes:
        ms = {v: statistics.median(r["ms"] for r in results[v, shape]) for v in variants}
        rss = {v: max(r["rss_gib"] for r in results[v, shape]) for v in variants}
        ratio = f"{ms['explicit'] / ms['chunked']:.2f}x" if {"explicit", "chunked"} <= set(variants) else "-"
        ratio += " | " + (f"{ms['fp32'] / ms['default']:.2f}x" if {"fp32", "default"} <= set(variants) else "-")
        cells = " | ".join(f"{ms[v]:,.0f} ms, {rss[v]:.2f} GiB" for v in variants)
        print(f"| {shape.replace('x', ' x ').replace('p', ', padded')} | {cells} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
