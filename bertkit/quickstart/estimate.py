"""How long each quickstart stage will take on this machine: a couple of timed training steps per model
size, scaled by the plan's step counts. Printed before the run so the user knows what is coming."""
from __future__ import annotations

import time
from typing import NamedTuple

import torch
from torch import nn

from bertkit.model.encoder import Encoder
from bertkit.model.heads import SequenceClassificationHead
from bertkit.model.pooling import pooled_or_cls

# An evaluation forward costs about a third of a training step (no backward, no optimizer).
FORWARD_SHARE = 1 / 3
# Per fine-tuning: reading and tokenizing the files, saving the best model, loading it for the test set.
FIXED_SECONDS = 4.0


class StageEstimate(NamedTuple):
    steps: int
    seconds: float


def step_seconds(encoder: Encoder, batch_size: int, max_length: int, device: torch.device, steps: int = 2) -> float:
    """Seconds per training step of a classifier on full-length rows, after one warm-up step. The weights
    are restored afterwards, so a loaded encoder can be measured without being changed."""
    head = SequenceClassificationHead(encoder.config, 5)
    saved = {k: v.detach().clone() for k, v in encoder.state_dict().items()}
    encoder.to(device).train()
    head.to(device)
    optimizer = torch.optim.AdamW([*encoder.parameters(), *head.parameters()], lr=1e-6)
    ids = torch.randint(5, encoder.config.vocab_size, (batch_size, max_length), device=device)
    labels = torch.zeros(batch_size, dtype=torch.long, device=device)
    started = time.perf_counter()
    for step in range(steps + 1):
        if step == 1:
            started = time.perf_counter()
        out = encoder(ids)
        pooled = pooled_or_cls(out)
        loss = nn.functional.cross_entropy(head(pooled), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    seconds = (time.perf_counter() - started) / steps
    encoder.load_state_dict(saved)
    return seconds


def finetune_estimate(step_s: float, train_examples: int, dev_examples: int, test_examples: int,
                      epochs: int, batch_size: int) -> StageEstimate:
    steps = epochs * -(-train_examples // batch_size)
    evaluated = dev_examples * epochs + test_examples
    return StageEstimate(steps, steps * step_s + evaluated * step_s * FORWARD_SHARE / batch_size + FIXED_SECONDS)
