"""`bertkit baseline`: TF-IDF + a linear model, the first thing to compare any fine-tuned model against.

Word 1-2-grams and char_wb 2-5-grams (Chinese: characters 1-3 plus jieba words), sublinear tf, L2 per
block; multinomial logistic regression (classification, pairs) or ridge regression, its regularization
chosen on dev. Pairs add the two texts' shared terms and their cosine (features.py). The output is a model
folder that `bertkit evaluate`, `bertkit predict`, `bertkit.load(...).predict` and `serve /predict` read
like any other; metrics.json holds dev (and test) metrics from the same code `bertkit evaluate` runs.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple, Optional

from bertkit.atomic_write import write_json
from bertkit.checkpoints import save_folder
from bertkit.config import save_config
from bertkit.data.readers import ReadOptions
from bertkit.errors import BertkitError
from bertkit.finetune.linear.folder import linear_meta, write_linear_files, write_meta
from bertkit.finetune.linear.layer import Fitted, scores_metrics
from bertkit.finetune.linear.model import LinearModel
from bertkit.finetune.linear.splits import Splits, read_splits
from bertkit.finetune.linear.training import TfidfFit, TfidfOptions, fit_tfidf_part, training_versions
from bertkit.train.saved_score import METRICS_FILE


@dataclass
class BaselineConfig:
    task: Literal["classification", "pair-classification", "regression"] = "classification"
    train: str = ""
    dev: Optional[str] = None
    test: Optional[str] = None
    output: str = ""
    tfidf: TfidfOptions = field(default_factory=TfidfOptions)
    encoding: str = "utf-8"
    skip_bad_rows: bool = False
    seed: int = 0


class BaselineResult(NamedTuple):
    output: Optional[Path]
    model: LinearModel
    dev: dict                      # metrics at the chosen regularization
    test: Optional[dict]
    seconds: float                 # reading the files excluded
    regularization: float          # the chosen C (classification) or alpha (regression)
    features: int


class FittedBaseline(NamedTuple):
    model: LinearModel
    fitted: Fitted
    seconds: float


def fit_baseline(splits: Splits, options: TfidfOptions = TfidfOptions(), seed: int = 0) -> tuple[LinearModel, TfidfFit]:
    """The TF-IDF model of `splits` (train fitted, dev for the regularization), in memory."""
    fit = fit_tfidf_part(splits.task, splits.train, splits.dev, splits.y, splits.num_labels, options, seed)
    model = LinearModel("tfidf", splits.task, splits.label_names, splits.task == "pair-classification", [fit.part])
    return model, fit


def save_linear_folder(output: str | Path, model: LinearModel, extra_meta: Optional[dict] = None) -> Path:
    """A TF-IDF model's own folder (no encoder), swapped into place whole."""
    def write(tmp: Path) -> None:
        write_meta(tmp, linear_meta(model, extra_meta))
        write_linear_files(tmp, model)
    return save_folder(output, write)


def run_baseline(config: BaselineConfig, splits: Optional[Splits] = None, save: bool = True,
                 prefit: Optional[FittedBaseline] = None) -> BaselineResult:
    """Read (unless `splits` are given), fit (unless `prefit` holds the model already fitted on these splits),
    save the folder with metrics.json, evaluate on test if given."""
    if save and not config.output:
        raise BertkitError("baseline needs --output (the model folder to write)")
    if splits is None:
        if not config.train:
            raise BertkitError("baseline needs --train and --dev")
        read = ReadOptions(config.encoding, config.skip_bad_rows,
                           Path(config.output + ".rejects.jsonl") if config.skip_bad_rows else None, skip_hint=True)
        splits = read_splits(config.task, config.train, config.dev, config.test, read)
    if prefit is None:
        started = time.perf_counter()
        model, fit = fit_baseline(splits, config.tfidf, config.seed)
        prefit = FittedBaseline(model, fit.fitted, time.perf_counter() - started)
    model, fitted, seconds = prefit
    test = None
    if splits.test is not None:
        test = scores_metrics(splits.task, model.scores(splits.test), splits.test_targets(), splits.num_labels)
    features = model.parts[0].layer.weight.shape[0]
    name = "alpha" if splits.task == "regression" else "C"
    output = None
    if save:
        output = Path(config.output)
        extra = {"regularization": {name: fitted.regularization}, "trained_with": training_versions()}
        save_linear_folder(output, model, extra)
        save_config(config, output / "run")
        write_json(output / METRICS_FILE, {
            "dev": fitted.dev_metrics, "test": test, "method": "tfidf", "seconds": seconds,
            "features": features, "train_examples": len(splits.train), name: fitted.regularization,
            "grid": [{name: value, **metrics} for value, metrics in fitted.grid]})
    print(f"bertkit: TF-IDF baseline: {features:,} features, {name}={fitted.regularization:g} chosen on dev, "
          f"fitted in {seconds:.1f} s", file=sys.stderr)
    return BaselineResult(output, model, fitted.dev_metrics, test, seconds, fitted.regularization, features)
