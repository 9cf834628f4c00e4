"""BERT's objectives: masked LM alone (RoBERTa: packed full sentences), MLM + next-sentence prediction (BERT)
and MLM + sentence-order prediction (ALBERT). The model is the encoder + MLM head (tied to the word embeddings)
+ an optional NSP/SOP head over the pooled [CLS]; the folder is BertForMaskedLM / BertForPreTraining."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.checkpoints import save_checkpoint
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead, SentencePairHead
from bertkit.pretrain.masking import IGNORE_INDEX
from bertkit.pretrain.objectives.base import Objective, SaveContext
from bertkit.train.distributed import global_sum, world_size
from bertkit.train.loop import say


class PretrainingOutput(NamedTuple):
    mlm_logits: torch.Tensor              # (N, V): only the N masked positions
    pair_logits: Optional[torch.Tensor]   # (B, 2) for nsp/sop, else None


class PretrainingModel(nn.Module):
    def __init__(self, config: EncoderConfig, with_pair_head: bool, encoder: Optional[Encoder] = None,
                 mlm: Optional[MaskedLMHead] = None, pair: Optional[SentencePairHead] = None):
        super().__init__()
        self.encoder = encoder if encoder is not None else Encoder(config)
        self.mlm = mlm if mlm is not None else MaskedLMHead(config)
        self.pair = (pair if pair is not None else SentencePairHead(config)) if with_pair_head else None
        if self.pair is None and self.encoder.pooler is not None:
            # MLM alone never uses the pooler: freeze it so DDP does not wait for its gradients.
            self.encoder.pooler.requires_grad_(False)

    @property
    def config(self) -> EncoderConfig:
        return self.encoder.config

    def heads(self) -> dict[str, nn.Module]:
        return {"mlm": self.mlm, **({"pair": self.pair} if self.pair is not None else {})}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor,
                labels: torch.Tensor) -> PretrainingOutput:
        out = self.encoder(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        masked = labels != IGNORE_INDEX                                    # (B, T)
        hidden = out.last_hidden_state[masked]                             # (N, C): the vocab projection
        mlm_logits = self.mlm(hidden, self.encoder.embeddings.token.weight)  # runs on N rows, not B*T
        pair_logits = self.pair(out.pooled_output) if self.pair is not None else None
        return PretrainingOutput(mlm_logits, pair_logits)


def pretraining_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """MLM cross-entropy averaged over the masked tokens of the *global* batch (so W ranks of batch B give
    the same loss and gradients as one process of batch W*B), plus the NSP/SOP cross-entropy."""
    out: PretrainingOutput = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                                   batch["labels"])
    return masked_lm_loss(out, batch)


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """Cross-entropy of (N, V) logits summed over the N targets and divided by the global target count x world
    size, so that DDP's gradient average equals one process' mean; plus the local mean loss and accuracy."""
    count = torch.tensor(float(targets.numel()), device=targets.device)
    total = global_sum(count).clamp(min=1.0)
    summed = F.cross_entropy(logits.float(), targets, reduction="sum")
    local = max(targets.numel(), 1)
    return (summed * world_size() / total, float(summed.detach()) / local,
            float((logits.argmax(-1) == targets).float().sum()) / local)


def masked_lm_loss(out, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of pretraining_loss from the model's output (objectives that add a term call it)."""
    labels = batch["labels"]
    targets = labels[labels != IGNORE_INDEX]
    mlm_loss, mean_loss, accuracy = token_loss(out.mlm_logits, targets)
    metrics = {"mlm_loss": mean_loss, "mlm_accuracy": accuracy, "tokens": float(batch["attention_mask"].sum())}
    loss = mlm_loss
    if out.pair_logits is not None and "pair_labels" in batch:
        pair_loss = F.cross_entropy(out.pair_logits.float(), batch["pair_labels"])
        loss = loss + pair_loss
        metrics["pair_loss"] = float(pair_loss.detach())
        metrics["pair_accuracy"] = float((out.pair_logits.argmax(-1) == batch["pair_labels"]).float().mean())
    return loss, metrics


@torch.no_grad()
def evaluate_mlm(model: PretrainingModel, batches, device: torch.device) -> dict[str, float]:
    """Held-out MLM loss, accuracy and perplexity, reduced batch by batch: only (N, V) logits of one batch
    exist at a time, never the whole corpus'. With an NSP / SOP head, its held-out loss and accuracy too
    (Google's run_pretraining.py reports next_sentence_loss and next_sentence_accuracy beside the MLM's)."""
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    pair_loss_sum, pair_correct, pairs = 0.0, 0, 0
    for batch in batches:
        batch = {k: v.to(device) for k, v in batch.items()}
        labels = batch["labels"]
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels)
        targets = labels[labels != IGNORE_INDEX]
        loss_sum += float(F.cross_entropy(out.mlm_logits.float(), targets, reduction="sum"))
        correct += int((out.mlm_logits.argmax(-1) == targets).sum())
        count += int(targets.numel())
        if out.pair_logits is not None and "pair_labels" in batch:
            pair_loss_sum += float(F.cross_entropy(out.pair_logits.float(), batch["pair_labels"], reduction="sum"))
            pair_correct += int((out.pair_logits.argmax(-1) == batch["pair_labels"]).sum())
            pairs += int(batch["pair_labels"].numel())
    model.train(was_training)
    loss = loss_sum / max(count, 1)
    metrics = {"loss": loss, "mlm_accuracy": correct / max(count, 1), "perplexity": float(torch.tensor(loss).exp()),
               "tokens": count}
    if pairs:
        metrics.update(pair_loss=pair_loss_sum / pairs, pair_accuracy=pair_correct / pairs)
    return metrics


class MaskedLM(Objective):
    """mlm: RoBERTa's packed full sentences, no pair task. mlm+nsp / mlm+sop below add the pair head."""


    @property
    def with_pair(self) -> bool:
        return self.instances != "packed"

    def build(self, encoder_config: EncoderConfig, init) -> PretrainingModel:
        if init is None:
            model = PretrainingModel(encoder_config, self.with_pair)
            for head in model.heads().values():
                head.apply(model.encoder._init_weights)
            return model
        model = PretrainingModel(init.config, self.with_pair, init.encoder, init.heads.get("mlm"),
                                 init.heads.get("pair"))
        for key, head in model.heads().items():
            if key not in init.heads:       # a new head starts as BERT initializes its heads
                head.apply(model.encoder._init_weights)
        if "mlm" not in init.heads and not self.config.heads.train_only:
            say(f"--model {init.path} has no MLM head (an encoder-only, sentence-embedding or fine-tuned folder): a "
                "new one starts from random weights and its large early gradients reach the encoder; to fit the head "
                "alone first, run with --heads.train-only=true, then continue from that folder")
        return model

    def loss(self, model, batch):
        return pretraining_loss(model, batch)

    def evaluate(self, model, batches, device):
        return evaluate_mlm(model, batches, device)

    def save(self, model: PretrainingModel, context: SaveContext) -> None:
        save_checkpoint(context.output, model.encoder, context.tokenizer, model.heads(), context.meta,
                        sentence=context.sentence)

    def freeze_encoder(self, model: PretrainingModel) -> None:
        model.encoder.requires_grad_(False)     # the tied MLM decoder (word embeddings) stays as it is too


class NextSentence(MaskedLM):
    """BERT: MLM + next-sentence prediction on sentence pairs (half of the B segments from another document)."""
    instances = "nsp"


class SentenceOrder(MaskedLM):
    """ALBERT: MLM + sentence-order prediction (half of the pairs swapped)."""
    instances = "sop"
