"""Where an ELECTRA pre-training step's time goes on CPU, beside an MLM step of the same body (the `tiny` preset:
2 layers x 128, vocabulary 8000, batch 32 x 128, 15% masked), and the generator's sampling: torch.multinomial
against model/electra.replace_masked (inverse CDF). Interleaved rounds, best of --rounds, one thread.

    python benchmarks/electra_step.py --rounds 5
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_description  # noqa: E402

from bertkit.model import Encoder, EncoderConfig  # noqa: E402
from bertkit.model.electra import ElectraPretrainingModel, generator_config, replace_masked  # noqa: E402
from bertkit.pretrain.masking import IGNORE_INDEX  # noqa: E402
from bertkit.pretrain.objectives.electra import electra_loss  # noqa: E402
from bertkit.pretrain.objectives.mlm import PretrainingModel, pretraining_loss  # noqa: E402

VOCAB = 8000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"# {cpu_description()}; 1 thread; load before: {os.getloadavg()}")
    body = EncoderConfig(vocab_size=VOCAB, hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512,
                         max_position_embeddings=128)
    discriminator = body.replace(family="electra", use_pooler=False)
    electra = ElectraPretrainingModel(Encoder(discriminator), Encoder(generator_config(discriminator, 0.25)))
    mlm = PretrainingModel(body, False)
    rng = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (32, 128), generator=rng)
    masked = torch.rand(32, 128, generator=rng) < 0.15
    batch = {"input_ids": ids.masked_fill(masked, 4), "labels": ids.masked_fill(~masked, IGNORE_INDEX),
             "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    logits = torch.randn(int(masked.sum()), VOCAB, generator=rng)

    def step(model, loss_fn):
        loss, _ = loss_fn(model, batch)
        loss.backward()
        model.zero_grad(set_to_none=True)

    cases = {
        "mlm step": lambda: step(mlm, pretraining_loss),
        "electra step": lambda: step(electra, lambda m, b: electra_loss(m, b, 50.0)),
        "sampling: torch.multinomial": lambda: torch.multinomial(torch.softmax(logits, -1), 1, generator=rng),
        "sampling: replace_masked (inverse CDF)": lambda: replace_masked(ids, masked, logits, rng),
    }
    best = {name: float("inf") for name in cases}
    for name, case in cases.items():
        case()                                                          # warm-up
    for _ in range(args.rounds):
        for name, case in cases.items():
            start = time.perf_counter()
            case()
            best[name] = min(best[name], time.perf_counter() - start)
    for name, seconds in best.items():
        print(f"{name}: {seconds * 1000:.1f} ms")
    print(f"electra / mlm step: {best['electra step'] / best['mlm step']:.2f}; multinomial / inverse CDF: "
          f"{best['sampling: torch.multinomial'] / best['sampling: replace_masked (inverse CDF)']:.1f}; "
          f"load after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
