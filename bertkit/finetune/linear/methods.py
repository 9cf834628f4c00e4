"""`finetune --method linear-probe | hybrid`: minutes on a CPU instead of a fine-tuning run.

linear-probe: encode train and dev once with the frozen model (cached in OUTPUT/run/vectors), fit a
logistic (ridge) regression on the vectors, its C chosen on dev.
hybrid: that part and the TF-IDF baseline's, stacked (hybrid.py); when the model was fine-tuned on these labels
(`--model` a fine-tuned folder), its classification head's probabilities and the TF-IDF part, pooled on dev.
The output folder is the frozen encoder's checkpoint (it encodes exactly as the model it came from), or the
fine-tuned model's whole folder, plus the linear model's files; `bertkit evaluate / predict`, `bertkit.load(...).predict` and `serve /predict`
run the linear model, `encode` the frozen encoder.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

from bertkit.atomic_write import write_json
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.data.readers import ReadOptions
from bertkit.finetune.linear.baseline import FittedBaseline
from bertkit.finetune.linear.folder import linear_meta, write_linear_files
from bertkit.finetune.linear.features import FeatureSpec
from bertkit.finetune.linear.hybrid import fit_dev_pooling, fit_stack, hybrid_model
from bertkit.finetune.linear.layer import Fitted, LinearLayer
from bertkit.finetune.linear.logits import FinetunedHead, finetuned_head_for
from bertkit.finetune.linear.model import LinearModel, LinearPart
from bertkit.finetune.linear.splits import Splits, read_splits
from bertkit.finetune.linear.training import (Targets, TfidfOptions, fit_tfidf_part, fit_vector_part, targets,
                                              training_versions)
from bertkit.finetune.linear.vectors import cached_vectors, encoding_of, model_fingerprint
from bertkit.finetune.model import hf_config_extra, model_meta
from bertkit.finetune.tasks import TASKS
from bertkit.train.saved_score import METRICS_FILE, dev_fingerprint, read_saved_metrics, saved_score
from bertkit.train.loop import say

METHODS = ("linear-probe", "hybrid")


@dataclass
class LinearJob:
    method: str                       # linear-probe | hybrid
    task: str
    model: str                        # the frozen model's folder
    train: str
    dev: Optional[str]
    output: str
    read: ReadOptions = ReadOptions()
    max_train_examples: Optional[int] = None
    max_dev_examples: Optional[int] = None
    seed: int = 0
    tfidf: TfidfOptions = TfidfOptions()
    max_length: Optional[int] = None  # tokens per text for the vectors; None: the folder's own setting


class LinearJobResult(NamedTuple):
    output: Path
    model: LinearModel
    dev: dict                         # the saved model's dev metrics
    seconds: float                    # everything after reading the files: encoding (or the cache) and fitting
    encode_seconds: float
    splits: Splits
    predicted_dev: Optional[np.ndarray]   # class indices on dev (classification), for the collapse check
    tfidf: Optional[FittedBaseline]   # the hybrid's TF-IDF part: the baseline, already fitted on this split
    kept_earlier_model: bool = False  # OUTPUT held a model that scored better on the same dev data: kept


def run_linear_job(job: LinearJob) -> LinearJobResult:
    splits = read_splits(job.task, job.train, job.dev, None, job.read, job.max_train_examples, job.max_dev_examples)
    started = time.perf_counter()
    checkpoint = load_checkpoint(job.model)
    head = finetuned_head_for(checkpoint, job.task, splits.label_names) if job.method == "hybrid" else None
    if head is not None:
        fit = _hybrid_over_finetuned(job, splits, head, started)
    else:
        fit = _over_vectors(job, splits, checkpoint, started)
    seconds = time.perf_counter() - started
    output = Path(job.output)
    metric = TASKS[job.task].main_metric
    dev_data = dev_fingerprint(job.task, job.dev, len(splits.dev))
    to_beat = saved_score(output, metric, dev_data)
    fitted, splits = fit.fitted, fit.splits
    if to_beat is not None and not fitted.dev_metrics[metric] > to_beat:
        say(f"kept the model already in {output} ({metric} {to_beat:.4g}); this {job.method} model's "
            f"{fitted.dev_metrics[metric]:.4g} did not beat it")
        earlier = (read_saved_metrics(output) or {}).get("dev", {})     # as finetune does: the kept model's
        return LinearJobResult(output, fit.model, earlier, seconds, fit.encode_seconds, splits, fit.predicted_dev,
                               fit.baseline, True)
    meta = linear_meta(fit.model, {"regularization": fit.regularization, "trained_with": training_versions()})
    meta["trained_from"] = str(job.model)

    def write_extra(tmp: Path) -> None:
        write_linear_files(tmp, fit.model)

    if head is None:     # the frozen encoder with its whole sentence pipeline: it encodes as the model it came from
        save_checkpoint(output, checkpoint.encoder, checkpoint.tokenizer, {}, meta, sentence=checkpoint.sentence,
                        write_extra=write_extra)
    else:                # the fine-tuned model's whole folder (encoder, head, task options) with the linear files
        net = head.net
        meta = model_meta(net, {**meta, "task_options": (checkpoint.meta or {}).get("task_options") or {},
                                "finetuned_from": (checkpoint.meta or {}).get("finetuned_from")})
        save_checkpoint(output, net.encoder, checkpoint.tokenizer, {net.head_key: net.head}, meta,
                        hf_config_extra(net), sentence=checkpoint.sentence, write_extra=write_extra)
    write_json(output / METRICS_FILE, {
        "dev": fitted.dev_metrics, "metric_for_best": metric, "dev_data": dev_data, "method": job.method,
        "seconds": seconds, "encode_seconds": fit.encode_seconds, "train_examples": len(splits.train),
        "regularization": fit.regularization})
    encoded = ("the fine-tuned model's dev logits computed" if head is not None
               else "encoded (or read from the cache)")
    print(f"bertkit: {job.method}: {len(splits.train):,} training rows, {encoded} in {fit.encode_seconds:.0f} s, "
          f"fitted in {seconds - fit.encode_seconds:.0f} s", file=sys.stderr)
    return LinearJobResult(output, fit.model, fitted.dev_metrics, seconds, fit.encode_seconds, splits,
                           fit.predicted_dev, fit.baseline)


class _Fit(NamedTuple):
    model: LinearModel
    fitted: Fitted                    # the last stage: the probe's layer or the stacker
    regularization: dict
    splits: Splits                    # with the label order the model uses
    encode_seconds: float
    predicted_dev: Optional[np.ndarray]
    baseline: Optional[FittedBaseline]


def _over_vectors(job: LinearJob, splits: Splits, checkpoint, started: float) -> _Fit:
    """linear-probe, or the hybrid over the frozen model's vectors (out-of-fold stacking, hybrid.py)."""
    encoding = encoding_of(checkpoint, job.max_length)
    pairs = job.task == "pair-classification"
    cache = Path(job.output) / "run" / "vectors"
    model_hash = model_fingerprint(Path(job.model))
    train_vectors = cached_vectors(cache, checkpoint, splits.train, encoding, pairs, model_hash, "train")
    dev_vectors = cached_vectors(cache, checkpoint, splits.dev, encoding, pairs, model_hash, "dev")
    encode_seconds = time.perf_counter() - started
    vector_fit = fit_vector_part(job.task, train_vectors, dev_vectors, splits.y, splits.num_labels, encoding, job.seed)
    baseline = None
    if job.method == "linear-probe":
        parts = [vector_fit]
        model = LinearModel("linear-probe", job.task, splits.label_names, pairs, [vector_fit.part])
        fitted, regularization = vector_fit.fitted, {"C": vector_fit.fitted.regularization}
    else:
        tfidf_fit, baseline = _tfidf(job, splits)
        parts = [tfidf_fit, vector_fit]
        # the dev features are built once, by the fits (each part's dev_scores), not again for the stack and the
        # collapse check (tests/finetune/linear/test_linear_methods.py counts the TF-IDF transforms)
        fitted = fit_stack(job.task, parts, splits.y, splits.num_labels, [p.dev_scores for p in parts], job.seed)
        model = hybrid_model(job.task, splits.label_names, pairs, parts, fitted)
        regularization = {"tfidf": tfidf_fit.fitted.regularization, "vectors": vector_fit.fitted.regularization,
                          "stack": fitted.regularization}
    predicted = None if job.task == "regression" else model.combine([p.dev_scores for p in parts]).argmax(-1)
    return _Fit(model, fitted, regularization, splits, encode_seconds, predicted, baseline)


