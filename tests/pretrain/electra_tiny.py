"""The tiny ELECTRA of the replaced-token-detection tests: a 2 x 64 discriminator over 60 ids, its 1/4-wide
generator, no dropout."""
import torch

from bertkit.model import Encoder, EncoderConfig
from bertkit.model.electra import ElectraPretrainingModel, generator_config
from bertkit.pretrain.masking import IGNORE_INDEX

VOCAB, MASK, T = 60, 4, 16


def discriminator_config():
    return EncoderConfig(vocab_size=VOCAB, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128,
                         max_position_embeddings=32, embedding_size=32, use_pooler=False, family="electra",
                         hidden_dropout=0.0, attention_dropout=0.0)


def pretraining_model(seed=0, generator_head=None):
    torch.manual_seed(seed)
    disc = discriminator_config()
    return ElectraPretrainingModel(Encoder(disc), Encoder(generator_config(disc, width=0.25)),
                                   generator_head=generator_head)


def as_batch(original, masked, attention):
    """(B, T) original ids, bool masked positions and 0/1 attention -> an MLM batch: [MASK] in, labels out."""
    return {"input_ids": original.masked_fill(masked, MASK), "labels": original.masked_fill(~masked, IGNORE_INDEX),
            "attention_mask": attention, "token_type_ids": torch.zeros_like(original)}


def model_inputs(batch):
    """An MLM batch -> ElectraPretrainingModel's arguments (masked ids, original ids, masked positions, ...)."""
    masked = batch["labels"] != IGNORE_INDEX
    original = torch.where(masked, batch["labels"], batch["input_ids"])
    return batch["input_ids"], original, masked, batch["attention_mask"], batch["token_type_ids"]
