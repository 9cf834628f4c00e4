"""The fine-tuned model: one encoder plus the one head its task needs, and the task's metadata.

The head is the task's `TASKS[task].head` (finetune/tasks.py), a key of model/head_registry.py's HEADS, which the
checkpoint layer maps to each format's names; a head reading the summary vector gets the pooler output (else
[CLS]), one reading tokens gets every position. bertkit.json holds the task and the label names, so a reloaded model
predicts the same labels; reloading for a different task or label set fails with a clear message.
"""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import nn

from bertkit.errors import CheckpointError
from bertkit.model.encoder import Encoder
from bertkit.finetune.tasks import HEAD_TASKS, TASKS
from bertkit.model.head_registry import HEADS
from bertkit.model.pooling import pooled_or_cls

Logits = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


class FinetuneModel(nn.Module):
    """encoder -> head. forward returns logits: (B, L) for sequence tasks, (B, T, L) for NER, and
    (start, end), each (B, T), for QA."""

    def __init__(self, encoder: Encoder, head: nn.Module, task: str, label_names: Optional[list[str]] = None):
        super().__init__()
        if task not in HEAD_TASKS:
            raise ValueError(f"unknown task {task!r}; choose one of {', '.join(HEAD_TASKS)}")
        self.encoder, self.head, self.task = encoder, head, task
        self.label_names = list(label_names or [])

    @property
    def head_key(self) -> str:
        return TASKS[self.task].head

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None) -> Logits:
        if HEADS[self.head_key].reads == "summary":
            # The head reads [CLS] only, so the last layer computes that one position (exact, ~1/L less work).
            out = self.encoder(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, cls_only=True)
            pooled = pooled_or_cls(out)
            return self.head(pooled)                                # (B, L)
        out = self.encoder(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return self.head(out.last_hidden_state)                     # (B, T, L) or 2 x (B, T)


def new_head(task: str, encoder: Encoder, num_labels: int) -> nn.Module:
    config = encoder.config
    head = HEADS[TASKS[task].head].build(config, num_labels)   # the classifier is the family's (SEQUENCE_HEADS)
    # BERT's initialization (normal(0, initializer_range), zero bias), as the encoder's own layers.
    for module in head.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=config.initializer_range)
            nn.init.zeros_(module.bias)
    return head


def check_saved_task(checkpoint, task: str) -> None:
    """Fail early (before reading data) when a folder fine-tuned for one task is used for another, or its model
    cannot do the task."""
    saved_task = (checkpoint.meta or {}).get("task")
    where = getattr(checkpoint, "path", None) or "the model folder"
    if checkpoint.config.family == "xlnet" and task in ("ner", "qa"):
        raise CheckpointError(f"{where} is an XLNet model; bertkit fine-tunes XLNet for classification, "
                              "pair-classification, multi-label and regression (ner and qa frame [CLS] A [SEP] rows)")
    if saved_task in HEAD_TASKS and saved_task != task and TASKS[saved_task].head != TASKS[task].head:
        raise CheckpointError(f"{where} was fine-tuned for {saved_task!r}, not {task!r}; pass --task "
                              f"{saved_task} or start from the encoder checkpoint it was trained from")


def model_from_checkpoint(checkpoint, task: str, label_names: Optional[list[str]] = None,
                          reuse_head: bool = True) -> FinetuneModel:
    """Attach the task's head to a loaded checkpoint: the saved head when the folder has one for this task
    (continuing or evaluating a fine-tuned model), a fresh head otherwise.

    Raises CheckpointError when the folder was fine-tuned for another task, or its label names differ from
    `label_names` (when given), instead of loading a head whose outputs mean something else.
    """
    check_saved_task(checkpoint, task)
    meta = checkpoint.meta or {}
    saved_task = meta.get("task")
    kind = TASKS[task]
    key = kind.head
    saved_labels = meta.get("labels")
    where = getattr(checkpoint, "path", None) or "the model folder"
    head = checkpoint.heads.get(key) if reuse_head else None
    if head is not None and saved_task is not None and saved_task != task:
        raise CheckpointError(f"{where} holds a {saved_task!r} head, not a {task!r} one; pass --task {saved_task}")
    if head is not None and label_names is not None and kind.labels not in ("score", "none"):
        found = saved_labels or [str(i) for i in range(head.num_labels)]
        if list(found) != list(label_names):
            raise CheckpointError(
                f"{where}: the saved head predicts {len(found)} labels ({', '.join(map(str, found[:8]))}) but the "
                f"data has {len(label_names)} ({', '.join(label_names[:8])}); fine-tune from the base encoder to "
                "change the label set")
    if head is None:
        if label_names is None and kind.labels not in ("score", "none"):
            raise CheckpointError(f"{where} has no {task} head; fine-tune it first (bertkit finetune)")
        num_labels = 1 if kind.labels == "score" else len(label_names or [])
        head = new_head(task, checkpoint.encoder, num_labels)
    names = list(label_names) if label_names is not None else list(saved_labels or [])
    if not names and hasattr(head, "num_labels") and kind.labels != "score":
        names = [str(i) for i in range(head.num_labels)]
    return FinetuneModel(checkpoint.encoder, head, task, names)


def model_meta(model: FinetuneModel, extra: Optional[dict] = None) -> dict:
    """What bertkit.json records for a fine-tuned model."""
    return {"task": model.task, "labels": model.label_names, **(extra or {})}


def hf_config_extra(model: FinetuneModel) -> dict:
    """config.json keys that HF's ForSequenceClassification / ForTokenClassification read."""
    if model.task == "qa":
        return {}
    if model.task == "regression":
        return {"num_labels": 1, "problem_type": "regression"}
    extra = {"id2label": {str(i): n for i, n in enumerate(model.label_names)},
             "label2id": {n: i for i, n in enumerate(model.label_names)}}
    if model.task == "multi-label":
        extra["problem_type"] = "multi_label_classification"
    elif model.task != "ner":
        extra["problem_type"] = "single_label_classification"
    return extra