def _hybrid_over_finetuned(job: LinearJob, splits: Splits, head: FinetunedHead, started: float) -> _Fit:
    """The TF-IDF part and the fine-tuned head's probabilities, pooled on dev (hybrid.py: fit_dev_pooling)."""
    names = head.label_names               # the head's order: the folder's labels stay those of its head
    splits = splits._replace(label_names=names, y=Targets(targets(job.task, splits.train, names),
                                                           targets(job.task, splits.dev, names)))
    dev_logits = head.logits(splits.dev)
    encode_seconds = time.perf_counter() - started
    tfidf_fit, baseline = _tfidf(job, splits)
    k = len(names)
    logits_part = LinearPart(FeatureSpec([], job.task == "pair-classification", None, k),
                             LinearLayer(np.eye(k, dtype=np.float32), np.zeros(k), "softmax"))
    dev_outputs = [tfidf_fit.dev_scores, logits_part.scores(splits.dev, dev_logits)]    # dev TF-IDF: built once
    fitted = fit_dev_pooling(dev_outputs, splits.y.dev, k, job.seed)
    model = LinearModel("hybrid", job.task, names, job.task == "pair-classification",
                        [tfidf_fit.part, logits_part], fitted.layer)
    regularization = {"tfidf": tfidf_fit.fitted.regularization, "tfidf_share": fitted.regularization}
    predicted = model.combine(dev_outputs).argmax(-1)
    return _Fit(model, fitted, regularization, splits, encode_seconds, predicted, baseline)


def _tfidf(job: LinearJob, splits: Splits):
    started = time.perf_counter()
    fit = fit_tfidf_part(job.task, splits.train, splits.dev, splits.y, splits.num_labels, job.tfidf, job.seed)
    baseline = FittedBaseline(LinearModel("tfidf", job.task, splits.label_names, job.task == "pair-classification",
                                          [fit.part]), fit.fitted, time.perf_counter() - started)
    return fit, baseline
