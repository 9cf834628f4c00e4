"""The quality gate of `bertkit quantize`: an int8 model against its fp32 source, on the user's data.

Two measures, each on what users get from the folder:
- sentence vectors (the folder's pooling, max length, whitening): cosine of every text's int8 vector to its
  fp32 vector; the gate asks for mean >= 0.99 and min >= 0.95 by default;
- accuracy of a classifier on a labelled dev file; the gate allows a drop of at most 0.5 points.
Every int8 variant is measured with both int8 kernels (bertkit.model.int8): `_int_mm` with fp32 elsewhere
(CPUs without fast bf16) and weights dequantized to bf16 (AMX CPUs, GPUs), so the folder passes wherever
it is loaded. When a variant fails, `layer_errors` ranks the Linear layers by how much int8 changes their
output on the sample, and the job keeps the worst ones in higher precision.
"""
from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch
from torch import nn

from bertkit.distill.measure import measure_module
from bertkit.features import EncodeOptions, encode_texts
from bertkit.model.int8 import Int8Linear
from bertkit.model.precision import apply_precision, quantize_encoder
from bertkit.model.sentence import SentencePipeline
from bertkit.runtime import PrecisionChoice

# The two ways an int8 folder runs (runtime.choose_precision + model.precision.apply_precision).
INT8_KERNELS = {"int_mm, fp32 elsewhere": PrecisionChoice("int8", torch.float32, "int8 (int_mm)"),
                "weights dequantized to bf16": PrecisionChoice("int8", torch.bfloat16, "int8 (bf16)")}


@dataclass(frozen=True)
class GateLimits:
    max_accuracy_drop: float = 0.5      # points (percent) of accuracy on the dev file
    min_mean_cosine: float = 0.99
    min_cosine: float = 0.95


@dataclass
class Row:
    """One line of the gate table: a model variant and what it measured."""
    name: str
    sentences_per_s: float
    accuracy: Optional[float] = None            # fraction, dev gate
    mean_cosine: Optional[float] = None         # to fp32, texts gate
    min_cosine: Optional[float] = None
    failures: list[str] = field(default_factory=list)   # the gate's limits this variant broke
    reference: bool = False                             # the fp32 row the others are measured against

    @property
    def passed(self) -> bool:
        return not self.failures

    def cells(self) -> list[str]:
        return [self.name, _format(self.accuracy, lambda a: f"{100 * a:.2f}"),
                _format(self.mean_cosine, lambda c: f"{c:.5f}"), _format(self.min_cosine, lambda c: f"{c:.5f}"),
                f"{self.sentences_per_s:.1f}", "reference" if self.reference else
                ("pass" if self.passed else "FAIL: " + "; ".join(self.failures))]


TABLE_HEADER = ("| model | accuracy % | mean cosine to fp32 | min cosine to fp32 | sentences/s | gate |\n"
                "|---|---:|---:|---:|---:|---|")


def _format(value, fmt: Callable) -> str:
    return "" if value is None else fmt(value)


def table(rows: Sequence[Row]) -> str:
    return "\n".join([TABLE_HEADER, *("| " + " | ".join(row.cells()) + " |" for row in rows)])


@dataclass
class Sample:
    """What the gate measures on: texts (always: sentence vectors, layer errors) and, for a classifier with a
    dev file, the dev set (bertkit.distill.measure.DevSet) and a factory of its network."""
    texts: list[str]
    options: EncodeOptions
    sentence: SentencePipeline                # the folder's sentence steps: vectors as Model.encode makes them
    dev: object = None
    classifier: Optional[Callable[[nn.Module, dict], nn.Module]] = None   # (encoder, heads) -> net(ids, mask, types)


def quantized_copy(encoder: nn.Module, keep: Sequence[str], embeddings: bool) -> nn.Module:
    """A copy of the encoder with int8 weights but for `keep`: quantized once per gate round, then measured in
    every kernel (int8_variant) and, for the round that passes, saved as it is."""
    quantized = copy.deepcopy(encoder)
    quantize_encoder(quantized, keep, embeddings=embeddings)
    return quantized


def int8_variant(quantized: nn.Module, heads: dict, choice: PrecisionChoice) -> tuple[nn.Module, dict]:
    """Copies of a quantized encoder (quantized_copy) and of the heads, put into `choice`'s kernel and float
    dtype (which changes the modules, so the quantized encoder itself stays as saved)."""
    encoder, heads = copy.deepcopy(quantized), copy.deepcopy(heads)
    apply_precision(encoder, heads, choice)
    return encoder.eval(), heads


def sentence_vectors(encoder: nn.Module, tokenizer, sample: Sample) -> tuple[np.ndarray, float]:
    """(N, D) unit vectors of the folder's sentence path (as Model.encode makes them), and sentences/s."""
    sentence = sample.sentence.build(encoder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # truncation at the folder's max length: as its encode does
        encode_texts(sentence, tokenizer, sample.texts[:8], sample.options)        # warm-up: allocation
        started = time.perf_counter()
        vectors = encode_texts(sentence, tokenizer, sample.texts, sample.options)
        elapsed = time.perf_counter() - started
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return vectors, len(sample.texts) / elapsed


def measure(name: str, encoder: nn.Module, heads: dict, tokenizer, sample: Sample,
            reference: Optional[tuple[np.ndarray, Optional[float]]], limits: GateLimits) -> tuple[Row, np.ndarray]:
    """One row: cosine to the reference vectors (and dev accuracy); reference None measures the fp32 model."""
    vectors, rate = sentence_vectors(encoder, tokenizer, sample)
    row = Row(name, rate)
    if sample.dev is not None:
        net = sample.classifier(encoder, heads)
        row.accuracy = measure_module(name, net, sample.dev).accuracy
    if reference is None:
        row.reference = True
        return row, vectors
    cosines = (vectors * reference[0]).sum(axis=1)
    row.mean_cosine, row.min_cosine = float(cosines.mean()), float(cosines.min())
    if row.mean_cosine < limits.min_mean_cosine:
        row.failures.append(f"mean cosine < {limits.min_mean_cosine}")
    if row.min_cosine < limits.min_cosine:
        row.failures.append(f"min cosine < {limits.min_cosine}")
    if row.accuracy is not None and 100 * (reference[1] - row.accuracy) > limits.max_accuracy_drop + 1e-9:
        row.failures.append(f"accuracy drop > {limits.max_accuracy_drop} points")
    return row, vectors


def layer_errors(encoder: nn.Module, tokenizer, sample: Sample, limit: int = 128) -> dict[str, float]:
    """Linear layer name -> ||int8(x) - linear(x)||^2 / ||linear(x)||^2 over the first `limit` sample texts, with
    the fp32 model's own inputs to each layer and the `_int_mm` kernel (per-token activation int8: where
    activation outliers hurt)."""
    linears = {name: m for name, m in encoder.named_modules() if isinstance(m, nn.Linear)}
    int8 = {name: Int8Linear.from_linear(m) for name, m in linears.items()}
    sums = {name: [0.0, 0.0] for name in linears}
    hooks = []
    for name, module in linears.items():
        def hook(module, inputs, output, name=name):
            error = int8[name](inputs[0].float()) - output.float()
            sums[name][0] += float(error.pow(2).sum())
            sums[name][1] += float(output.float().pow(2).sum())
        hooks.append(module.register_forward_hook(hook))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            encode_texts(sample.sentence.build(encoder), tokenizer, sample.texts[:limit], sample.options)
    finally:
        for handle in hooks:
            handle.remove()
    return {name: err / max(total, 1e-30) for name, (err, total) in sums.items()}
