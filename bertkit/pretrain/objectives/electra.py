"""ELECTRA (Clark et al. 2020): replaced-token detection. A small MLM generator fills the masked positions with
samples; the discriminator says for every real token (not only the 15%) whether it was replaced.

loss = MLM(generator) + lambda x RTD(discriminator), lambda = 50 (paper section 3.2); 15% of the tokens are
chosen, 85% of those become [MASK] and the rest keep their token (the original code's `mask`, no random
replacement: the generator provides the corruption). The generator is 1/4 of the discriminator's width and
shares its embeddings (model/electra.py). Folders: the discriminator is the run's model folder
(ElectraForPreTraining; `bertkit encode` / `finetune` load it), the generator goes to <output>/generator
(ElectraForMaskedLM).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from bertkit.checkpoints import save_checkpoint
from bertkit.errors import BertkitError
from bertkit.model.config import EncoderConfig
from bertkit.model.electra import ElectraPretrainingModel, generator_config
from bertkit.model.encoder import Encoder
from bertkit.pretrain.masking import IGNORE_INDEX, MaskingConfig
from bertkit.pretrain.objectives.base import Batch, Objective, SaveContext
from bertkit.pretrain.objectives.mlm import token_loss

GENERATOR_DIR = "generator"
_WEIGHT = {"mlm_loss": "predicted", "mlm_accuracy": "predicted"}   # held-out means: per masked token
MASK_FRACTION = 0.85          # of the chosen tokens -> [MASK]; the rest stay (ELECTRA's pretrain_helpers.mask)


def electra_loss(model: ElectraPretrainingModel, batch: Batch, discriminator_weight: float,
                 rng: torch.Generator | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Generator MLM cross-entropy over the masked tokens + weight x discriminator binary cross-entropy over every
    real token ([CLS] and [SEP] included, padding not); the MLM term normalized like every MLM objective's
    (token_loss), the discriminator's a mean over the local batch."""
    labels, attention = batch["labels"], batch["attention_mask"]
    masked = labels != IGNORE_INDEX                                             # (B, T)
    original = torch.where(masked, labels, batch["input_ids"])                  # (B, T)
    out = model(batch["input_ids"], original, masked, attention, batch["token_type_ids"], rng)
    targets = labels[masked]                                                    # (N,)
    mlm, mlm_mean, mlm_accuracy = token_loss(out.generator_logits, targets)
    real = attention.bool()
    logits, replaced = out.discriminator_logits.float()[real], out.replaced[real].float()   # (R,)
    rtd = F.binary_cross_entropy_with_logits(logits, replaced)
    loss = mlm + discriminator_weight * rtd
    metrics = {"mlm_loss": mlm_mean, "mlm_accuracy": mlm_accuracy,
               "rtd_loss": float(rtd.detach()),
               "rtd_accuracy": float(((logits > 0).float() == replaced).float().mean()),
               "replaced": float(replaced.mean()),
               "predicted": float(targets.numel()),
               "tokens": float(attention.sum())}
    return loss, metrics


class Electra(Objective):

    def masking(self) -> MaskingConfig:
        return MaskingConfig(strategy=self.config.data.masking, rate=self.config.data.mask_rate,
                             mask_fraction=MASK_FRACTION, random_fraction=0.0)

    def encoder_config(self, tokenizer) -> EncoderConfig:
        return super().encoder_config(tokenizer).replace(family="electra", use_pooler=False)

    def build(self, encoder_config: EncoderConfig, init) -> ElectraPretrainingModel:
        if init is not None:
            raise BertkitError(f"--model {init.path}: continuing ELECTRA pre-training is not supported; --objective "
                               "electra starts from a new discriminator and generator")
        options = self.config.electra
        try:
            generator = generator_config(encoder_config, options.generator_width, options.generator_depth)
        except ValueError as err:
            raise BertkitError(f"electra.generator_width / generator_depth: {err}") from None
        return ElectraPretrainingModel(Encoder(encoder_config), Encoder(generator))

    def loss(self, model, batch):
        return electra_loss(model, batch, self.config.electra.discriminator_weight)

    def evaluate(self, model: ElectraPretrainingModel, batches, device) -> dict[str, float]:
        """Held-out loss and discriminator metrics weighted by real tokens, the generator's MLM metrics by masked
        tokens; the generator's samples are drawn from a fixed generator so that evaluations compare."""
        rng = torch.Generator(device=device).manual_seed(0)
        sums, weights = {}, {"tokens": 0.0, "predicted": 0.0}
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            loss, metrics = electra_loss(model, batch, self.config.electra.discriminator_weight, rng)
            counts = {"tokens": metrics.pop("tokens"), "predicted": metrics.pop("predicted")}
            for key, value in {"loss": float(loss), **metrics}.items():
                sums[key] = sums.get(key, 0.0) + value * counts[_WEIGHT.get(key, "tokens")]
            for key in weights:
                weights[key] += counts[key]
        return {**{k: v / max(weights[_WEIGHT.get(k, "tokens")], 1.0) for k, v in sums.items()}, **weights}

    def save(self, model: ElectraPretrainingModel, context: SaveContext) -> None:
        heads = model.heads()
        save_checkpoint(context.output, model.discriminator, context.tokenizer, heads["discriminator"], context.meta)
        save_checkpoint(context.output / GENERATOR_DIR, model.generator, context.tokenizer, heads["generator"],
                        {**context.meta, "part": "generator"})

    def freeze_encoder(self, model) -> None:
        raise BertkitError("--heads.train_only fits a new MLM head to a --model encoder; --objective electra "
                           "trains both of its encoders from scratch")
