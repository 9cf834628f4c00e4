"""Embedding distillation: the student's sentence vector learns the teacher's (MSE), on unlabelled texts.

When the student is narrower, a learned linear map takes its vector to the teacher's width during training
only; the saved student then encodes in its own space (the teacher folder's pooling by default). The dev metric
is the mean cosine between student and teacher vectors (through the map), higher is better.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.checkpoints import save_checkpoint
from bertkit.data.text import read_texts
from bertkit.distill.student import build_student, fitted_max_length, student_sentence
from bertkit.finetune.batching import BucketedBatches, collate, inference_batches
from bertkit.finetune.inference import no_targets
from bertkit.errors import BertkitError
from bertkit.model.pooling import normalize
from bertkit.options import POOLINGS
from bertkit.model.sentence import SentenceConfig, SentenceEncoder
from bertkit.train.fit import Job, JobResult


class TextFeature(NamedTuple):
    input_ids: list[int]
    token_type_ids: list[int]


class EmbeddingDistillation(nn.Module):
    def __init__(self, student: nn.Module, projection: nn.Module | None, pooling: str):
        super().__init__()
        self.sentence = SentenceEncoder(student, SentenceConfig(pooling=pooling))
        self.projection = projection

    @property
    def student(self) -> nn.Module:
        return self.sentence.encoder

    def forward(self, input_ids, attention_mask) -> torch.Tensor:
        vectors = self.sentence(input_ids, attention_mask)                   # (B, C_student)
        return self.projection(vectors) if self.projection is not None else vectors


def _features(tokenizer, texts, max_length: int) -> list[TextFeature]:
    encoded = tokenizer.encode_batch(texts, max_length=max_length)
    return [TextFeature(ids, types) for ids, types in zip(encoded.input_ids, encoded.token_type_ids)]


def embedding_job(config, teacher_ckpt) -> Job:
    """--task embedding: the student learns the teacher's sentence vectors (MSE), the job run_distill trains."""
    teacher = teacher_ckpt.encoder.eval()
    student, tokenizer = build_student(config.student, config.student_layers, teacher_ckpt)
    width_s, width_t = student.config.hidden_size, teacher.config.hidden_size
    pooling = config.pooling or teacher_ckpt.sentence.config.pooling     # the teacher's own unless asked
    if pooling not in POOLINGS[:-1]:
        raise BertkitError(f"--pooling {pooling}: choose one of {', '.join(POOLINGS[:-1])}")
    model = EmbeddingDistillation(student, nn.Linear(width_s, width_t) if width_s != width_t else None, pooling)
    teacher_sentence = SentenceEncoder(teacher, SentenceConfig(pooling=pooling))
    left_out = [name for name, present in (("dense layers", len(teacher_ckpt.sentence.dense)),
                                           ("whitening", teacher_ckpt.sentence.whitening is not None)) if present]
    if left_out:
        print(f"bertkit: the student learns the teacher's {pooling}-pooled vectors, before its {' and '.join(left_out)}"
              "; the saved student has none, so its vectors are not in the space the teacher folder encodes to",
              file=sys.stderr)
    data = config.data
    max_length = fitted_max_length(data.max_length, teacher_ckpt, student, config.student)
    train_features = _features(tokenizer, read_texts(data.train, encoding=data.encoding)[:data.max_train_examples],
                               max_length)
    dev_features = (_features(tokenizer, read_texts(data.dev, encoding=data.encoding)[:data.max_dev_examples],
                              max_length) if data.dev else None)
    pad_id = tokenizer.pad_id

    def teacher_vectors(batch) -> torch.Tensor:
        teacher.to(batch.input_ids.device)
        with torch.no_grad():
            return teacher_sentence(batch.input_ids, batch.attention_mask)

    def loss_fn(net: EmbeddingDistillation, batch):
        loss = F.mse_loss(net(batch.input_ids, batch.attention_mask).float(),
                          teacher_vectors(batch).float())
        return loss, {"tokens": float(batch.attention_mask.sum())}

    def make_batch(indices):
        return collate([train_features[i] for i in indices], indices, pad_id, no_targets)

    batches = BucketedBatches([len(f.input_ids) for f in train_features], config.data.batch_size, make_batch,
                              seed=config.train.seed)

    def evaluate(net: EmbeddingDistillation) -> dict:
        was_training = net.training
        net.eval()
        cosines, errors = [], []
        device = next(net.parameters()).device

        def make_dev_batch(indices):
            return collate([dev_features[i] for i in indices], indices, pad_id, no_targets)

        with torch.no_grad():
            for batch in inference_batches([len(f.input_ids) for f in dev_features], data.eval_batch_size,
                                           make_dev_batch):
                batch = batch.to(device)
                s, t = net(batch.input_ids, batch.attention_mask).float(), teacher_vectors(batch).float()
                cosines.append((normalize(s) * normalize(t)).sum(-1))
                errors.append((s - t).pow(2).mean(-1))
        net.train(was_training)
        return {"cosine": float(torch.cat(cosines).mean()), "mse": float(torch.cat(errors).mean())}

    output = Path(config.output)
    meta = {"distillation": {"teacher": str(config.teacher), "task": "embedding"}}
    # the teacher's length and normalization; the student's own pooled space (no dense layers, no whitening)
    sentence = student_sentence(teacher_ckpt, student, pooling=pooling, layers="last")

    def save(net: EmbeddingDistillation, metrics: dict) -> None:
        save_checkpoint(output, net.student, tokenizer, {}, {**meta, "dev_metrics": metrics}, sentence=sentence)

    return Job(model, loss_fn, batches, save, evaluate if dev_features else None, "cosine" if dev_features else None)


def distill_record(result: JobResult) -> dict:
    """What `bertkit distill` prints for either task (metrics.json holds more)."""
    return {"dev": result.metrics, "steps": result.steps, "train_seconds": result.train_seconds}
