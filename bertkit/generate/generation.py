"""The decoding loop: one forward pass over the prompt, then one token at a time from the key/value cache.

With use_cache=False every step recomputes the whole sequence; both paths give the same tokens (tested),
the cached one in O(T) work per token instead of O(T^2).
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence

import torch

from bertkit.errors import BertkitError
from bertkit.model.causal_lm import CausalLM
from bertkit.generate.repetition import RepetitionConfig, control_repetition
from bertkit.generate.sampling import GREEDY, SamplingConfig, next_token


class Generation(NamedTuple):
    token_ids: list[int]            # the new tokens only (the EOS that stopped it included)
    stop_reason: str                # "eos" | "max_new_tokens" | "max_length"


@torch.no_grad()
def generate(model: CausalLM, prompt_ids: Sequence[int], max_new_tokens: int = 50,
             sampling: SamplingConfig = GREEDY, eos_id: Optional[int] = None, seed: Optional[int] = None,
             use_cache: bool = True, on_token: Optional[Callable[[int], None]] = None,
             no_repeat_ngram_size: int = 0, repetition_penalty: float = 1.0) -> Generation:
    """Continue one prompt. on_token(id) is called as each token is chosen (for streaming).
    no_repeat_ngram_size / repetition_penalty look at the prompt and the new tokens, as HF's generate does for a
    decoder-only model (bertkit.generate.repetition)."""
    repetition = RepetitionConfig(no_repeat_ngram_size, repetition_penalty)
    if not prompt_ids:
        raise BertkitError("the prompt is empty; give at least one token (e.g. start from <|endoftext|>)")
    max_length = model.config.max_length
    if len(prompt_ids) >= max_length:
        raise BertkitError(f"the prompt has {len(prompt_ids)} tokens; the model reads at most {max_length} "
                           "(its position table): shorten the prompt")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)     # (1, T)
    new: list[int] = []
    history = list(prompt_ids)          # what the repetition controls look at: the prompt, then each new token
    cache = None
    step_input = ids
    reason = "max_new_tokens"
    try:
        for _ in range(max_new_tokens):
            if ids.shape[1] >= max_length:
                reason = "max_length"
                break
            if use_cache:
                out = model(step_input, cache=cache, use_cache=True)
                cache = out.cache
            else:
                out = model(ids)
            logits = control_repetition(out.logits[:, -1], [history], repetition)      # (1, V)
            token = next_token(logits, sampling, generator)                        # (1,)
            token_id = int(token)
            new.append(token_id)
            history.append(token_id)
            if on_token is not None:
                on_token(token_id)
            if eos_id is not None and token_id == eos_id:
                reason = "eos"
                break
            step_input = token[:, None]
            ids = torch.cat([ids, step_input], dim=1)
    finally:
        model.train(was_training)
    return Generation(new, reason)


class TextStream:
    """Turns tokens into printable text as they come: byte-level BPE may split one character across
    tokens, so text is decoded from all tokens so far and only the settled new part is emitted."""

    def __init__(self, decode: Callable[[list[int]], str], write: Callable[[str], None]):
        self.decode, self.write = decode, write
        self.ids: list[int] = []
        self.shown = 0

    def add(self, token_id: int) -> None:
        self.ids.append(token_id)
        text = self.decode(self.ids)
        if text.endswith("\ufffd"):          # an incomplete UTF-8 sequence: wait for its next bytes
            return
        self.write(text[self.shown:])
        self.shown = len(text)

    def finish(self) -> str:
        text = self.decode(self.ids)
        self.write(text[self.shown:])
        self.shown = len(text)
        return text
