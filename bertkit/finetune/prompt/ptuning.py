"""P-tuning (Liu et al. 2021, "GPT Understands, Too"): PET whose pattern holds learned continuous prompt
vectors instead of words. Each [P] slot of the template is a reserved vocabulary id ([unused0], ...) whose
embedding is replaced, on the way into the encoder, by a trainable vector; with freeze_encoder only those
vectors train, so one frozen MLM serves many tasks.

    PTuningClassifier(encoder, mlm, tokenizer, Pattern.parse("{text} [P] [P] [MASK]."), verbalizer)
"""
from __future__ import annotations

import torch
from torch import nn

from bertkit.errors import BertkitError
from bertkit.finetune.prompt.pet import PROMPT_SLOT, Pattern, PETClassifier, Verbalizer


class PTuningClassifier(PETClassifier):
    def __init__(self, encoder: nn.Module, mlm_head: nn.Module, tokenizer, pattern: Pattern, verbalizer: Verbalizer,
                 max_length: int = 256, freeze_encoder: bool = True, reserved_token: str = "[unused{}]"):
        super().__init__(encoder, mlm_head, tokenizer, pattern, verbalizer, max_length)
        count = pattern.num_prompt_slots
        if count == 0:
            raise BertkitError(f"a P-tuning template needs {PROMPT_SLOT} slots for the learned prompt, e.g. "
                               "'{text} [P] [P] [MASK].'")
        ids = [tokenizer.token_to_id(reserved_token.format(i)) for i in range(count)]
        if any(i is None for i in ids):
            raise BertkitError(f"P-tuning reserves {reserved_token.format('N')} tokens for its {count} prompt slots "
                               "and this vocabulary lacks some; train the vocab with --unused >= the slot count")
        self._prompt_ids = tuple(ids)
        words = encoder.embeddings.token.weight
        # Start from the mean word embedding (plus noise): a neutral point the MLM already reads sensibly.
        start = words.detach().mean(dim=0, keepdim=True) + 0.02 * torch.randn(count, words.shape[1])
        self.prompt = nn.Parameter(start.to(words.dtype))
        self.register_buffer("prompt_lookup", torch.tensor(ids), persistent=False)
        if freeze_encoder:
            self.encoder.requires_grad_(False)
            self.mlm.requires_grad_(False)
        # The encoder has no inputs_embeds argument: swap the reserved ids' embeddings on their way out.
        self._hook = encoder.embeddings.token.register_forward_hook(self._insert_prompt)

    def prompt_token_ids(self) -> tuple[int, ...]:
        return self._prompt_ids

    def _insert_prompt(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        input_ids = inputs[0]
        slot = (input_ids[..., None] == self.prompt_lookup).to(output.dtype)       # (B, T, P) one-hot
        is_prompt = slot.sum(dim=-1, keepdim=True)                                  # (B, T, 1)
        return output * (1 - is_prompt) + slot @ self.prompt.to(output.dtype)

    @torch.no_grad()
    def store_prompt_in_embeddings(self) -> None:
        """Write the learned vectors into the reserved tokens' embedding rows. The hook then changes nothing
        (it swaps in the same values), and a plain PETClassifier given prompt_ids=prompt_token_ids() on this
        encoder computes exactly what this model does: the saved encoder folder carries the prompt."""
        weight = self.encoder.embeddings.token.weight
        weight[self.prompt_lookup] = self.prompt.detach().to(weight.dtype)

    def remove_hook(self) -> None:
        """Detach from the encoder, which then embeds the reserved ids as ordinary tokens again."""
        self._hook.remove()
