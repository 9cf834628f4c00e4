"""Choosing the next token from logits: greedy, temperature, top-k and nucleus (top-p) sampling."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from bertkit.errors import BertkitError


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0        # 0 = greedy (argmax)
    top_k: Optional[int] = None     # keep the k most likely tokens
    top_p: Optional[float] = None   # keep the smallest set whose probability reaches p (Holtzman et al. 2020)

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise BertkitError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise BertkitError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise BertkitError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


GREEDY = SamplingConfig(temperature=0.0)


def filter_logits(logits: torch.Tensor, top_k: Optional[int], top_p: Optional[float]) -> torch.Tensor:
    """(B, V) logits with the tokens outside top-k / top-p set to -inf."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]                    # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # Drop a token when the tokens before it already reach p; the most likely token always stays.
        drop_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def next_token(logits: torch.Tensor, sampling: SamplingConfig,
               generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """(B, V) logits of the last position -> (B,) token ids."""
    logits = logits.float()
    if sampling.greedy:
        return logits.argmax(dim=-1)
    logits = filter_logits(logits / sampling.temperature, sampling.top_k, sampling.top_p)
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)
