"""SimCSEConfig, the settings of `bertkit simcse`, as a plain dataclass: no torch, so the command line builds its
flags from it (bertkit/cli/flags.py) without loading the job."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from bertkit.job_config import JobData, TrainConfig

Mode = Literal["auto", "unsupervised", "pairs"]


@dataclass
class SimCSEConfig:
    model: str = ""
    output: str = ""
    mode: Mode = "auto"                # auto: .txt -> unsupervised, .jsonl -> pairs
    pooling: str = "mean"
    layers: str = "last"
    temperature: float = 0.05          # SimCSE's tau; 1/tau = 20 is sentence-transformers' MNRL scale
    # data.dev: pairs .jsonl, recall@1 (or Spearman with `score`) each eval; data.max_length 32: SimCSE trains on
    # single sentences of up to 32 tokens; the negatives stay per micro-batch (train.grad_accum)
    data: JobData = field(default_factory=lambda: JobData(batch_size=64, eval_batch_size=128, max_length=32))
    # lr 3e-5: SimCSE's unsupervised BERT-base setting
    train: TrainConfig = field(default_factory=lambda: TrainConfig(lr=3e-5, weight_decay=0.0, seed=42, log_every=10))
