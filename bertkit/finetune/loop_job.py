"""What the jobs that build their own model (prompt classification, seq2seq, rerank, simbert) share: the config
shape `model / output / data: JobData / train: TrainConfig` (each job adds its own fields), max_length and the
MLM-head check (seeding, the run record and the closing steps are train/fit.py's)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from bertkit.checkpoints.io import META_FILE
from bertkit.checkpoints.json_files import read_json
from bertkit.errors import BertkitError, CheckpointError
from bertkit.job_config import JobData, TrainConfig


@dataclass
class LoopJobConfig:
    model: str = ""                       # a folder with an MLM head (BertForMaskedLM / BertForPreTraining)
    output: str = ""
    # data.max_length: tokens per row; None: 128, or fewer if the model has fewer positions
    data: JobData = field(default_factory=JobData)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=3, lr=5e-5, warmup_ratio=0.1, seed=42,
                                                                        log_every=10))


def max_length_for(config: LoopJobConfig, checkpoint) -> int:
    positions = checkpoint.config.max_length
    if config.data.max_length is None:
        return min(128, positions)
    if config.data.max_length > positions:
        raise BertkitError(f"--max-length {config.data.max_length} > the {positions} positions of {config.model}; "
                           "lower it")
    return config.data.max_length


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
