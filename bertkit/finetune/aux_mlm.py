"""SiATL's auxiliary language-model loss for fine-tuning, with BERT's MLM as the language model.

Chronopoulou et al. 2019 ("An Embarrassingly Simple Approach for Transfer Learning from Pretrained Language
Models") train on L = L_task + gamma * L_LM over the task's own texts: the LM loss keeps the encoder close to
what pre-training taught it (less catastrophic forgetting) and regularizes small labeled sets. Here each
training batch also gets a dynamically masked copy (BERT's 15%, 80/10/10, never special tokens or padding),
which runs through one more encoder forward and the checkpoint's MLM head (tied to the word embeddings); the
loss is taken at the masked positions only, as in pre-training.

SiATL lowers the LM weight as training goes on; here gamma at epoch e is gamma * decay ** e (decay 1.0 keeps
it constant). The MLM head is a training aid only: the saved folder holds the task head, as without the
option, so it loads in bertkit and transformers exactly as before.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.errors import CheckpointError
from bertkit.finetune.batching import Batch
from bertkit.finetune.model import FinetuneModel, Logits
from bertkit.model.heads import MaskedLMHead
from bertkit.pretrain.batching import SpecialIds
from bertkit.pretrain.masking import IGNORE_INDEX, MaskingConfig, mask_row, row_rng


def mlm_head_for_aux_loss(checkpoint, where: str) -> MaskedLMHead:
    """The checkpoint's MLM head, or a CheckpointError saying which folder lacks it and where to get one."""
    head = checkpoint.heads.get("mlm")
    if head is None:
        raise CheckpointError(f"{where}: aux_mlm_weight > 0 (SiATL's auxiliary MLM loss) needs a model folder with "
                              "an MLM head, e.g. one written by bertkit pretrain; this one has "
                              f"{', '.join(sorted(checkpoint.heads)) or 'no head'}. Drop --aux-mlm-weight or "
                              "start from a pre-trained folder")
    return head


class MaskedCopy(NamedTuple):
    """A fine-tuning batch plus its masked copy (same attention mask and segments) and this epoch's gamma."""
    batch: Batch
    input_ids: torch.Tensor          # (B, T) with BERT's replacements applied
    labels: torch.Tensor             # (B, T) original id at masked positions, IGNORE_INDEX elsewhere
    weight: float                    # gamma for this batch, already decayed

    def to(self, device: torch.device) -> "MaskedCopy":
        return MaskedCopy(self.batch.to(device), self.input_ids.to(device, non_blocking=True),
                          self.labels.to(device, non_blocking=True), self.weight)


class BatchMasker:
    """Adds a masked copy to each training batch. A row's mask depends only on (seed, epoch, feature index),
    like pre-training's dynamic masking, so it is new every epoch and the same after a resume."""

    def __init__(self, tokenizer, weight: float, decay: float = 1.0, seed: int = 0,
                 masking: MaskingConfig = MaskingConfig()):
        self.specials = SpecialIds.from_tokenizer(tokenizer)
        # every special token, [UNK] included: predicting it teaches nothing, replacing [CLS]/[SEP] would
        # change what the task head reads
        self.unmaskable = np.array(sorted(i for i in tokenizer.special_ids if i is not None), dtype=np.int64)
        self.weight, self.decay, self.seed, self.masking = weight, decay, seed, masking

    def weight_at(self, epoch: int) -> float:
        return self.weight * self.decay ** epoch

    def __call__(self, batch: Batch, epoch: int) -> MaskedCopy:
        ids = batch.input_ids.numpy()
        maskable = batch.attention_mask.numpy().astype(bool) & ~np.isin(ids, self.unmaskable)
        masked_ids, labels = np.empty_like(ids), np.empty_like(ids)
        for row, index in enumerate(batch.indices):
            masked = mask_row(ids[row], maskable[row], self.masking, row_rng(self.seed, epoch, index),
                              self.specials.mask, self.specials.random_ids)
            masked_ids[row], labels[row] = masked.input_ids, masked.labels
        return MaskedCopy(batch, torch.from_numpy(masked_ids), torch.from_numpy(labels), self.weight_at(epoch))


class AuxMlmOutput(NamedTuple):
    logits: Logits                   # the task head's, on the unmasked batch
    mlm_logits: torch.Tensor         # (N, V) at the N masked positions of the copy


class AuxMlmModel(nn.Module):
    """The fine-tuning model plus an MLM head, for training only. Both forwards happen in one call so that
    DDP sees one forward per backward."""

    def __init__(self, model: FinetuneModel, mlm: MaskedLMHead):
        super().__init__()
        self.model, self.mlm = model, mlm

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None, mlm_input_ids: Optional[torch.Tensor] = None,
                mlm_labels: Optional[torch.Tensor] = None):
        logits = self.model(input_ids, attention_mask, token_type_ids)
        if mlm_input_ids is None:        # evaluation calls the model like a FinetuneModel
            return logits
        encoder = self.model.encoder
        hidden = encoder(mlm_input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
        # the vocabulary projection runs on the masked positions only, the largest matmul of the step
        mlm_logits = self.mlm(hidden[mlm_labels != IGNORE_INDEX], encoder.embeddings.token.weight)
        return AuxMlmOutput(logits, mlm_logits)


def task_model(net: nn.Module) -> nn.Module:
    """The FinetuneModel inside an AuxMlmModel (what is saved and unfrozen), or `net` itself."""
    return net.model if isinstance(net, AuxMlmModel) else net


def add_aux_mlm_loss(task_loss: torch.Tensor, mlm_logits: torch.Tensor,
                     copy: MaskedCopy) -> tuple[torch.Tensor, dict[str, float]]:
    """L_task + gamma * L_MLM, with both parts logged. The MLM loss is a mean over this batch's masked tokens
    (each row masks at least one token when it has any maskable one)."""
    targets = copy.labels[copy.labels != IGNORE_INDEX]
    mlm_loss = F.cross_entropy(mlm_logits.float(), targets) if targets.numel() else mlm_logits.sum() * 0.0
    metrics = {"task_loss": float(task_loss.detach()), "aux_mlm_loss": float(mlm_loss.detach()),
               "aux_mlm_weight": copy.weight}
    return task_loss + copy.weight * mlm_loss, metrics
