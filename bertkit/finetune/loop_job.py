"""What the prompt-classification (PET / P-tuning) and UniLM seq2seq fine-tuning jobs share: the config
fields `bertkit finetune` sets for every task and the MLM-head check (the run record and the closing steps are
train/fit.py's)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from bertkit.checkpoints.io import META_FILE
from bertkit.checkpoints.json_files import read_json
from bertkit.errors import BertkitError, CheckpointError


@dataclass
class LoopJobConfig:
    model: str = ""                       # a folder with an MLM head (BertForMaskedLM / BertForPreTraining)
    train: Optional[str] = None
    dev: Optional[str] = None
    output: str = ""
    epochs: int = 3
    lr: float = 5e-5
    batch_size: int = 32
    eval_batch_size: int = 64
    max_length: Optional[int] = None      # tokens per row; None: 128, or fewer if the model has fewer positions
    seed: int = 42
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    schedule: Literal["linear", "cosine", "constant", "slanted_triangular"] = "linear"
    clip_norm: Optional[float] = 1.0
    eval_every: int = 0                   # steps; 0 = after every epoch
    early_stopping_patience: Optional[int] = None
    max_train_examples: Optional[int] = None
    max_dev_examples: Optional[int] = None
    encoding: str = "utf-8"
    device: str = "auto"
    # auto: bf16 autocast on CUDA, fp32 on CPU; bf16: also on CPU (fast on CPUs with AMX / avx512_bf16)
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    progress_bar: bool = True
    grad_accum: int = 1                   # micro-batches per optimizer step
    save_every: int = 0                   # steps between training states, which resume continues from
    resume: bool = False                  # continue an interrupted run from output/run/checkpoint


def max_length_for(config: LoopJobConfig, checkpoint) -> int:
    positions = checkpoint.config.max_length
    if config.max_length is None:
        return min(128, positions)
    if config.max_length > positions:
        raise BertkitError(f"--max-length {config.max_length} > the {positions} positions of {config.model}; "
                           "lower it")
    return config.max_length


def mlm_head_of(checkpoint, use: str):
    """The checkpoint's MLM head, or a CheckpointError naming the folder and what to start from instead."""
    head = checkpoint.heads.get("mlm")
    if head is None:
        where = checkpoint.path or "the model folder"
        raise CheckpointError(f"{where} has no MLM head (heads: {', '.join(checkpoint.heads) or 'none'}); {use} "
                              "needs a pre-trained masked LM folder (BertForMaskedLM / BertForPreTraining, e.g. "
                              "from bertkit pretrain)")
    if checkpoint.tokenizer is None:
        raise CheckpointError(f"{checkpoint.path}: the model folder has no vocab.txt or tokenizer.json")
    return head


def saved_task(folder) -> Optional[str]:
    """The task bertkit.json records for a model folder (None when there is none), without loading weights."""
    path = Path(folder) / META_FILE
    if not path.is_file():
        return None
    try:
        return read_json(path).get("task")
    except CheckpointError:
        return None   # load_checkpoint reports the broken file
