"""The GPT pre-training job's config (`bertkit pretrain --arch gpt`): the GPT shape (model/config.py's
GPTEncoderConfig), the data and vocabulary sections of a causal LM, and `train: TrainConfig` with GPT-2's optimizer
settings. Plain dataclasses with no torch, so the command line generates its flags from them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from bertkit.job_config import TrainConfig
from bertkit.model.config import GPTEncoderConfig


@dataclass
class GPTDataConfig:
    block_size: int = 128                 # tokens per training row (<= encoder.max_position_embeddings)
    batch_size: int = 16                  # rows per process and micro-step
    eval_batch_size: int = 32
    heldout_fraction: float = 0.01        # whole documents kept out for held-out perplexity
    max_documents: Optional[int] = None   # read only the first N documents of the corpus


@dataclass
class GPTVocabConfig:
    vocab_size: int = 50257               # when a byte-level BPE vocabulary is trained on the corpus
    min_frequency: int = 2


@dataclass
class GPTPretrainConfig:
    encoder: GPTEncoderConfig = field(default_factory=GPTEncoderConfig)
    data: GPTDataConfig = field(default_factory=GPTDataConfig)
    vocab: GPTVocabConfig = field(default_factory=GPTVocabConfig)
    # GPT-2 / GPT-3 optimizer settings: weight decay 0.1, beta2 0.95.
    train: TrainConfig = field(default_factory=lambda: TrainConfig(
        lr=6e-4, warmup_ratio=0.05, schedule="cosine", weight_decay=0.1, adam_beta2=0.95, max_steps=10000,
        save_every=1000, eval_every=1000))
