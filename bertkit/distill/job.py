"""The distillation job: a fine-tuned teacher trains a smaller student on the shared training loop.

task "classification": the student learns the teacher's logits (KD with temperature, or MSE) mixed with the
gold labels, optionally plus hidden-state (MSE through a projection, or cosine) and attention-map losses
over a uniform layer map; --augment-copies adds masked copies of the training texts (bertkit/distill/augment.py)
and --transfer unlabeled in-domain texts, both labeled by the teacher only. task "embedding": the student learns
the teacher's sentence vectors (MSE); the data needs no labels. The teacher runs in eval mode under no_grad;
with logit-only losses its logits are computed once per row and reused in later epochs (dropout is off in it).
"""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.checkpoints.families import require_bert_encoder
from bertkit.data.labels import LabelMap
from bertkit.data.readers import ReadOptions
from bertkit.distill import losses
from bertkit.distill.config import DistillConfig
from bertkit.distill.augment import UNLABELED, masked_copies
from bertkit.distill.embedding_job import distill_record
from bertkit.distill.embedding_job import embedding_job
from bertkit.distill.output import check_new_output, require_float
from bertkit.distill.student import build_student, fitted_max_length, student_sentence
from bertkit.model.pooling import pooled_or_cls
from bertkit.errors import BertkitError
from bertkit.finetune.batching import BucketedBatches, collate
from bertkit.finetune.model import FinetuneModel, hf_config_extra, model_from_checkpoint, model_meta, new_head
from bertkit.finetune.config import TaskOptions
from bertkit.finetune.tasks import TASKS, build_task, read_examples
from bertkit.train.fit import Job, check_required, fit


class Distillation(nn.Module):
    """What the loop trains: the student and the hidden-state projections (dropped after training)."""

    def __init__(self, student: FinetuneModel, projections: Optional[nn.ModuleList]):
        super().__init__()
        self.student, self.projections = student, projections


def run_distill(config: DistillConfig) -> dict:
    check_required(config, "distill", ("teacher", "data.train", "output"))
    check_new_output(config.output, "distillation", teacher=config.teacher, student=config.student)
    return distill_record(fit(config, lambda: _distill_job(config)))


