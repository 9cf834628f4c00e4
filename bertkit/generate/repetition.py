"""Discouraging repetition while decoding, the one place greedy, beam search and sampling all call: the no-repeat
n-gram ban (Paulus et al. 2017, https://arxiv.org/abs/1705.04304) and the repetition penalty (CTRL, Keskar et al.
2019, https://arxiv.org/abs/1909.05858), with Hugging Face's semantics (NoRepeatNGramLogitsProcessor,
RepetitionPenaltyLogitsProcessor; tested against them):
- no_repeat_ngram_size n > 0: a token that would complete an n-gram already in the history gets -inf;
- repetition_penalty p: every token already in the history (counted once, however often it occurs) has its
  score divided by p when positive and multiplied by p when negative (p > 1 discourages, p < 1 encourages).
The history is what HF would pass as input_ids: the prompt and the new tokens for a causal LM, the target so far
for a seq2seq model (the source is not penalised: a paraphrase may keep its words).
Like HF's processors these act on raw logits (greedy, before temperature / top-k / top-p when sampling) or on
log-probabilities (beam search), whichever the caller scores with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from bertkit.errors import BertkitError
from bertkit.options import repetition_problem


@dataclass(frozen=True)
class RepetitionConfig:
    no_repeat_ngram_size: int = 0        # 0 = off
    repetition_penalty: float = 1.0      # 1.0 = off; CTRL suggests 1.2

    def __post_init__(self) -> None:
        problem = repetition_problem(self.no_repeat_ngram_size, self.repetition_penalty)
        if problem is not None:
            raise BertkitError(problem)

    @property
    def active(self) -> bool:
        return self.no_repeat_ngram_size > 0 or self.repetition_penalty != 1.0


def ngram_banned_tokens(history: Sequence[int], n: int) -> list[int]:
    """Tokens that would complete an n-gram already in `history` (n <= 0: none)."""
    if n <= 0 or len(history) < n:
        return []
    prefix = list(history[len(history) - n + 1:])           # the n - 1 tokens the next one would extend
    return [history[i + n - 1] for i in range(len(history) - n + 1) if list(history[i:i + n - 1]) == prefix]


def control_repetition(scores: torch.Tensor, histories: Sequence[Sequence[int]],
                       config: RepetitionConfig) -> torch.Tensor:
    """scores (B, V) logits or log-probabilities, histories one token list per row -> (B, V) new scores (the
    input is left as it was)."""
    if not config.active:
        return scores
    if len(histories) != scores.shape[0]:
        raise ValueError(f"{len(histories)} histories for {scores.shape[0]} rows of scores")
    scores = scores.clone()
    if config.repetition_penalty != 1.0:
        seen = torch.zeros_like(scores, dtype=torch.bool)                                  # (B, V)
        for row, history in enumerate(histories):
            if len(history):
                seen[row, torch.as_tensor(list(history), dtype=torch.long, device=scores.device)] = True
        penalised = torch.where(scores < 0, scores * config.repetition_penalty, scores / config.repetition_penalty)
        scores = torch.where(seen, penalised, scores)
    if config.no_repeat_ngram_size > 0:
        for row, history in enumerate(histories):
            banned = ngram_banned_tokens(history, config.no_repeat_ngram_size)
            if banned:
                scores[row, banned] = float("-inf")
    return scores
