"""Transfer-set augmentation for distillation (Tang et al. 2019, "Distilling Task-Specific Knowledge from
BERT into Simple Neural Networks"): the teacher can label text nobody labeled, so the student learns from more
examples than the gold set has. Each copy of a training example replaces every non-special token with [MASK]
with probability `mask_prob`; the copies carry no gold label (UNLABELED) and are learned from the teacher's
logits only. Copies are drawn once, from `seed`, so the teacher's logits for them can be cached like the
originals'.
"""
from __future__ import annotations

import random
from typing import Collection, Sequence

UNLABELED = -100          # cross_entropy's ignore_index: the gold-label loss skips these rows


def masked_copies(features: Sequence, copies: int, mask_prob: float, mask_id: int, special_ids: Collection[int],
                  seed: int) -> list:
    """-> copies * len(features) features (NamedTuples with input_ids and label), copy by copy."""
    if copies < 0 or not 0.0 < mask_prob < 1.0:
        raise ValueError(f"copies must be >= 0 (got {copies}) and mask_prob in (0, 1) (got {mask_prob})")
    rng = random.Random(seed)
    out = []
    for _ in range(copies):
        for feature in features:
            ids = [mask_id if token not in special_ids and rng.random() < mask_prob else token
                   for token in feature.input_ids]
            out.append(feature._replace(input_ids=ids, label=UNLABELED))
    return out
