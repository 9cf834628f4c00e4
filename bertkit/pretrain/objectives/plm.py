"""XLNet's permutation language modelling (Yang et al. 2019) on the tiny configs: a factorization order per row
with partial prediction (the last ~1/K of the order is predicted, K = 6: model/permutation.py), two-stream
attention (model/xlnet.py; the query stream at the targets reads the content stream through perm_mask), and the
tied `lm_loss` head. Rows are the packed full sentences of `mlm` (nothing is masked: the original ids are the
input), framed as the folder's XLNet tokenizer frames a text when it is loaded for encode or finetune: the
leading [CLS] moves to the end (A [SEP] [CLS], segment 2) and padding goes on the left (xlnet_framing). The
folder is XLNetLMHeadModel. Segment recurrence (mems) is not used in pre-training here.
B = batch, T = sequence length, P = targets per row (padded), V = vocabulary.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from bertkit.checkpoints import save_checkpoint
from bertkit.errors import BertkitError
from bertkit.model.heads import TiedLMHead
from bertkit.model.permutation import PAPER_K, permutation_targets
from bertkit.model.xlnet import XLNetConfig, XLNetModel
from bertkit.pretrain.masking import IGNORE_INDEX, MaskingConfig
from bertkit.pretrain.objectives.base import Batch, Objective, SaveContext
from bertkit.pretrain.objectives.mlm import token_loss
from bertkit.tokenizer.xlnet import SEGMENT_CLS


class PermutationLMModel(nn.Module):
    def __init__(self, config: XLNetConfig, cls_id: int, sep_id: int, k: float = PAPER_K):
        super().__init__()
        self.encoder = XLNetModel(config)
        self.lm = TiedLMHead(config)
        self.cls_id, self.sep_id, self.k = cls_id, sep_id, k

    def heads(self) -> dict[str, nn.Module]:
        return {"lm": self.lm}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor,
                rng: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """-> logits (B, P, V) of the query stream at the targets, and their ids (B, P) (IGNORE_INDEX where a row
        has fewer targets)."""
        predictable = attention_mask.bool() & (input_ids != self.cls_id) & (input_ids != self.sep_id)   # (B, T)
        targets = permutation_targets(predictable.cpu(), self.k, rng)
        out = self.encoder(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                           perm_mask=targets.perm_mask.to(input_ids.device),
                           target_mapping=targets.target_mapping.to(input_ids.device))
        logits = self.lm(out.query_hidden_state, self.encoder.embeddings.token.weight)         # (B, P, V)
        positions = targets.target_positions.to(input_ids.device)                              # (B, P)
        ids = input_ids.gather(1, positions.clamp(min=0)).masked_fill(positions < 0, IGNORE_INDEX)
        return logits, ids


def xlnet_framing(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor,
                  pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """BERT-framed rows `[CLS] A [SEP] pad...` (B, T) -> XLNet's `pad... A [SEP] [CLS]`, the [CLS] in segment 2
    (tokenizer/xlnet.py frames a text so when the saved folder is loaded). -> ids, attention, token types."""
    B, T = input_ids.shape
    lengths = attention_mask.sum(dim=1, keepdim=True)                        # (B, 1) real tokens, [CLS] included
    k = torch.arange(T, device=input_ids.device) - (T - lengths)            # (B, T) index into the real tokens
    real = k >= 0
    source = torch.where(k < lengths - 1, k + 1, torch.zeros_like(k)).clamp(min=0)   # A [SEP] from 1.., [CLS] from 0
    ids = input_ids.gather(1, source).masked_fill(~real, pad_id)
    types = token_type_ids.gather(1, source).masked_fill(~real, 0)
    types = torch.where(real & (k == lengths - 1), torch.full_like(types, SEGMENT_CLS), types)
    return ids, real.to(attention_mask.dtype), types


def plm_loss(model: PermutationLMModel, batch: Batch,
             rng: Optional[torch.Generator] = None) -> tuple[torch.Tensor, dict[str, float]]:
    labels = batch["labels"]
    original = torch.where(labels != IGNORE_INDEX, labels, batch["input_ids"])   # nothing masked (rate 0)
    ids, attention, types = xlnet_framing(original, batch["attention_mask"], batch["token_type_ids"],
                                          model.encoder.config.pad_token_id)
    logits, ids = model(ids, attention, types, rng)
    real = ids != IGNORE_INDEX
    loss, mean, accuracy = token_loss(logits[real], ids[real])
    return loss, {"plm_loss": mean, "plm_accuracy": accuracy, "targets": float(real.sum()),
                  "tokens": float(attention.sum())}


class PermutationLM(Objective):

    def masking(self) -> MaskingConfig:
        return MaskingConfig(strategy="token", rate=0.0)

    def encoder_config(self, tokenizer) -> XLNetConfig:
        e = self.config.encoder
        self._specials = (tokenizer.cls_id, tokenizer.sep_id)
        return XLNetConfig(vocab_size=tokenizer.vocab_size, hidden_size=e.hidden_size, num_layers=e.num_layers,
                           num_heads=e.num_heads, intermediate_size=e.intermediate_size, activation="gelu",
                           layer_norm_eps=e.layer_norm_eps, dropout=e.hidden_dropout,
                           initializer_range=e.initializer_range, pad_token_id=tokenizer.pad_id,
                           max_length=e.max_length)

    def build(self, encoder_config, init) -> PermutationLMModel:
        if init is not None:
            raise BertkitError(f"--model {init.path}: --objective plm pre-trains a new XLNet; continuing one is not "
                               "supported")
        return PermutationLMModel(encoder_config, *self._specials)

    def loss(self, model, batch):
        return plm_loss(model, batch)

    def evaluate(self, model: PermutationLMModel, batches, device) -> dict[str, float]:
        """Held-out loss and accuracy over the targets, with the factorization orders of a fixed generator."""
        rng = torch.Generator().manual_seed(0)
        loss_sum, correct, count = 0.0, 0.0, 0.0
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            loss, metrics = plm_loss(model, batch, rng)
            loss_sum += float(loss) * metrics["targets"]
            correct += metrics["plm_accuracy"] * metrics["targets"]
            count += metrics["targets"]
        return {"loss": loss_sum / max(count, 1.0), "plm_accuracy": correct / max(count, 1.0), "targets": count}

    def save(self, model: PermutationLMModel, context: SaveContext) -> None:
        save_checkpoint(context.output, model.encoder, context.tokenizer, model.heads(), context.meta)

    def freeze_encoder(self, model) -> None:
        raise BertkitError("--heads.train_only is for a --model encoder; --objective plm trains a new XLNet")
