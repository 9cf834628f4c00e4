"""`bertkit quantize`: an int8 folder that is measured against its fp32 source before it is written.

Linear weights (and the token embedding table) are stored as int8 with one fp32 scale per output channel
(bertkit.model.int8), in `model.int8.safetensors`; everything else the source folder had (labels, pooling,
normalize, max length, whitening, tokenizer files) is kept. The gate (bertkit.distill.quantize_gate) runs on
the user's dev file or texts. When it fails, the Linear layers whose output int8 changes most are kept in
higher precision, a few more each round, up to `max_kept_layers`; past that nothing is written and the
command exits with the table and an error.
"""
from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from torch import nn

from bertkit.checkpoints import Checkpoint, load_checkpoint, save_checkpoint
from bertkit.checkpoints.families import require_bert_encoder
from bertkit.data.text import builtin_sentences, read_texts
from bertkit.distill.measure import folder_task_options, load_dev_set
from bertkit.distill.output import check_new_output
from bertkit.distill.quantize_gate import (INT8_KERNELS, GateLimits, Row, Sample, int8_variant, layer_errors,
                                     quantized_copy,
                                          measure, table)
from bertkit.errors import BertkitError
from bertkit.features import EncodeOptions
from bertkit.finetune.model import FinetuneModel
from bertkit.finetune.tasks import TASKS
from bertkit.model.precision import has_int8, quantizable_linears

SCHEME = "int8-per-channel"


@dataclass(frozen=True)
class QuantizeConfig:
    model: str
    output: str
    dev: Optional[str] = None              # labelled file: accuracy gate (classification folders)
    texts: Optional[str] = None            # texts (.txt / .jsonl): cosine gate on sentence vectors
    max_texts: int = 500                   # texts sampled from --texts (seed 0)
    max_length: Optional[int] = None       # tokens per dev example; None: the folder's (its task options)
    max_dev_examples: Optional[int] = None
    max_kept_layers: Optional[int] = None  # Linear layers the fallback may keep in higher precision; None: 1/4
    limits: GateLimits = GateLimits()
    batch_size: int = 32


@dataclass
class QuantizeReport:
    rows: list[Row]
    kept: list[str]                         # Linear layers left in higher precision
    sample: str                             # what the gate measured on
    output: Optional[Path] = None           # None: refused, nothing written
    sizes: dict = field(default_factory=dict)   # "fp32" / "int8" folder bytes

    @property
    def passed(self) -> bool:
        return self.output is not None

    def lines(self) -> list[str]:
        lines = [f"gate measured on {self.sample}", table(self.rows)]
        if self.kept:
            lines.append(f"kept in higher precision: {', '.join(self.kept)}")
        fp32, last_round = self.rows[0], self.rows[-len(INT8_KERNELS):]
        best = max(last_round, key=lambda row: row.sentences_per_s)
        ratio = best.sentences_per_s / max(fp32.sentences_per_s, 1e-9)
        lines.append(f"speed: {best.name} {ratio:.2f}x fp32 on this machine (one timed pass each, so a busy machine "
                     "makes it noisy)" + ("; int8 is slower than fp32 here: keep the fp32 folder for speed"
                                          if ratio < 1.0 else ""))
        if self.sizes:
            lines.append(f"folder size: {self.sizes['int8'] / 2**20:.1f} MiB int8 vs {self.sizes['fp32'] / 2**20:.1f} "
                         f"MiB fp32 ({100 * self.sizes['int8'] / self.sizes['fp32']:.0f}%)")
        return lines


def run_quantize(config: QuantizeConfig) -> QuantizeReport:
    if config.dev is not None and config.texts is not None:
        raise BertkitError("quantize measures on --dev (a classifier's accuracy, and the cosine on its texts) or on "
                           "--texts (the cosine), not both")
    check_new_output(config.output, "quantization", model=config.model)      # the fp32 folder is the gate's reference
    source = load_checkpoint(config.model, device="cpu", precision="fp32")
    require_bert_encoder(source, "quantize")   # XLNet: --precision bf16 instead (its folders hold HF-layout floats)
    if has_int8(source.encoder):
        raise BertkitError(f"{config.model} is already an int8 folder")
    if source.tokenizer is None:
        raise BertkitError(f"{config.model}: no vocab.txt or tokenizer.json; the gate needs to read text")
    sample, sample_note = _sample(source, config)
    reference_row, vectors = measure("fp32", source.encoder, source.heads, source.tokenizer, sample, None,
                                     config.limits)
    reference = (vectors, reference_row.accuracy)
    rows, keep, ranking = [reference_row], [], None
    linears = quantizable_linears(source.encoder)
    max_kept = len(linears) // 4 if config.max_kept_layers is None else config.max_kept_layers
    embeddings = "mlm" not in source.heads     # the MLM head reads the token table as its output matrix
    while True:
        suffix = f", {len(keep)} layer{'s' if len(keep) > 1 else ''} kept" if keep else ""
        quantized = quantized_copy(source.encoder, keep, embeddings)
        round_rows = [measure(f"int8 ({kernel}{suffix})", *int8_variant(quantized, source.heads, choice),
                              source.tokenizer, sample, reference, config.limits)[0]
                      for kernel, choice in INT8_KERNELS.items()]
        rows += round_rows
        if all(row.passed for row in round_rows):
            break
        if len(keep) >= min(max_kept, len(linears)):
            return QuantizeReport(rows, keep, sample_note)
        if ranking is None:
            errors = layer_errors(source.encoder, source.tokenizer, sample)
            ranking = sorted(errors, key=errors.get, reverse=True)
        keep = ranking[:min(max_kept, max(1, 2 * len(keep)))]
    output = save_int8(source, quantized, config.output, keep, embeddings, rows, sample_note)
    sizes = {"fp32": _weights_and_tokenizer_bytes(Path(config.model)), "int8": _weights_and_tokenizer_bytes(output)}
    return QuantizeReport(rows, keep, sample_note, output, sizes)


