"""Beam search bookkeeping for one source, independent of the model: the live beams, the finished hypotheses
and when to stop, as in Hugging Face's BeamSearchScorer.

The caller runs the model: each step it hands advance() the next-token log-probabilities of every live beam
(banned and repetition-controlled tokens already scored, bertkit.generate.repetition) and gets back each new
beam's parent row, to reorder its key/value cache with.
"""
from __future__ import annotations

import torch


class BeamSearch:
    """num_beams live hypotheses ranked by summed log-probability. A hypothesis ends when it picks end_id
    (its length then counts the end token) or reaches max_target_length tokens; ended ones are scored
    sum_logprob / length ** length_penalty and the num_beams best are kept."""

    def __init__(self, num_beams: int, end_id: int, max_target_length: int, length_penalty: float = 1.0):
        self.num_beams, self.end_id = num_beams, end_id
        self.max_target_length, self.length_penalty = max_target_length, length_penalty
        self.targets: list[list[int]] = [[]]                  # live beams, best first; all of one length
        self.scores = torch.zeros(1)                          # (B,) their summed log-probabilities
        self.finished: list[tuple[float, list[int]]] = []     # (score, tokens), best first
        self.done = max_target_length <= 0

    def advance(self, logprobs: torch.Tensor) -> torch.Tensor:
        """logprobs (B, V) for the B live beams -> (B',) parent row of each new live beam."""
        V = logprobs.shape[1]
        candidates = (self.scores.to(logprobs.device)[:, None] + logprobs).view(-1)     # (B * V,)
        # 2 * num_beams candidates leave num_beams to go on with even if num_beams of them end here
        top_scores, top_index = candidates.topk(min(2 * self.num_beams, candidates.numel()))
        length = len(self.targets[0]) + 1                     # every candidate's length, new token included
        parents, tokens, scores = [], [], []
        for rank, (score, index) in enumerate(zip(top_scores.tolist(), top_index.tolist())):
            if score == float("-inf"):
                break
            parent, token = divmod(index, V)
            if token == self.end_id:
                if rank < self.num_beams:                     # as HF: an end ranked below num_beams is dropped
                    self._finish(self.targets[parent], score, length)
                continue
            parents.append(parent)
            tokens.append(token)
            scores.append(score)
            if len(parents) == self.num_beams:
                break
        self.targets = [self.targets[p] + [t] for p, t in zip(parents, tokens)]
        self.scores = torch.tensor(scores, dtype=logprobs.dtype)
        if length >= self.max_target_length:                  # cut off: the live beams end here too
            for target, score in zip(self.targets, scores):
                self._finish(target, score, length)
            self.done = True
        else:
            self.done = not parents or not self._live_can_win(scores[0], length)
        return torch.tensor(parents, dtype=torch.long, device=logprobs.device)

    def best(self) -> list[int]:
        """The best finished hypothesis (without its end token), else the best live one."""
        if self.finished:
            return self.finished[0][1]
        return self.targets[0] if self.targets else []

    def _finish(self, tokens: list[int], sum_logprob: float, length: int) -> None:
        score = sum_logprob / length ** self.length_penalty
        if len(self.finished) < self.num_beams or score > self.finished[-1][0]:
            self.finished.append((score, tokens))
            self.finished.sort(key=lambda pair: -pair[0])     # stable: the earlier of equal scores stays first
            del self.finished[self.num_beams:]

    def _live_can_win(self, best_live: float, length: int) -> bool:
        """Whether some continuation of the best live beam (now `length` tokens, summed log-probability
        best_live) could still beat the worst kept hypothesis. Its sum can only fall, and it will end with a
        length in (length, max_target_length]; with length_penalty > 0 the longest is the most lenient."""
        if len(self.finished) < self.num_beams:
            return True
        final_length = self.max_target_length if self.length_penalty > 0 else length + 1
        return best_live / final_length ** self.length_penalty > self.finished[-1][0]
