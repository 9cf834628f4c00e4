"""Running a fine-tuned model over encoded features: length-sorted, dynamically padded, no gradients.

Returns one output per feature, in feature order and cut to the feature's own length, so task code never
sees padding: (L,) for sequence tasks, (T_i, L) for NER, a (T_i,) start and end pair for QA.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from bertkit.finetune.batching import collate, inference_batches
from bertkit.runtime import autocast


def no_targets(features: Sequence[Any], length: int) -> None:
    return None


def forward_features(model: torch.nn.Module, features: Sequence[Any], pad_id: int, batch_size: int = 64,
                     device: torch.device | str | None = None) -> list[Any]:
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    outputs: list[Any] = [None] * len(features)
    lengths = [len(f.input_ids) for f in features]

    def make_batch(indices: list[int]):
        return collate([features[i] for i in indices], indices, pad_id, no_targets)

    with torch.no_grad(), autocast(device):
        for batch in inference_batches(lengths, batch_size, make_batch, token_budget=batch_size * 128):
            batch = batch.to(device)
            logits = model(batch.input_ids, batch.attention_mask, batch.token_type_ids)
            if isinstance(logits, tuple):
                start, end = (x.float().cpu().numpy() for x in logits)
                for row, index in enumerate(batch.indices):
                    outputs[index] = (start[row, :lengths[index]], end[row, :lengths[index]])
                continue
            values = logits.float().cpu().numpy()
            for row, index in enumerate(batch.indices):
                outputs[index] = values[row, :lengths[index]] if values.ndim == 3 else values[row]
    model.train(was_training)
    return outputs


def stack(outputs: list[Any]) -> np.ndarray:
    return np.stack(outputs) if outputs else np.zeros((0,))