def _sample(source: Checkpoint, config: QuantizeConfig) -> tuple[Sample, str]:
    """Vectors are measured as the folder makes them: its sentence steps (pooling, dense, whitening,
    normalization) and max length."""
    options = EncodeOptions(batch_size=config.batch_size, max_length=source.sentence.config.max_length)
    if config.dev is not None:
        return _dev_sample(source, config, options)
    if config.texts is not None:
        texts = [t for t in read_texts(config.texts) if t.strip()]
        if not texts:
            raise BertkitError(f"--texts {config.texts}: no text to measure on (every line is blank)")
        if len(texts) > config.max_texts:
            texts = random.Random(0).sample(texts, config.max_texts)
        return Sample(texts, options, source.sentence), f"{len(texts)} texts of {config.texts}"
    texts = builtin_sentences()
    return Sample(texts, options, source.sentence), (f"bertkit's {len(texts)} built-in English sentences "
                                                     "(WordNet definitions); pass --texts with your own texts, or --dev")


def _dev_sample(source: Checkpoint, config: QuantizeConfig, options: EncodeOptions):
    task = source.meta.get("task")
    if task not in ("classification", "pair-classification"):
        raise BertkitError(f"--dev measures classification accuracy; {config.model} is "
                           f"{'a ' + repr(task) if task else 'not a classification'} model: pass --texts instead")
    labels = list(source.meta.get("labels") or [])
    task_options = folder_task_options(source, config.max_length)
    max_length = task_options.max_length
    dev = load_dev_set(source.tokenizer, labels, config.dev, task_options, config.max_dev_examples, task)
    if not dev.examples:
        raise BertkitError(f"{config.dev}: no examples to measure on")

    def classifier(encoder, heads):
        return FinetuneModel(encoder, heads[TASKS[task].head], task, labels).eval()

    texts = [example.text for example in dev.examples]
    options = dataclasses.replace(options, max_length=max_length)
    return Sample(texts, options, source.sentence, dev, classifier), f"{len(texts)} examples of {config.dev}"


def save_int8(source: Checkpoint, encoder: nn.Module, output: str | os.PathLike, keep: list[str],
              embeddings: bool, rows: list[Row], sample_note: str) -> Path:
    """Write `encoder` (source's encoder as quantized_copy made it for the gate round that passed)."""
    meta = {k: v for k, v in source.meta.items() if k != "quantization"}
    meta["quantization"] = {
        "scheme": SCHEME, "weights": "int8, symmetric, one fp32 scale per output channel",
        "activations": "int8 per token at run time (int_mm kernel), or bf16 with the weights dequantized",
        "embeddings": "int8, one scale per row" if embeddings else "float (tied to the MLM head)",
        "kept_in_higher_precision": keep, "quantized_from": str(source.path),
        "gate": {"sample": sample_note, "rows": [{k: v for k, v in row.__dict__.items() if v is not None}
                                                  for row in rows]}}
    # the same sentence steps: the int8 encoder approximates the fp32 one, so its whitening still applies
    return save_checkpoint(output, encoder, source.tokenizer, source.heads, meta, sentence=source.sentence)


def _weights_and_tokenizer_bytes(folder: Path) -> int:
    """Bytes of the files a model folder needs: weights, configs, tokenizer (not run logs)."""
    names = ("model.safetensors", "pytorch_model.bin", "model.int8.safetensors", "config.json", "bertkit.json",
             "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "whitening.safetensors",
             "dense.safetensors")
    return sum((folder / name).stat().st_size for name in names if (folder / name).is_file())