def _distill_job(config: DistillConfig) -> Job:
    """The job `run_distill` trains (fit seeded the RNGs): classification, or embedding_job's."""
    teacher_ckpt = load_checkpoint(config.teacher)
    require_bert_encoder(teacher_ckpt, "distill")
    require_float(teacher_ckpt, "teacher", "distill from")
    if teacher_ckpt.tokenizer is None:
        raise BertkitError(f"{config.teacher}: the teacher folder has no tokenizer")
    if config.augment_copies < 0 or not 0.0 < config.augment_mask_prob < 1.0:
        raise BertkitError(f"--augment-copies must be >= 0 (got {config.augment_copies}) and --augment-mask-prob in "
                           f"(0, 1) (got {config.augment_mask_prob})")
    if config.task == "embedding":
        if config.augment_copies or config.transfer:
            raise BertkitError("--augment-copies and --transfer are for --task classification (the teacher labels "
                               "the extra texts)")
        if config.hidden_weight or config.attention_weight:
            raise BertkitError("--hidden-weight and --attention-weight are for --task classification; --task "
                               "embedding trains on the sentence vectors only")
        return embedding_job(config, teacher_ckpt)
    if teacher_ckpt.meta.get("task") != "classification" or TASKS["classification"].head not in teacher_ckpt.heads:
        raise BertkitError(f"--teacher {config.teacher} is not a fine-tuned classifier; run bertkit finetune first")
    labels = list(teacher_ckpt.meta.get("labels") or [])
    teacher = model_from_checkpoint(teacher_ckpt, "classification", labels).eval()
    student_encoder, tokenizer = build_student(config.student, config.student_layers, teacher_ckpt)
    # a student cut from the teacher keeps the teacher's head (DistilBERT-style init); a given student gets a new one
    student_head = new_head("classification", student_encoder, len(labels)) if config.student \
        else copy.deepcopy(teacher.head)
    student = FinetuneModel(student_encoder, student_head, "classification", labels)

    read = ReadOptions(config.data.encoding)
    known = LabelMap(tuple(labels))
    data = config.data
    train_examples = read_examples("classification", data.train, known, True, read)[:data.max_train_examples]
    dev_examples = (read_examples("classification", data.dev, known, True, read)[:data.max_dev_examples]
                    if data.dev else None)
    # the teacher's encoding options (long_texts, ...) at the run's max length, saved with the student so that
    # predict and evaluate encode texts as the student was trained and measured
    options = dataclasses.replace(TaskOptions.saved(teacher_ckpt.meta, Path(config.teacher) / "bertkit.json"),
                                  max_length=fitted_max_length(data.max_length, teacher_ckpt, student_encoder,
                                                               config.student))
    task = build_task("classification", tokenizer, labels, options)
    train_features = task.encode(train_examples)
    train_features += masked_copies(train_features, config.augment_copies, config.augment_mask_prob,
                                    tokenizer.mask_id, tokenizer.special_ids, config.train.seed)
    if config.transfer:     # any labels in the file are ignored: only the teacher labels transfer texts
        transfer = read_examples("classification", config.transfer, None, False, read)
        train_features += [f._replace(label=UNLABELED)
                           for f in task.encode([ex._replace(label=None) for ex in transfer], quiet=True)]
    dev_features = task.encode(dev_examples) if dev_examples is not None else None
    has_dev = dev_features is not None

    layer_map = _layer_map(config, student_encoder, teacher.encoder)
    projections = losses.make_projections(student_encoder.config.hidden_size, teacher_ckpt.config.hidden_size,
                                          len(layer_map)) if config.hidden_weight and config.hidden_loss == "mse" else None
    if config.hidden_loss == "cosine" and config.hidden_weight and projections is None and \
            student_encoder.config.hidden_size != teacher_ckpt.config.hidden_size:
        raise BertkitError("the cosine hidden-state loss needs equal widths; use --hidden-loss mse")
    model = Distillation(student, projections)
    pad_id = tokenizer.pad_id

    def make_batch(indices):
        return collate([train_features[i] for i in indices], indices, pad_id, task.make_targets)

    batches = BucketedBatches([len(f.input_ids) for f in train_features], config.data.batch_size, make_batch,
                              seed=config.train.seed)
    need_hidden, need_attn = bool(config.hidden_weight), bool(config.attention_weight)
    # Logit-only distillation: the teacher is frozen and in eval mode, so each row's logits never change.
    # Computed on first sight and reused in later epochs; only [CLS] reaches the last layers' outputs.
    logits_only = not (need_hidden or need_attn)
    teacher_logits: dict[int, torch.Tensor] = {}

    def teacher_outputs(batch):
        if logits_only and all(i in teacher_logits for i in batch.indices):
            return None, torch.stack([teacher_logits[i] for i in batch.indices]).to(batch.input_ids.device)
        teacher.to(batch.input_ids.device)
        with torch.no_grad():
            t_out = teacher.encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids,
                                    output_hidden_states=need_hidden, output_attentions=need_attn, cls_only=logits_only)
            t_logits = teacher.head(pooled_or_cls(t_out))
        if logits_only:
            teacher_logits.update(zip(batch.indices, t_logits.cpu()))
        return t_out, t_logits

    def loss_fn(net: Distillation, batch):
        t_out, t_logits = teacher_outputs(batch)
        s_out = net.student.encoder(batch.input_ids, batch.attention_mask, batch.token_type_ids,
                                    output_hidden_states=need_hidden, output_attentions=need_attn, cls_only=logits_only)
        s_logits = net.student.head(pooled_or_cls(s_out))
        gold = batch.targets != UNLABELED                 # augmented copies learn from the teacher only
        hard = task.loss(s_logits[gold], batch.targets[gold]) if gold.any() else s_logits.sum() * 0.0
        loss = losses.mixed_logit_loss(s_logits, t_logits, hard, config.alpha, config.temperature, config.logit_loss)
        stats = {"hard": hard.item(), "tokens": float(batch.attention_mask.sum())}
        if need_hidden:
            hidden = (losses.hidden_cosine_loss(s_out.hidden_states, t_out.hidden_states, layer_map,
                                                batch.attention_mask) if config.hidden_loss == "cosine" else
                      losses.hidden_mse_loss(s_out.hidden_states, t_out.hidden_states, layer_map, net.projections,
                                             batch.attention_mask))
            loss = loss + config.hidden_weight * hidden
            stats["hidden"] = hidden.item()
        if need_attn:
            attention = losses.attention_mse_loss(s_out.attentions, t_out.attentions, layer_map, batch.attention_mask)
            loss = loss + config.attention_weight * attention
            stats["attention"] = attention.item()
        return loss, stats

    output = Path(config.output)
    settings = {k: v for k, v in dataclasses.asdict(config).items()
                if k in ("temperature", "alpha", "logit_loss", "hidden_weight", "hidden_loss", "attention_weight",
                         "student_layers", "augment_copies", "augment_mask_prob", "transfer")}
    meta_extra = {"task_options": dataclasses.asdict(options),
                  "distillation": {"teacher": str(config.teacher), **settings}}

    def save(net: Distillation, metrics: dict) -> None:
        save_checkpoint(output, net.student.encoder, tokenizer, {net.student.head_key: net.student.head},
                        model_meta(net.student, {**meta_extra, "dev_metrics": metrics}), hf_config_extra(net.student),
                        sentence=student_sentence(teacher_ckpt, net.student.encoder))    # the teacher's settings only

    def evaluate(net: Distillation):
        return task.evaluate(net.student, dev_features, dev_examples, config.data.eval_batch_size)

    metric = TASKS["classification"].main_metric if has_dev else None
    return Job(model, loss_fn, batches, save, evaluate if has_dev else None, metric)


def _layer_map(config: DistillConfig, student, teacher) -> list[int]:
    """The teacher hidden-state index each student layer learns from (hidden-state and attention losses), checked
    before training: the depths divide, and mapped attention layers have the same number of heads."""
    if not (config.hidden_weight or config.attention_weight):
        return []
    try:
        layer_map = losses.uniform_layer_map(len(student.blocks), len(teacher.blocks))
    except ValueError as err:
        raise BertkitError(f"--hidden-weight / --attention-weight: {err}") from None
    if config.attention_weight:
        for m, t_index in enumerate(layer_map):
            s_heads, t_heads = student.blocks[m].attention.num_heads, teacher.blocks[t_index - 1].attention.num_heads
            if s_heads != t_heads:
                raise BertkitError(f"--attention-weight compares attention maps head by head: student layer {m} has "
                                   f"{s_heads} heads, teacher layer {t_index - 1} has {t_heads}; use "
                                   "--attention-weight 0 (or a student with the teacher's heads)")
    return layer_map
