"""The fine-tuning job: read, encode, train on the shared loop, keep the best model, write the run record.

Defaults are BERT's fine-tuning recipe (Devlin et al. 2019, appendix A.3): batch 32, lr in 2e-5..5e-5,
3 epochs, 10% linear warm-up then linear decay, weight decay 0.01. ULMFiT options (Howard & Ruder 2018):
layer-wise lr decay, the slanted triangular schedule, gradual unfreezing. SiATL (Chronopoulou et al. 2019):
an auxiliary MLM loss on the training texts, for folders with an MLM head (aux_mlm.py).

`output` is the best model's folder (an HF-compatible checkpoint with the head and label names), with
metrics.json beside the weights and the run record in output/run/: the effective config, package versions,
the loop's log.jsonl and loss curve. The training state is saved after each evaluation, so `resume`
continues from the last one; and no run replaces a model in `output` that scored better on the same dev
data (saved_score.py).
"""
from __future__ import annotations

import dataclasses
import json
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

import torch

from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.config import save_config
from bertkit.data.labels import LabelMap
from bertkit.data.readers import ReadOptions
from bertkit.errors import BertkitError
from bertkit.finetune.aux_mlm import (AuxMlmModel, BatchMasker, MaskedCopy, add_aux_mlm_loss, mlm_head_for_aux_loss,
                                      task_model)
from bertkit.finetune.batching import BucketedBatches, collate
from bertkit.finetune.model import FinetuneModel, check_saved_task, hf_config_extra, model_from_checkpoint, model_meta
from bertkit.finetune.saved_score import METRICS_FILE, dev_fingerprint, read_saved_metrics, saved_score
from bertkit.finetune.tasks import TaskOptions, build_task, label_names_from, read_examples
from bertkit.runtime import seed_everything
from bertkit.train import TrainConfig, train
from bertkit.tokenizer.coverage import texts_of, warn_unknown
from bertkit.train.loop import say

Task = Literal["classification", "pair-classification", "multi-label", "regression", "ner", "qa"]


@dataclass
class FinetuneConfig:
    task: Task = "classification"
    model: str = ""                       # model folder to start from (bertkit, HF or Google BERT)
    train: str = ""
    dev: Optional[str] = None
    output: str = ""
    epochs: int = 3
    lr: float = 3e-5
    batch_size: int = 32
    eval_batch_size: int = 64
    max_length: int = 128                 # QA: 384 is BERT's SQuAD setting
    seed: int = 42
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    schedule: Literal["linear", "cosine", "constant", "slanted_triangular"] = "linear"
    clip_norm: Optional[float] = 1.0
    grad_accum: int = 1
    eval_every: int = 0                   # steps; 0 = after every epoch
    metric: Optional[str] = None          # metric that picks the best model; None = the task's main one
    early_stopping_patience: Optional[int] = None
    layerwise_lr_decay: Optional[float] = None
    gradual_unfreezing: bool = False      # epoch k trains the head and the top k layers
    bucket_by_length: bool = True
    max_train_examples: Optional[int] = None   # first N rows only (quick runs, subsets)
    max_dev_examples: Optional[int] = None
    encoding: str = "utf-8"
    skip_bad_rows: bool = False
    device: str = "auto"
    resume: bool = False                  # continue an interrupted run from output/run/checkpoint
    # auto: bf16 autocast on CUDA, fp32 on CPU; bf16: also on CPU (fast on CPUs with AMX / avx512_bf16)
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    progress_bar: bool = True
    aux_mlm_weight: float = 0.0           # SiATL's gamma: + gamma x MLM loss on a masked copy of each batch; 0 = off
    aux_mlm_decay: float = 1.0            # gamma x decay ** epoch (SiATL lowers gamma over training); 1 = constant
    options: TaskOptions = field(default_factory=TaskOptions)


@dataclass
class FinetuneResult:
    output: Path
    metrics: dict                         # best dev metrics (or final train-set stats without dev)
    train_seconds: float                  # optimizer steps only (no evaluation or saving)
    epochs: int
    steps: int
    stop_reason: str
    kept_earlier_model: bool = False      # this run did not beat the model already in `output`, which stays
                                          # (then `metrics` are that model's)


