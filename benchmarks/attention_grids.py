"""What one attention grid costs on this CPU, by key width: the measurement behind model/packing.py's grids.

The packed forward (model/packing.py) runs SDPA once per attention grid: `rows` texts padded to `width` keys,
with a key mask when any is padded. This times exactly that call (MiniLM's 12 heads x 32 dimensions, one thread
by default) for widths one token short of a multiple of 16 and at it, in bf16 and fp32, rounds interleaved,
median microseconds per call; then the fixed cost of a grid (the same texts as one grid of `rows` against
`rows` grids of one).

    python benchmarks/attention_grids.py --rows 8 --rounds 7
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from machine import cpu_description   # benchmarks/machine.py (the script's folder is on sys.path)

HEADS, HEAD_DIM = 12, 32
WIDTHS = (31, 32, 47, 48, 63, 64, 95, 96, 127, 128)


def grid(rows: int, width: int, dtype: torch.dtype, padded: bool):
    """q, k, v (rows, heads, width, head_dim) and the key mask packing.py builds (one padded key per text)."""
    q, k, v = (torch.randn(rows, HEADS, width, HEAD_DIM).to(dtype) for _ in range(3))
    mask = None
    if padded:
        lengths = torch.full((rows,), width - 1)
        mask = (torch.arange(width) < lengths[:, None])[:, None, None, :]
    return q, k, v, mask


def time_call(args_, repeat: int) -> float:
    """Median microseconds of one SDPA call over `repeat` calls (after one warm call)."""
    q, k, v, mask = args_
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        samples.append(time.perf_counter() - start)
    return 1e6 * statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8, help="texts in a grid")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=50, help="calls timed per round")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{cpu_description()}; torch {torch.__version__}, {args.threads} thread(s), {args.rows} texts x {HEADS} "
          f"heads x {HEAD_DIM} dims, median of {args.rounds} rounds x {args.repeat} calls")
    with torch.inference_mode():
        for dtype in (torch.bfloat16, torch.float32):
            cases = {w: grid(args.rows, w, dtype, padded=True) for w in WIDTHS}
            times = {w: [] for w in WIDTHS}
            for _ in range(args.rounds):                       # interleaved: every width once per round
                for w in WIDTHS:
                    times[w].append(time_call(cases[w], args.repeat))
            print(f"\n{str(dtype).split('.')[-1]}: us per SDPA call by key width (one padded key per text)")
            print("| width | " + " | ".join(str(w) for w in WIDTHS) + " |")
            print("|---|" + "---:|" * len(WIDTHS))
            print("| us | " + " | ".join(f"{statistics.median(times[w]):,.0f}" for w in WIDTHS) + " |")
            one, split = grid(args.rows, 32, dtype, True), grid(1, 32, dtype, True)
            whole = statistics.median(time_call(one, args.repeat) for _ in range(args.rounds))
            single = statistics.median(time_call(split, args.repeat) for _ in range(args.rounds))
            print(f"fixed cost of a grid, width 32: {args.rows} texts as one grid {whole:,.0f} us, as {args.rows} "
                  f"grids {args.rows * single:,.0f} us: ~{(args.rows * single - whole) / (args.rows - 1):,.0f} us "
                  f"per extra grid")


if __name__ == "__main__":
    main()
