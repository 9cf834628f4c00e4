"""`finetune --method linear-probe | hybrid`: minutes on a CPU instead of a fine-tuning run.

linear-probe: encode train and dev once with the frozen model (cached in OUTPUT/run/vectors), fit a
logistic (ridge) regression on the vectors, its C chosen on dev.
hybrid: that part and the TF-IDF baseline's, stacked (hybrid.py).
The output folder is the frozen encoder's checkpoint (it encodes exactly as the model it came from) plus
the linear model's files; `bertkit evaluate / predict`, `bertkit.load(...).predict` and `serve /predict`
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
from bertkit.finetune.linear.hybrid import fit_stack, hybrid_model
from bertkit.finetune.linear.model import LinearModel
from bertkit.finetune.linear.splits import Splits, read_splits
from bertkit.finetune.linear.training import TfidfOptions, fit_tfidf_part, fit_vector_part, training_versions
from bertkit.finetune.linear.vectors import cached_vectors, encoding_of, model_fingerprint
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
        tfidf_started = time.perf_counter()
        tfidf_fit = fit_tfidf_part(job.task, splits.train, splits.dev, splits.y, splits.num_labels, job.tfidf, job.seed)
        baseline = FittedBaseline(LinearModel("tfidf", job.task, splits.label_names, pairs, [tfidf_fit.part]),
                                  tfidf_fit.fitted, time.perf_counter() - tfidf_started)
        parts = [tfidf_fit, vector_fit]
        # the dev features are built once, by the fits (each part's dev_scores), not again for the stack and the
        # collapse check (tests/finetune/linear/test_linear_methods.py counts the TF-IDF transforms)
        fitted = fit_stack(job.task, parts, splits.y, splits.num_labels, [p.dev_scores for p in parts], job.seed)
        model = hybrid_model(job.task, splits.label_names, pairs, parts, fitted)
        regularization = {"tfidf": tfidf_fit.fitted.regularization, "vectors": vector_fit.fitted.regularization,
                          "stack": fitted.regularization}
    seconds = time.perf_counter() - started
    output = Path(job.output)
    metric = TASKS[job.task].main_metric
    dev_data = dev_fingerprint(job.task, job.dev, len(splits.dev))
    to_beat = saved_score(output, metric, dev_data)
    predicted = None if job.task == "regression" else model.combine([p.dev_scores for p in parts]).argmax(-1)
    if to_beat is not None and not fitted.dev_metrics[metric] > to_beat:
        say(f"kept the model already in {output} ({metric} {to_beat:.4g}); this {job.method} model's "
            f"{fitted.dev_metrics[metric]:.4g} did not beat it")
        earlier = (read_saved_metrics(output) or {}).get("dev", {})     # as finetune does: the kept model's
        return LinearJobResult(output, model, earlier, seconds, encode_seconds, splits, predicted, baseline, True)
    meta = linear_meta(model, {"regularization": regularization, "trained_with": training_versions()})
    meta["trained_from"] = str(job.model)
    # the frozen encoder with its whole sentence pipeline: the folder encodes exactly as the model it came from
    save_checkpoint(output, checkpoint.encoder, checkpoint.tokenizer, {}, meta, sentence=checkpoint.sentence,
                    write_extra=lambda tmp: write_linear_files(tmp, model))
    write_json(output / METRICS_FILE, {
        "dev": fitted.dev_metrics, "metric_for_best": metric, "dev_data": dev_data, "method": job.method,
        "seconds": seconds, "encode_seconds": encode_seconds, "train_examples": len(splits.train),
        "regularization": regularization})
    print(f"bertkit: {job.method}: {len(splits.train):,} training rows, encoded (or read from the cache) in "
          f"{encode_seconds:.0f} s, fitted in {seconds - encode_seconds:.0f} s", file=sys.stderr)
    return LinearJobResult(output, model, fitted.dev_metrics, seconds, encode_seconds, splits, predicted, baseline)
