"""What a pre-training objective is, shaped like fairseq's criteria: one object per objective that the job asks
for the model, the masking, the loss, the evaluation and the folders to save. The job (pretrain/job.py) owns
the rest: tokenizer, shards, instances, batches, the training loop, resume.

Batches (pretrain/batching.py): input_ids, token_type_ids, attention_mask (B, T); labels (B, T), the original
id at the masked positions and IGNORE_INDEX elsewhere; pair_labels (B,) for nsp/sop instances.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable, Optional

import torch
from torch import nn

from bertkit.model.config import EncoderConfig
from bertkit.pretrain.config import PretrainConfig
from bertkit.pretrain.instances import InstanceKind
from bertkit.pretrain.masking import MaskingConfig
from bertkit.tokenizer import Tokenizer

Batch = dict[str, torch.Tensor]


@dataclasses.dataclass(frozen=True)
class SaveContext:
    """What every save needs besides the model: the folder, the tokenizer, bertkit.json entries, and the
    sentence-embedding settings a --model folder carried."""
    output: Path
    tokenizer: Tokenizer
    meta: dict[str, Any]
    sentence: Any = None


class Objective:
    """One pre-training objective, made from the job's config (as a fairseq criterion from its args).
    Subclasses set `instances` and implement the methods; its name is its key in OBJECTIVES (objectives/__init__.py),
    the one place names live."""

    instances: InstanceKind = "packed"        # packed full sentences, or nsp / sop sentence pairs

    def __init__(self, config: PretrainConfig):
        self.config = config

    def masking(self) -> MaskingConfig:
        """The masking of the training and held-out batches (BERT's 15%, 80/10/10 by default)."""
        return MaskingConfig(strategy=self.config.data.masking, rate=self.config.data.mask_rate)

    def encoder_config(self, tokenizer: Tokenizer) -> EncoderConfig:
        """The encoder config of a model trained from scratch."""
        return self.config.encoder.replace(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id)

    def build(self, encoder_config: EncoderConfig, init: Optional[Any]) -> nn.Module:
        """The model: new (init None) or continuing the loaded --model checkpoint."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """The training loss and its logs (the loop's loss_fn contract)."""
        raise NotImplementedError

    def evaluate(self, model: nn.Module, batches: Iterable[Batch], device: torch.device) -> dict[str, float]:
        """Held-out metrics; "loss" first."""
        raise NotImplementedError

    def save(self, model: nn.Module, context: SaveContext) -> None:
        """Write the model folder(s) into context.output."""
        raise NotImplementedError

    def freeze_encoder(self, model: nn.Module) -> None:
        """--heads.train_only: train the heads alone."""
        raise NotImplementedError