def run_finetune(config: FinetuneConfig) -> FinetuneResult:
    for name in ("model", "train", "output"):
        if not getattr(config, name):
            raise BertkitError(f"finetune needs --{name}")
    options = dataclasses.replace(config.options, max_length=config.max_length)
    seed_everything(config.seed)
    checkpoint = load_checkpoint(config.model)
    check_saved_task(checkpoint, config.task)
    mlm_head = None
    if config.aux_mlm_weight < 0 or not 0 < config.aux_mlm_decay <= 1:
        raise BertkitError(f"aux_mlm_weight must be >= 0 (got {config.aux_mlm_weight}) and aux_mlm_decay in (0, 1] "
                           f"(got {config.aux_mlm_decay})")
    if config.aux_mlm_weight > 0:
        mlm_head = mlm_head_for_aux_loss(checkpoint, config.model)   # before reading data: fail early
    if checkpoint.tokenizer is None:
        raise BertkitError(f"{config.model}: the model folder has no vocab.txt or tokenizer.json")
    if config.max_length > checkpoint.config.max_length:
        raise BertkitError(f"--max-length {config.max_length} > the {checkpoint.config.max_length} positions of "
                           f"{config.model}; lower it (long inputs are windowed for ner/qa, truncated otherwise)")
    read = ReadOptions(config.encoding, config.skip_bad_rows, Path(config.output + ".rejects.jsonl")
                       if config.skip_bad_rows else None)
    train_examples = read_examples(config.task, config.train, None, True, read)[:config.max_train_examples]
    label_names = label_names_from(config.task, train_examples)
    dev_examples = None
    if config.dev:
        dev_read = dataclasses.replace(read, rejects_path=Path(config.output + ".dev.rejects.jsonl")
                                       if config.skip_bad_rows else None)
        known = LabelMap(tuple(label_names)) if label_names is not None else None
        dev_examples = read_examples(config.task, config.dev, known, True, dev_read)[:config.max_dev_examples]
    model = model_from_checkpoint(checkpoint, config.task, label_names)
    task = build_task(config.task, checkpoint.tokenizer, model.label_names, options, train_examples)
    if config.task == "qa":
        options = dataclasses.replace(options, with_negative=task.with_negative)
    train_features = task.encode(train_examples)
    warn_unknown(checkpoint.tokenizer, texts_of(train_examples), f"fine-tune data {config.train}",
                 [f.input_ids for f in train_features])
    dev_features = task.encode(dev_examples) if dev_examples is not None else None
    pad_id = checkpoint.tokenizer.pad_id
    masker = (BatchMasker(checkpoint.tokenizer, config.aux_mlm_weight, config.aux_mlm_decay, config.seed)
              if mlm_head is not None else None)

    def make_batch(indices: list[int]):
        batch = collate([train_features[i] for i in indices], indices, pad_id, task.make_targets)
        # `batches.epoch` is the epoch being iterated: the masks and gamma follow it
        return masker(batch, batches.epoch) if masker is not None else batch

    batches = BucketedBatches([len(f.input_ids) for f in train_features], config.batch_size, make_batch,
                              seed=config.seed, bucket=config.bucket_by_length)

    def loss_fn(net, batch):
        copy = batch if isinstance(batch, MaskedCopy) else None
        batch = copy.batch if copy is not None else batch
        masked = (copy.input_ids, copy.labels) if copy is not None else ()
        out = net(batch.input_ids, batch.attention_mask, batch.token_type_ids, *masked)
        loss = task.loss(out.logits if copy is not None else out, batch.targets)
        metrics = {"tokens": float(batch.attention_mask.sum())}
        if copy is not None:
            loss, aux_metrics = add_aux_mlm_loss(loss, out.mlm_logits, copy)
            metrics.update(aux_metrics)
        return loss, metrics

    output = Path(config.output)
    run_dir = output / "run"
    meta_extra = {"task_options": dataclasses.asdict(options), "finetuned_from": str(config.model)}
    metric = config.metric or task.main_metric
    dev_data = dev_fingerprint(config.task, config.dev, len(dev_examples)) if dev_examples is not None else None
    to_beat = saved_score(output, metric, dev_data)
    if to_beat is not None:
        say(f"{output} holds a model with {metric} {to_beat:.4g} on this dev set; this run replaces it only "
            "with a better one")

    def save(net: FinetuneModel, metrics: dict) -> None:
        net = task_model(net)            # without the aux MLM head: the folder is the task model only
        save_checkpoint(output, net.encoder, checkpoint.tokenizer, {net.head_key: net.head},
                        model_meta(net, {**meta_extra, "dev_metrics": metrics}), hf_config_extra(net),
                        sentence=checkpoint.sentence.after_training())
        _write_json(output / METRICS_FILE, {"dev": metrics, "metric_for_best": metric, "dev_data": dev_data})

    evaluate, evaluations = None, []
    if dev_features is not None:
        def evaluate(net):
            evaluations.append(task.evaluate(net, dev_features, dev_examples, config.eval_batch_size))
            return evaluations[-1]

    train_config = TrainConfig(
        lr=config.lr, weight_decay=config.weight_decay, warmup_ratio=config.warmup_ratio,
        schedule=config.schedule, epochs=config.epochs, grad_accum=config.grad_accum, clip_norm=config.clip_norm,
        eval_every=config.eval_every, seed=config.seed, device=config.device, bf16=config.precision != "fp32",
        cpu_bf16=config.precision == "bf16",
        layerwise_lr_decay=config.layerwise_lr_decay, output_dir=str(run_dir), resume=config.resume,
        metric_for_best=metric if evaluate is not None else None, best_to_beat=to_beat,
        checkpoint_on_eval=evaluate is not None,
        early_stopping_patience=config.early_stopping_patience, progress_bar=config.progress_bar,
        log_every=10)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir)
    _write_json(run_dir / "versions.json", package_versions())
    unfreeze = _gradual_unfreezing if config.gradual_unfreezing else None
    started = time.perf_counter()
    trained = AuxMlmModel(model, mlm_head) if mlm_head is not None else model
    result = train(trained, loss_fn, batches, train_config, evaluate=evaluate,
                   on_best=save if evaluate is not None else None, on_epoch_start=unfreeze)
    wall = time.perf_counter() - started
    for param in model.parameters():
        param.requires_grad_(True)
    if evaluate is None:
        save(model, {})
    shutil.rmtree(run_dir / "checkpoint", ignore_errors=True)   # resume state; the best model is `output`
    metrics = result.best_eval or result.last_eval
    record = {"dev": metrics, "metric_for_best": metric, "dev_data": dev_data, "train_seconds": result.elapsed_s,
              "wall_seconds": wall, "epochs": result.epochs, "steps": result.steps,
              "stop_reason": result.stop_reason, "train_examples": len(train_examples),
              "train_features": len(train_features)}
    kept = to_beat is not None and not result.best_eval   # nothing of this run beat the saved model
    if kept:
        best_of = min if "loss" in metric else max       # the loop's greater_is_better rule
        ours = best_of((e[metric] for e in evaluations if metric in e), default=None)
        say(f"kept the model already in {output} ({metric} {to_beat:.4g}); the best of this run"
            f"{f', {ours:.4g},' if ours is not None else ''} did not beat it")
        earlier = read_saved_metrics(output) or {}
        metrics = earlier.get("dev", {})
        record = {**earlier, "last_run_not_saved": record}
    _write_json(output / METRICS_FILE, record)
    return FinetuneResult(output, metrics, result.elapsed_s, result.epochs, result.steps, result.stop_reason, kept)


def _gradual_unfreezing(model: FinetuneModel, epoch: int) -> None:
    """ULMFiT: epoch 0 trains only the head (and pooler), each later epoch one more block from the top; the
    embeddings join with the last block. Frozen parameters get no gradient, so AdamW leaves them as they are."""
    model = task_model(model)            # the aux MLM head (if any) always trains
    blocks = list(model.encoder.blocks)
    trainable = set()
    for block in blocks[len(blocks) - min(epoch, len(blocks)):]:
        trainable.update(id(p) for p in block.parameters())
    if epoch >= len(blocks):
        trainable.update(id(p) for p in model.encoder.embeddings.parameters())
    frozen_part = [*model.encoder.embeddings.parameters(), *(p for b in blocks for p in b.parameters())]
    for param in frozen_part:
        param.requires_grad_(id(param) in trainable)


def package_versions() -> dict[str, str]:
    versions = {"python": sys.version.split()[0], "platform": platform.platform(), "torch": torch.__version__}
    for name in ("bertkit", "numpy", "tokenizers", "safetensors", "transformers"):
        try:
            from importlib.metadata import version
            versions[name] = version(name)
        except Exception:  # not installed: nothing to record
            continue
    return versions


def _write_json(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
