"""Accuracy and speed of a classifier on a dev file, measured the same way for every compressed variant.

Speed is sentences per second over the whole dev set (tokenize once beforehand; time only the forward
passes, batched by length as prediction does), on the current thread settings, one variant after another
in the same process, so the ratios compare like with like.
"""
from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from bertkit.data.labels import LabelMap
from bertkit.data.readers import ReadOptions
from bertkit.errors import BertkitError
from bertkit.finetune.inference import forward_features, stack
from bertkit.finetune.config import TaskOptions
from bertkit.finetune.tasks import build_task, read_examples


@dataclass
class DevSet:
    task: object                  # bertkit.finetune.classification.SequenceTask
    examples: list
    features: list
    labels: np.ndarray            # (N,) gold label ids


@dataclass
class Measurement:
    name: str
    accuracy: float
    sentences_per_s: float
    params: int = 0
    size_bytes: int = 0

    def row(self) -> str:
        return (f"| {self.name} | {self.params / 1e6:.1f}M | {self.size_bytes / 2**20:.1f} MiB | "
                f"{100 * self.accuracy:.2f} | {self.sentences_per_s:.1f} |")


TABLE_HEADER = "| model | params | size | accuracy % | sentences/s |\n|---|---|---|---|---|"


def folder_task_options(checkpoint, max_length: Optional[int] = None) -> TaskOptions:
    """How the folder's predict and evaluate encode texts (its saved task options: max length, long_texts), so a
    measured accuracy is the one they give; max_length: another length (--max-length), at most the position table."""
    options = TaskOptions.saved(checkpoint.meta, Path(checkpoint.path or "the model") / "bertkit.json")
    length = options.max_length if max_length is None else max_length
    return replace(options, max_length=min(length, checkpoint.config.max_length))


def load_dev_set(tokenizer, label_names: Sequence[str], path: str | os.PathLike, options: TaskOptions,
                 limit: Optional[int] = None, task_name: str = "classification") -> DevSet:
    """`path`'s labelled rows encoded with `options` (folder_task_options: as the folder's evaluate encodes them);
    limit (--max-dev-examples): the first rows only, at least one (a negative one sliced rows off the end)."""
    if limit is not None and limit < 1:
        raise BertkitError(f"--max-dev-examples must be >= 1, got {limit}")
    examples = read_examples(task_name, path, LabelMap(tuple(label_names)), True, ReadOptions())[:limit]
    task = build_task(task_name, tokenizer, list(label_names), options)
    features = task.encode(examples)
    return DevSet(task, examples, features, np.array([f.label for f in features]))


def measure_module(name: str, net: torch.nn.Module, dev: DevSet, batch_size: int = 32) -> Measurement:
    """net(input_ids, attention_mask, token_type_ids) -> logits (a FinetuneModel or its quantized copy)."""
    started = time.perf_counter()
    logits = stack(forward_features(net, dev.features, dev.task.tokenizer.pad_id, batch_size))
    elapsed = time.perf_counter() - started
    accuracy = float((logits.argmax(-1) == dev.labels).mean())
    return Measurement(name, accuracy, len(dev.features) / elapsed, parameter_count(net), serialized_size(net))


def measure_logits(name: str, logits_of: Callable[[list[str]], np.ndarray], dev: DevSet,
                   size_bytes: int = 0, params: int = 0) -> Measurement:
    """For engines outside PyTorch (onnxruntime): logits_of(texts) -> (N, L); tokenization is included."""
    texts = [ex.text for ex in dev.examples]
    started = time.perf_counter()
    logits = logits_of(texts)
    elapsed = time.perf_counter() - started
    return Measurement(name, float((logits.argmax(-1) == dev.labels).mean()), len(texts) / elapsed, params, size_bytes)


def parameter_count(net: torch.nn.Module) -> int:
    count = sum(p.numel() for p in net.parameters())
    for module in net.modules():          # dynamic-int8 Linear keeps its weight outside parameters()
        if hasattr(module, "weight") and callable(module.weight) and not isinstance(module.weight, torch.Tensor):
            count += module.weight().numel() + (module.bias().numel() if module.bias() is not None else 0)
    return count


def serialized_size(net: torch.nn.Module) -> int:
    """Bytes of the state dict as torch.save writes it: the size on disk of these weights."""
    buffer = io.BytesIO()
    torch.save(net.state_dict(), buffer)
    return buffer.tell()


def folder_size(path: str | os.PathLike) -> int:
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
