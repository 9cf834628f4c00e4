"""Prompt-based classification with a masked LM (PET, Schick & Schütze 2021): a pattern turns a text into
a cloze question and a verbalizer maps each label to a word; the label score is the MLM logit of its word
at [MASK]. Works zero-shot with any MLM and fine-tunes on a few examples with the same head (pet_loss).

    pattern = Pattern.parse("{text} It was [MASK].")
    verbalizer = Verbalizer.parse("pos=great,neg=terrible", tokenizer)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.errors import BertkitError

TEXT_SLOT, MASK_SLOT, PROMPT_SLOT = "{text}", "[MASK]", "[P]"
_SLOTS = re.compile(r"(\[MASK\]|\[P\])")


@dataclass(frozen=True)
class Pattern:
    before: str      # template text before {text}; [MASK] and [P] slots sit in before or after
    after: str

    @classmethod
    def parse(cls, template: str) -> "Pattern":
        if template.count(TEXT_SLOT) != 1 or template.count(MASK_SLOT) != 1:
            raise BertkitError(f"template {template!r} must hold {TEXT_SLOT} and {MASK_SLOT} once each, e.g. "
                               f"'{{text}} It was [MASK].'")
        before, after = template.split(TEXT_SLOT)
        return cls(before, after)

    @property
    def num_prompt_slots(self) -> int:
        return (self.before + self.after).count(PROMPT_SLOT)

    def encode(self, tokenizer, texts: Sequence[str], max_length: int,
               prompt_ids: Sequence[int] = ()) -> list[list[int]]:
        """[CLS] pattern-with-text [SEP] ids; the text (never the pattern) is cut to fit max_length. Each
        [P] slot (P-tuning) takes the next id of prompt_ids."""
        piece = lambda s: tokenizer.backend.encode(s, add_special_tokens=False).ids if s.strip() else []
        prompts = iter(prompt_ids)

        def fill(part: str) -> list[int]:
            ids: list[int] = []
            for chunk in _SLOTS.split(part):
                if chunk == MASK_SLOT:
                    ids.append(tokenizer.mask_id)
                elif chunk == PROMPT_SLOT:
                    ids.append(next(prompts))
                else:
                    ids += piece(chunk)
            return ids

        if len(prompt_ids) != self.num_prompt_slots:
            raise BertkitError(f"the template has {self.num_prompt_slots} {PROMPT_SLOT} slots but "
                               f"{len(prompt_ids)} prompt token ids were given")
        before, after = fill(self.before), fill(self.after)
        room = max_length - 2 - len(before) - len(after)
        if room < 1:
            raise BertkitError(f"the template takes {len(before) + len(after)} tokens, leaving no room for the "
                               f"text within max_length {max_length}")
        texts_ids = [e.ids for e in tokenizer.backend.encode_batch(list(texts), add_special_tokens=False)]
        return [[tokenizer.cls_id, *before, *ids[:room], *after, tokenizer.sep_id] for ids in texts_ids]


@dataclass(frozen=True)
class Verbalizer:
    labels: tuple[str, ...]
    token_ids: tuple[int, ...]   # one vocabulary token per label

    @classmethod
    def parse(cls, spec: str, tokenizer) -> "Verbalizer":
        """"pos=great,neg=terrible": label=word pairs; each word must be one token of the vocabulary."""
        labels, ids = [], []
        for item in filter(None, (s.strip() for s in spec.split(","))):
            label, sep, word = item.partition("=")
            if not sep or not label.strip() or not word.strip():
                raise BertkitError(f"verbalizer item {item!r} is not label=word (e.g. pos=great,neg=terrible)")
            pieces = tokenizer.backend.encode(word.strip(), add_special_tokens=False).ids
            if len(pieces) != 1 or pieces[0] == getattr(tokenizer, "unk_id", None):
                raise BertkitError(f"verbalizer word {word.strip()!r} (label {label.strip()!r}) is not one known "
                                   f"token of this vocabulary ({len(pieces)} pieces); choose a one-token word")
            labels.append(label.strip())
            ids.append(pieces[0])
        if len(labels) < 2 or len(set(labels)) != len(labels) or len(set(ids)) != len(ids):
            raise BertkitError(f"verbalizer {spec!r} needs two or more distinct labels with distinct words")
        return cls(tuple(labels), tuple(ids))


class PETClassifier(nn.Module):
    """Encoder + MLM head scored at [MASK] on the verbalizer's words: (B, num_labels) logits."""

    def __init__(self, encoder: nn.Module, mlm_head: nn.Module, tokenizer, pattern: Pattern, verbalizer: Verbalizer,
                 max_length: int = 256, prompt_ids: Sequence[int] = ()):
        """prompt_ids fill the template's [P] slots: a saved P-tuning model keeps its learned prompt vectors in
        those reserved tokens' embedding rows, so it runs as a plain PETClassifier."""
        super().__init__()
        self.encoder, self.mlm = encoder, mlm_head
        self._prompt_ids = tuple(prompt_ids)
        self.tokenizer, self.pattern, self.verbalizer, self.max_length = tokenizer, pattern, verbalizer, max_length
        self.register_buffer("label_token_ids", torch.tensor(verbalizer.token_ids), persistent=False)

    def prompt_token_ids(self) -> tuple[int, ...]:
        return self._prompt_ids

    def encode(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        ids = self.pattern.encode(self.tokenizer, texts, min(self.max_length, self.encoder.config.max_length),
                                  self.prompt_token_ids())
        width = max(map(len, ids))
        input_ids = torch.full((len(ids), width), self.tokenizer.pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for i, row in enumerate(ids):
            input_ids[i, :len(row)] = torch.tensor(row)
            attention_mask[i, :len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids, attention_mask=attention_mask).last_hidden_state
        at_mask = hidden[input_ids == self.tokenizer.mask_id]                       # (B, C): one [MASK] per row
        # Only the label words' rows of the tied embedding matrix are scored: (B, num_labels).
        words = self.encoder.embeddings.token.weight
        return self.mlm(at_mask, words)[:, self.label_token_ids]

    @torch.no_grad()
    def predict(self, texts: Sequence[str], batch_size: int = 32) -> list[str]:
        self.eval()
        device = next(self.parameters()).device
        out: list[str] = []
        for start in range(0, len(texts), batch_size):
            batch = {k: v.to(device) for k, v in self.encode(texts[start:start + batch_size]).items()}
            out += [self.verbalizer.labels[i] for i in self(**batch).argmax(dim=-1).tolist()]
        return out


def pet_loss(model: nn.Module, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy over the verbalizer words at [MASK]; batch: input_ids, attention_mask, labels (B,)."""
    logits = model(batch["input_ids"], batch["attention_mask"])
    loss = F.cross_entropy(logits.float(), batch["labels"])
    return loss, {"accuracy": float((logits.argmax(-1) == batch["labels"]).float().mean())}
