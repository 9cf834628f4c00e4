"""What the prompt-classification (PET / P-tuning) and UniLM seq2seq fine-tuning jobs share: the config
fields `bertkit finetune` sets for every task, the mapping onto the training loop, the MLM-head check and
the run record (output/run/: effective config and package versions; output/metrics.json)."""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from bertkit.config import save_config
from bertkit.errors import BertkitError, CheckpointError
from bertkit.train import TrainConfig


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


def loop_config(config: LoopJobConfig, lr: float, run_dir: Path, metric: Optional[str]) -> TrainConfig:
    """The shared loop's settings; `metric` (a dev metric name) picks the best model, None without --dev."""
    return TrainConfig(lr=lr, weight_decay=config.weight_decay, warmup_ratio=config.warmup_ratio,
                       schedule=config.schedule, epochs=config.epochs, clip_norm=config.clip_norm,
                       eval_every=config.eval_every, seed=config.seed, device=config.device,
                       bf16=config.precision != "fp32", cpu_bf16=config.precision == "bf16",
                       output_dir=str(run_dir), metric_for_best=metric,
                       early_stopping_patience=config.early_stopping_patience, progress_bar=config.progress_bar,
                       log_every=10)


def train_and_record(model, loss_fn, batches, train_config: TrainConfig, evaluate, save, output: Path,
                     run_dir: Path, extra: dict):
    """Run the shared loop, keep the best model (by `train_config.metric_for_best`; the last one without a dev
    set), drop the resume state and write output/metrics.json. -> FinetuneResult."""
    from bertkit.finetune.job import FinetuneResult
    from bertkit.train import train

    started = time.perf_counter()
    result = train(model, loss_fn, batches, train_config, evaluate=evaluate,
                   on_best=save if evaluate is not None else None)
    wall = time.perf_counter() - started
    if evaluate is None:
        save(model, {})
    shutil.rmtree(run_dir / "checkpoint", ignore_errors=True)   # resume state; the best model is `output`
    metrics = result.best_eval or result.last_eval
    write_json(output / "metrics.json", {
        "dev": metrics, "metric_for_best": train_config.metric_for_best, "train_seconds": result.elapsed_s,
        "wall_seconds": wall, "epochs": result.epochs, "steps": result.steps, "stop_reason": result.stop_reason,
        **extra})
    return FinetuneResult(output, metrics, result.elapsed_s, result.epochs, result.steps, result.stop_reason)


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
    path = Path(folder) / "bertkit.json"
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None   # load_checkpoint reports the broken file
    return meta.get("task") if isinstance(meta, dict) else None


def start_run_record(config: LoopJobConfig, run_dir: Path) -> None:
    from bertkit.finetune.job import package_versions

    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir)
    write_json(run_dir / "versions.json", package_versions())


def write_json(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
