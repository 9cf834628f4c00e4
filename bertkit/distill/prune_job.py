"""The pruning job: score heads on labelled data, remove the least important, save, reload, measure.

Two folders come out. OUTPUT is bertkit's: physically smaller layers (the speed-up), `pruned_heads` in
config.json (load_checkpoint shapes the encoder from it; transformers 5 ignores the key, so plain
from_pretrained refuses the shapes). OUTPUT/transformers/ is the same model with full shapes and the pruned
heads' weights zeroed: plain `from_pretrained` loads it with the same outputs and no speed-up. Each folder's
bertkit.json "pruning" says which it is.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bertkit.checkpoints import Checkpoint, load_checkpoint, save_checkpoint
from bertkit.checkpoints.families import require_bert_encoder
from bertkit.checkpoints.hf_check import compare_with_transformers
from bertkit.distill.output import check_new_output, require_float
from bertkit.distill.measure import TABLE_HEADER, Measurement, folder_task_options, load_dev_set, measure_module
from bertkit.distill.prune import (attention_heads, full_shape_copy, head_importance, heads_to_prune,
                                   prune_heads, pruned_heads_record)
from bertkit.errors import BertkitError
from bertkit.finetune.batching import collate
from bertkit.finetune.model import hf_config_extra, model_from_checkpoint, model_meta


@dataclass
class PruneReport:
    output: Path
    removed: dict[int, list[int]]       # layer -> positions removed among that layer's heads
    heads_per_layer: list[int]          # heads left per layer
    before: Measurement
    after: Measurement
    scored_on_dev: bool = False         # heads chosen on the file the accuracy is measured on

    def lines(self) -> list[str]:
        speedup = self.after.sentences_per_s / max(self.before.sentences_per_s, 1e-9)
        lines = [TABLE_HEADER, self.before.row(), self.after.row(),
                 f"heads per layer after pruning: {self.heads_per_layer}",
                 f"pruned / full speed: {speedup:.2f}x; accuracy change "
                 f"{100 * (self.after.accuracy - self.before.accuracy):+.2f} points (same run)"]
        if self.scored_on_dev:
            lines.append("heads were scored on --dev itself, so the pruned accuracy is optimistic; score them on "
                         "other labelled data (--importance-data, e.g. the training file) for a fair one")
        return lines


TRANSFORMERS_COPY = "transformers"


def save_transformers_copy(folder: Path, net, tokenizer, meta: dict, pruning: dict, sentence) -> Path:
    """The full-shape copy (pruned heads zeroed) that plain from_pretrained loads; checked against transformers
    when it is installed, like `bertkit convert`."""
    full = full_shape_copy(net.encoder)
    copy_meta = {**meta, "pruning": {**pruning, "form": "full shapes with the pruned heads' weights zeroed: plain "
                                     "transformers from_pretrained loads it, same outputs, no speed-up (the "
                                     "folder above holds the smaller, faster layers)",
                                     "pruned_heads": pruned_heads_record(net.encoder)}}
    reference = Checkpoint(net.encoder.config, net.encoder, tokenizer, {net.head_key: net.head})

    def check(tmp: Path) -> None:
        if importlib.util.find_spec("transformers") is not None:
            compare_with_transformers(tmp, reference)

    return save_checkpoint(folder, full, tokenizer, {net.head_key: net.head}, copy_meta, hf_config_extra(net),
                           sentence=sentence, check=check)


def prune_and_measure(model_dir: str | os.PathLike, output: str | os.PathLike, dev: str,
                      importance_data: Optional[str] = None, fraction: Optional[float] = None,
                      per_layer: Optional[int] = None, max_length: Optional[int] = None, limit: Optional[int] = None,
                      batch_size: int = 16) -> PruneReport:
    check_new_output(output, "pruning", model=model_dir)
    checkpoint = load_checkpoint(model_dir)
    require_bert_encoder(checkpoint, "prune-heads")
    require_float(checkpoint, "model", "prune")
    task_name = checkpoint.meta.get("task", "classification")
    if task_name not in ("classification", "pair-classification"):
        raise BertkitError(f"pruning scores heads with the classification loss; {model_dir} is a {task_name!r} model")
    net = model_from_checkpoint(checkpoint, task_name, checkpoint.meta.get("labels"))
    _check_amount(fraction, per_layer, attention_heads(net.encoder))
    options = folder_task_options(checkpoint, max_length)
    dev_set = load_dev_set(checkpoint.tokenizer, net.label_names, dev, options, limit, task_name)
    scoring = dev_set if importance_data is None else load_dev_set(
        checkpoint.tokenizer, net.label_names, importance_data, options, limit, task_name)
    measure_module("full", net, dev_set)                     # warm-up: first calls pay allocation
    before = measure_module("full", net, dev_set)
    features, pad = scoring.features, checkpoint.tokenizer.pad_id
    batches = [collate(features[i:i + batch_size], list(range(i, min(i + batch_size, len(features)))), pad,
                       scoring.task.make_targets) for i in range(0, len(features), batch_size)]

    def loss_of(model, batch):
        return scoring.task.loss(model(batch.input_ids, batch.attention_mask, batch.token_type_ids), batch.targets)

    importance = head_importance(net, net.encoder, batches, loss_of)
    removed = heads_to_prune(importance, fraction, per_layer, attention_heads(net.encoder))
    prune_heads(net.encoder, removed)
    extra = {**hf_config_extra(net), "pruned_heads": pruned_heads_record(net.encoder)}
    meta = model_meta(net, {k: v for k, v in checkpoint.meta.items() if k not in ("task", "labels")})
    pruning = {"method": "head importance (Michel et al. 2019)", "pruned_from": str(model_dir),
               "importance": importance.tolist()}
    meta["pruning"] = {**pruning, "form": f"physically smaller layers (faster; bertkit.load). {TRANSFORMERS_COPY}/ "
                                          "holds the full-shape copy plain transformers from_pretrained loads"}
    sentence = checkpoint.sentence.after_training()
    save_checkpoint(output, net.encoder, checkpoint.tokenizer, {net.head_key: net.head}, meta, extra,
                    sentence=sentence)
    save_transformers_copy(Path(output) / TRANSFORMERS_COPY, net, checkpoint.tokenizer, meta, pruning, sentence)
    reloaded = load_checkpoint(output)
    after_net = model_from_checkpoint(reloaded, task_name, reloaded.meta.get("labels"))
    name = f"pruned ({sum(map(len, removed.values()))} heads)"
    measure_module(name, after_net, dev_set)                 # the same warm-up as the full model's
    after = measure_module(name, after_net, dev_set)
    return PruneReport(Path(output), removed, attention_heads(after_net.encoder), before, after,
                       importance_data is None or Path(importance_data).resolve() == Path(dev).resolve())


def _check_amount(fraction: Optional[float], per_layer: Optional[int], heads: list[int]) -> None:
    """--fraction in (0, 1), or --per-layer from 1 to one less than the fewest heads a layer has (every layer keeps
    one): a one-line error, not a quietly smaller (or, for a negative fraction, the largest possible) pruning."""
    if fraction is not None and not 0.0 < fraction < 1.0:
        raise BertkitError(f"--fraction {fraction}: give the fraction of all {sum(heads)} heads to remove, "
                           "between 0 and 1 (every layer keeps at least one head)")
    if per_layer is not None and not 1 <= per_layer < min(heads):
        raise BertkitError(f"--per-layer {per_layer}: the model has {min(heads)} heads in its smallest layer "
                           f"(heads per layer: {heads}); remove 1 to {min(heads) - 1} per layer, so each keeps one")
