"""Dynamic int8 quantization of Linear layers for CPU inference (torch.ao quantize_dynamic).

Weights become int8 with one scale per output row; activations are quantized on the fly per batch, so no
calibration data is needed. The saved folder holds the fp32 weights (HF-compatible, loadable anywhere) and
bertkit.json {"quantization": {"scheme": "dynamic-int8", ...}}: loading re-applies the same deterministic
quantization, so the reloaded model computes exactly what the quantized one did before saving.
"""
from __future__ import annotations

import copy
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from bertkit.checkpoints import Checkpoint, load_checkpoint, save_checkpoint
from bertkit.errors import BertkitError

SCHEME = "dynamic-int8"


def quantize_int8(module: nn.Module) -> nn.Module:
    """A quantized copy (the input is left as it was); CPU only, inference only."""
    module = copy.deepcopy(module).cpu().float().eval()
    if not ({"fbgemm", "x86"} & set(torch.backends.quantized.supported_engines)):
        torch.backends.quantized.engine = "qnnpack"   # ARM (phones): the only int8 engine there
    with warnings.catch_warnings():
        # torch.ao.quantization is deprecated in favour of torchao, but still ships and works in torch 2.x;
        # the warning would print on every load of a quantized folder.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*")
        return torch.ao.quantization.quantize_dynamic(module, {nn.Linear}, dtype=torch.qint8)


def is_quantized(meta: dict) -> bool:
    return (meta or {}).get("quantization", {}).get("scheme") == SCHEME


def apply_saved_quantization(checkpoint: Checkpoint) -> Checkpoint:
    """Re-apply the quantization a folder's bertkit.json records (no-op for other folders)."""
    if not is_quantized(checkpoint.meta):
        return checkpoint
    checkpoint.encoder = quantize_int8(checkpoint.encoder)
    checkpoint.heads = {k: quantize_int8(v) for k, v in checkpoint.heads.items()}
    return checkpoint


def load_quantized(path: str | os.PathLike) -> Checkpoint:
    return apply_saved_quantization(load_checkpoint(path, device="cpu"))


def save_quantized(model_dir: str | os.PathLike, output: str | os.PathLike) -> Path:
    checkpoint = load_checkpoint(model_dir, device="cpu")
    if is_quantized(checkpoint.meta):
        raise BertkitError(f"{model_dir} is already quantized")
    meta = {**checkpoint.meta, "quantization": {"scheme": SCHEME, "modules": ["Linear"], "dtype": "qint8",
                                                "quantized_from": str(model_dir)}}
    extra = _label_config(checkpoint)
    return save_checkpoint(output, checkpoint.encoder, checkpoint.tokenizer, checkpoint.heads, meta, extra,
                           sentence=checkpoint.sentence)


def _label_config(checkpoint: Checkpoint) -> Optional[dict]:
    labels = checkpoint.meta.get("labels")
    if not labels or "classifier" not in checkpoint.heads:
        return None
    return {"id2label": {str(i): n for i, n in enumerate(labels)}, "label2id": {n: i for i, n in enumerate(labels)}}


@dataclass
class QuantizeReport:
    output: Path
    fp32: "object"      # measure.Measurement
    int8: "object"

    def lines(self) -> list[str]:
        from bertkit.distill.measure import TABLE_HEADER
        speedup = self.int8.sentences_per_s / max(self.fp32.sentences_per_s, 1e-9)
        return [TABLE_HEADER, self.fp32.row(), self.int8.row(),
                f"int8 / fp32 speed: {speedup:.2f}x; accuracy change: "
                f"{100 * (self.int8.accuracy - self.fp32.accuracy):+.2f} points (same run, same thread settings)"]


def quantize_and_measure(model_dir: str | os.PathLike, output: str | os.PathLike, dev: Optional[str] = None,
                         max_length: int = 128, limit: Optional[int] = None, batch_size: int = 32) -> QuantizeReport:
    from bertkit.distill.measure import load_dev_set, measure_module
    from bertkit.finetune.model import model_from_checkpoint
    path = save_quantized(model_dir, output)
    if dev is None:
        return QuantizeReport(path, None, None)
    fp32 = load_checkpoint(model_dir, device="cpu")
    task = fp32.meta.get("task", "classification")
    if task not in ("classification", "pair-classification"):
        raise BertkitError(f"--dev measures classification accuracy; {model_dir} is a {task!r} model")
    fp32_net = model_from_checkpoint(fp32, task, fp32.meta.get("labels"))
    int8 = load_quantized(path)
    int8_net = model_from_checkpoint(int8, task, int8.meta.get("labels"))
    dev_set = load_dev_set(fp32.tokenizer, fp32_net.label_names, dev, max_length, limit, task)
    measure_module("fp32", fp32_net, dev_set, batch_size)        # warm-up: first calls pay allocation
    return QuantizeReport(path, measure_module("fp32", fp32_net, dev_set, batch_size),
                          measure_module("int8 (dynamic)", int8_net, dev_set, batch_size))
