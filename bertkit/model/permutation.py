"""XLNet's factorization order with partial prediction (Yang et al. 2019, sections 2.2-2.3), as the perm_mask and
target_mapping that XLNetModel reads.

A random order z of the positions is drawn and only its last c positions are predicted, about 1/K of them
(|z| / (|z| - c) ~ K; the paper uses K = 6 or 7). As in the original implementation, the other positions are
context: they come first in the order, every position may see them, and they see each other but no target.
A target sees the context and the targets before it in the order; in the query stream never itself (that is
what it predicts), in the content stream itself too (XLNetModel unmasks the diagonal there).
B = batch, T = sequence length, P = most targets in a row of the batch.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

PAPER_K = 6      # XLNet-Large's setting (section 3.1); the ablation also uses 7


class PermutationTargets(NamedTuple):
    perm_mask: torch.Tensor          # (B, T, T) float: 1 where query i may not attend key j
    target_mapping: torch.Tensor     # (B, P, T) float: row p is one-hot at the p-th target, in the order z
    target_positions: torch.Tensor   # (B, P) long: that position, -1 for rows a shorter row does not use
    rank: torch.Tensor               # (B, T) long: place of each target in the order (0 first), -1 for context


def permutation_targets(predictable: torch.Tensor, k: float = PAPER_K,
                        rng: Optional[torch.Generator] = None) -> PermutationTargets:
    """predictable (B, T) bool: positions that may be targets (real tokens, not <sep> / <cls> / padding).
    Each row predicts max(1, round(n / k)) of its n predictable positions (none if n = 0)."""
    if k <= 1:
        raise ValueError(f"k must be > 1 (about 1/k of the tokens are predicted), got {k}")
    B, T = predictable.shape
    rank = torch.full((B, T), -1, dtype=torch.long)
    orders = []
    for row in range(B):
        candidates = predictable[row].nonzero().squeeze(-1).cpu()
        count = max(1, round(len(candidates) / k)) if len(candidates) else 0
        order = candidates[torch.randperm(len(candidates), generator=rng)][len(candidates) - count:]   # the last c
        rank[row, order] = torch.arange(count)
        orders.append(order)
    is_target = rank >= 0                                                              # (B, T)
    # a target i sees targets ranked before it; a context position (rank -1) sees no target: compare with 0
    own = torch.where(is_target, rank, torch.zeros_like(rank))                         # (B, T)
    perm_mask = is_target[:, None, :] & (rank[:, None, :] >= own[:, :, None])          # (B, T_query, T_key)
    width = max((len(order) for order in orders), default=0)
    target_mapping = torch.zeros(B, width, T)
    target_positions = torch.full((B, width), -1, dtype=torch.long)
    for row, order in enumerate(orders):
        target_mapping[row, torch.arange(len(order)), order] = 1.0
        target_positions[row, :len(order)] = order
    device = predictable.device
    return PermutationTargets(perm_mask.float().to(device), target_mapping.to(device), target_positions.to(device),
                              rank.to(device))
