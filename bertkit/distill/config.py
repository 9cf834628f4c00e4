"""DistillConfig, the settings of `bertkit distill`, as a plain dataclass: no torch, so the command line builds its
flags from it (bertkit/cli/flags.py) without loading the job."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional


@dataclass
class DistillConfig:
    teacher: str = ""                     # fine-tuned teacher folder (classification), or any encoder (embedding)
    student: Optional[str] = None         # student folder; else --student-layers copies teacher layers
    student_layers: Optional[int] = None
    task: Literal["classification", "embedding"] = "classification"
    train: str = ""
    dev: Optional[str] = None
    output: str = ""
    temperature: float = 2.0
    alpha: float = 0.5                    # weight of the soft (teacher) loss; 1 - alpha on the gold labels
    logit_loss: Literal["kl", "mse"] = "kl"
    hidden_weight: float = 0.0            # intermediate-layer losses (TinyBERT / DistilBERT); 0 = off
    hidden_loss: Literal["mse", "cosine"] = "mse"
    attention_weight: float = 0.0
    augment_copies: int = 0               # masked copies of each training text, labeled by the teacher only
    augment_mask_prob: float = 0.1
    transfer: Optional[str] = None        # unlabeled texts (.txt lines, or .jsonl/.tsv/.csv text) the teacher labels
    pooling: str = "mean"                 # embedding task: the sentence vector both models produce
    epochs: int = 3
    lr: float = 5e-5
    batch_size: int = 32
    max_length: int = 128
    max_train_examples: Optional[int] = None
    max_dev_examples: Optional[int] = None
    seed: int = 42
    warmup_ratio: float = 0.1
    device: str = "auto"
    # auto: bf16 autocast on CUDA, fp32 on CPU; bf16: also on CPU (fast on CPUs with AMX / avx512_bf16)
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    grad_accum: int = 1                   # micro-batches per optimizer step
    save_every: int = 0                   # steps between training states, which resume continues from
    resume: bool = False                  # continue an interrupted run from output/run/checkpoint
    progress_bar: bool = True
