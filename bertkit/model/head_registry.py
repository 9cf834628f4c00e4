"""HEADS: every kind of head a model folder can hold, by the key it is saved under.

The key is the head's name in a loaded `Checkpoint.heads`, in `save_checkpoint(..., heads={key: module})` and in
bertkit.json; each folder adapter in checkpoints/ maps it to its foreign names (hf_names.py, electra.py,
xlnet.py, albert.py keep the transformers names; nothing here knows them). Tasks name the head they train by
this key (finetune/registry.py `TASKS[task].head`).

A new head: its module in model/heads.py and one line here; its names in the adapter of each family that has it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch
from torch import nn

from bertkit.errors import CheckpointError
from bertkit.model.heads import (AnyConfig, MaskedLMHead, QuestionAnsweringHead, ReplacedTokenHead,
                                 SentencePairHead, TiedLMHead, TokenClassificationHead, sequence_classification_head)


@dataclass(frozen=True)
class HeadKind:
    """What the head reads and how to make one.

    reads: "summary" (the pooled vector, else [CLS] / XLNet's <cls>: (B, C)) or "tokens" (every position's
    vector: (B, T, C), or the masked positions' (N, C) for the LM heads).
    labelled: sized by a label set (num_labels = the rows of its "linear.weight"); the others have fixed outputs.
    build: (config, num_labels) -> module; the sequence classifier is the family's (heads.SEQUENCE_HEADS).
    """
    reads: Literal["summary", "tokens"]
    labelled: bool
    build: Callable[[AnyConfig, int], nn.Module]
    purpose: str


# The order is the order head keys are listed in (and transformers' combined classes named by).
HEADS: dict[str, HeadKind] = {
    "mlm": HeadKind("tokens", False, lambda config, n: MaskedLMHead(config), "masked-LM (BERT, RoBERTa, ALBERT)"),
    "lm": HeadKind("tokens", False, lambda config, n: TiedLMHead(config), "XLNet's tied LM projection"),
    "pair": HeadKind("summary", False, lambda config, n: SentencePairHead(config), "next-sentence / sentence order"),
    "discriminator": HeadKind("tokens", False, lambda config, n: ReplacedTokenHead(config),
                              "ELECTRA's replaced-token detection"),
    "classifier": HeadKind("summary", True, sequence_classification_head,
                           "sequence classification / regression (the family's head)"),
    "token_classifier": HeadKind("tokens", True, TokenClassificationHead, "token classification (NER)"),
    "qa": HeadKind("tokens", False, lambda config, n: QuestionAnsweringHead(config), "extractive QA start/end"),
}
HEAD_ORDER: tuple[str, ...] = tuple(HEADS)


def head_keys(heads) -> tuple[str, ...]:
    """The keys of `heads` in HEAD_ORDER (the order folders list them); CheckpointError naming an unknown one."""
    unknown = sorted(set(heads) - set(HEADS))
    if unknown:
        raise CheckpointError(f"unknown head {unknown[0]!r}; heads are {', '.join(HEADS)}")
    return tuple(sorted(heads, key=HEAD_ORDER.index))


def labels_in(state: dict[str, torch.Tensor]) -> int:
    """The label count of a labelled head's saved weights."""
    return state["linear.weight"].shape[0]


def head_from_state(key: str, config: AnyConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """A head module of the right shape for the weights saved under `key` (KeyError for an unknown key)."""
    kind = HEADS[key]
    return kind.build(config, labels_in(state) if kind.labelled else 0)
