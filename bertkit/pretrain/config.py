"""The pre-training job's config: encoder, data/objective, vocabulary and training sections."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from bertkit.data.shards import Segmenter
from bertkit.job_config import AT_LEAST_ONE, FRACTION, NON_NEGATIVE, TrainConfig, check_ranges
from bertkit.model.config import PRESETS, EncoderConfig
from bertkit.pretrain.masking import MaskingStrategy

MIN_MAX_LENGTH = 8    # the shortest instance: [CLS], [SEP] and a few tokens to mask


@dataclass
class DataConfig:
    max_length: int = 128                 # tokens per instance, [CLS]/[SEP] included
    batch_size: int = 32                  # instances per process and micro-step
    objective: str = "mlm"                # a name in pretrain/objectives OBJECTIVES; mlm: RoBERTa-style packed
                                          # full sentences, no pair task
    masking: MaskingStrategy = "token"    # token | whole-word | span | phrase | entity (ERNIE, with lexicon)
    lexicon: Optional[str] = None         # phrase / entity masking: entries masked as units, one per line
    mask_rate: float = 0.15
    static_masking: bool = False          # True: BERT's fixed masks, dupe_factor copies of the data
    dupe_factor: int = 10
    short_seq_prob: float = 0.1           # nsp/sop: share of pairs aiming at a random shorter length
    segmenter: Segmenter = "none"         # jieba: Chinese words for whole-word / span masking
    shard_tokens: int = 16_000_000        # tokens per shard (bounds memory while building)
    shards_dir: Optional[str] = None      # default: <output>/shards
    heldout_fraction: float = 0.01        # instances kept out of training for evaluation
    max_heldout_instances: int = 1000
    eval_batch_size: int = 64
    encoding: str = "utf-8"               # of the corpus files (gb18030 for GBK Chinese text)

    def __post_init__(self) -> None:
        check_ranges(self, {"max_length": (MIN_MAX_LENGTH, math.inf, True), "batch_size": AT_LEAST_ONE,
                            "mask_rate": (0.0, 1.0, False), "dupe_factor": AT_LEAST_ONE,
                            "short_seq_prob": FRACTION, "shard_tokens": AT_LEAST_ONE,
                            "heldout_fraction": (0.0, 1.0, True), "max_heldout_instances": NON_NEGATIVE,
                            "eval_batch_size": AT_LEAST_ONE})


@dataclass
class VocabConfig:
    vocab_size: int = 30522               # when a new WordPiece vocabulary is trained on the corpus
    lowercase: bool = True


@dataclass
class HeadsConfig:
    # Freeze the encoder and train the heads alone. Fits a new MLM head to a --model checkpoint that ships
    # without one (all-MiniLM-L6-v2, sentence-transformers models) so that its MLM loss means something
    # before continued pre-training changes the encoder.
    train_only: bool = False


@dataclass
class ElectraConfig:
    # --objective electra (Clark et al. 2020): the generator's size as fractions of the discriminator's (1/4 for
    # ELECTRA-Small, 1/3 for Base) and lambda, the weight of the discriminator's loss
    generator_width: float = 0.25
    generator_depth: float = 1.0
    discriminator_weight: float = 50.0


@dataclass
class PretrainConfig:
    encoder: EncoderConfig = field(default_factory=lambda: PRESETS["bert-base"])
    data: DataConfig = field(default_factory=DataConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    heads: HeadsConfig = field(default_factory=HeadsConfig)
    electra: ElectraConfig = field(default_factory=ElectraConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(lr=1e-4, warmup_ratio=0.06, max_steps=10000,
                                                                   save_every=1000, eval_every=1000))
