"""Sequence-level tasks: classification (single texts and pairs, multi-class or multi-label) and regression.

Rows are `[CLS] text [SEP] (text_pair [SEP])`. Texts over max_length are truncated explicitly
(longest_first, as BERT's run_classifier, or head+tail for single texts) and the count is reported.
Losses: cross-entropy (multi-class), binary cross-entropy per label (multi-label), MSE (regression).
"""
from __future__ import annotations

import sys
from typing import NamedTuple, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.data.readers import TextExample
from bertkit.errors import BertkitError
from bertkit.finetune.inference import forward_features, stack
from bertkit.finetune.metrics import (classification_metrics, mean_cross_entropy, multilabel_metrics,
                                      regression_metrics)
from bertkit.finetune.predictions import multi_label_decisions, sequence_predictions
from bertkit.tokenizer.encoding import keep_head_and_tail


class SequenceFeature(NamedTuple):
    input_ids: list[int]
    token_type_ids: list[int]
    label: Union[int, float, list[float], None]


class SequenceTask:
    """task: classification | pair-classification | multi-label | regression."""

    def __init__(self, task: str, tokenizer, label_names: Sequence[str], max_length: int,
                 long_texts: str = "truncate", class_weights: Optional[Sequence[float]] = None):
        if long_texts not in ("truncate", "head+tail"):
            raise BertkitError(f"long_texts {long_texts!r} is not one of truncate, head+tail")
        self.task, self.tokenizer, self.max_length, self.long_texts = task, tokenizer, max_length, long_texts
        self.label_names = list(label_names)
        self.label_index = {name: i for i, name in enumerate(self.label_names)}
        if class_weights is not None and len(class_weights) != len(self.label_names):
            raise ValueError(f"{len(class_weights)} class weights for {len(self.label_names)} labels")
        # cross-entropy weight per label (training only; None: unweighted)
        self.class_weights = torch.tensor(class_weights, dtype=torch.float) if class_weights is not None else None

    @property
    def num_labels(self) -> int:
        return 1 if self.task == "regression" else len(self.label_names)

    def encode(self, examples: Sequence[TextExample], quiet: bool = False) -> list[SequenceFeature]:
        texts = [ex.text for ex in examples]
        pairs = [ex.text_pair for ex in examples] if any(ex.text_pair for ex in examples) else None
        if self.long_texts == "head+tail" and pairs is None:
            rows, truncated = self._head_and_tail(texts)
        else:
            rows, truncated = self._singles_and_pairs(texts, pairs or [None] * len(texts))
        if truncated and not quiet:
            how = "kept their head and tail" if self.long_texts == "head+tail" and pairs is None else \
                "were truncated (longest_first)"
            print(f"bertkit: {truncated} of {len(texts)} texts were longer than max_length {self.max_length} "
                  f"tokens and {how}", file=sys.stderr)
        return [SequenceFeature(list(ids), list(types), self._target(ex.label)) for (ids, types), ex in zip(rows, examples)]

    def _singles_and_pairs(self, texts: Sequence[str], pairs: Sequence[Optional[str]]) -> tuple[list, int]:
        """[CLS] a [SEP] for single texts and [CLS] a [SEP] b [SEP] for pairs, encoded apart: a single text
        among pairs must not gain an empty second segment (its prediction would depend on its neighbours)."""
        rows: list = [None] * len(texts)
        truncated = 0
        for paired in (False, True):
            group = [i for i, pair in enumerate(pairs) if bool(pair) == paired]
            if not group:
                continue
            encoded = self.tokenizer.encode_batch([texts[i] for i in group],
                                                  pairs=[pairs[i] for i in group] if paired else None,
                                                  max_length=self.max_length, truncation="longest_first")
            for i, ids, types in zip(group, encoded.input_ids, encoded.token_type_ids):
                rows[i] = (ids, types)
            truncated += sum(encoded.truncated)
        return rows, truncated

    def _head_and_tail(self, texts: Sequence[str]) -> tuple[list, int]:
        """Long texts keep their start and end (tokenizer/encoding.py keep_head_and_tail)."""
        encoded = self.tokenizer.encode_batch(texts, max_length=None, truncation=None)
        rows, truncated = [], 0
        for ids in encoded.input_ids:
            row, cut = keep_head_and_tail(ids, self.max_length)
            rows.append((row, [0] * len(row)))
            truncated += cut
        return rows, truncated

    def _target(self, label) -> Union[int, float, list[float], None]:
        if label is None:
            return None
        if self.task == "regression":
            return float(label)
        if self.task == "multi-label":
            hot = [0.0] * len(self.label_names)
            for name in label:
                hot[self.label_index[name]] = 1.0
            return hot
        return self.label_index[label]

    def make_targets(self, features: Sequence[SequenceFeature], length: int) -> torch.Tensor:
        labels = [f.label for f in features]
        if self.task == "classification" or self.task == "pair-classification":
            return torch.tensor(labels, dtype=torch.long)
        return torch.tensor(labels, dtype=torch.float)

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        if self.task == "regression":
            return F.mse_loss(logits.squeeze(-1), targets)
        if self.task == "multi-label":
            return F.binary_cross_entropy_with_logits(logits, targets)
        weight = self.class_weights.to(logits.device) if self.class_weights is not None else None
        return F.cross_entropy(logits, targets, weight=weight)

    def evaluate(self, model, features: Sequence[SequenceFeature], examples: Sequence[TextExample],
                 batch_size: int = 64) -> dict[str, float]:
        logits = stack(forward_features(model, features, self.tokenizer.pad_id, batch_size))
        labels = [f.label for f in features]
        if self.task == "regression":
            return regression_metrics(labels, logits[:, 0])
        if self.task == "multi-label":
            return multilabel_metrics(np.array(labels), multi_label_decisions(logits))
        return {**classification_metrics(labels, logits.argmax(-1), self.num_labels),
                "loss": mean_cross_entropy(logits, labels)}

    def predict(self, model, features: Sequence[SequenceFeature], examples=None, batch_size: int = 64) -> list[dict]:
        logits = stack(forward_features(model, features, self.tokenizer.pad_id, batch_size))
        return sequence_predictions(logits, self.task, self.label_names)


def examples_from_inputs(items: Sequence[Union[str, tuple[str, str], list]]) -> list[TextExample]:
    """API inputs: texts, or (text, text_pair) pairs."""
    examples = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            examples.append(TextExample(item, None, None, i))
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            examples.append(TextExample(str(item[0]), str(item[1]), None, i))
        else:
            raise TypeError(f"input {i}: expected a text or a (text, text_pair) pair, got {type(item).__name__}")
    return examples


def optional_label_names(task: str, names: Optional[Sequence[str]]) -> list[str]:
    return [] if task == "regression" else list(names or [])
