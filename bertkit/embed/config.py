"""SimCSEConfig, the settings of `bertkit simcse`, as a plain dataclass: no torch, so the command line builds its
flags from it (bertkit/cli/flags.py) without loading the job."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

Mode = Literal["auto", "unsupervised", "pairs"]


@dataclass
class SimCSEConfig:
    model: str = ""
    train: str = ""
    output: str = ""
    mode: Mode = "auto"                # auto: .txt -> unsupervised, .jsonl -> pairs
    pooling: str = "mean"
    layers: str = "last"
    temperature: float = 0.05          # SimCSE's tau; 1/tau = 20 is sentence-transformers' MNRL scale
    lr: float = 3e-5                   # SimCSE unsupervised BERT-base setting
    batch_size: int = 64
    max_length: int = 32               # SimCSE trains on single sentences of up to 32 tokens
    epochs: int = 1
    max_steps: Optional[int] = None
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    seed: int = 42
    max_examples: Optional[int] = None  # first N rows only
    dev: Optional[str] = None          # pairs .jsonl: recall@1 (or Spearman with `score`) each eval
    eval_every: int = 0
    device: str = "auto"
    # auto: bf16 autocast on CUDA, fp32 on CPU; bf16: also on CPU (fast on CPUs with AMX / avx512_bf16)
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    grad_accum: int = 1                # micro-batches per optimizer step (the negatives stay per micro-batch)
    save_every: int = 0                # steps between training states, which resume continues from
    resume: bool = False               # continue an interrupted run from output/run/checkpoint
    progress_bar: bool = True
