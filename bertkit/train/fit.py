"""fit(config, build) -> JobResult: the steps every training job shares around the loop.

A job's recipe (finetune, prompt, seq2seq, rerank, simbert, distill, SimCSE) is `build() -> Job`: a model, a batch
source, `loss_fn(model, batch)`, an optional `evaluate(model) -> {metric: value}` with the metric that picks the
best model, and `save(model, metrics)`, which writes the model folder `config.output`. Its config is
`model / data / task-or-objective / train: TrainConfig` (bertkit/job_config.py). fit owns the rest:

- seeding from config.train.seed before `build` (so the new head's weights and the data order follow the seed),
  and the `resume` check before it reads any data;
- the run record in `output/run/` (rank 0): the effective config (config.effective.json), package versions
  (versions.json), the job's own files (recipe.json, ...), the loop's log.jsonl and loss.png;
- the loop (train/loop.py) with config.train (plus the job's per-run `loop` settings), its DDP, NaN roll-back and
  the training state in `output/run/checkpoint/`, saved every `save_every` steps (and after evaluations with
  `checkpoint_on_eval`), which `resume` continues from exactly;
- best-or-last save: with `evaluate` and a `metric`, `save` runs each time the metric improves, else once at the
  end (evaluations without a metric are only logged); a model already in `output` that scored better on the same
  dev data (`best_to_beat`, train/saved_score.py) is kept;
- output/metrics.json, written (atomically) by fit alone: beside each best model, and at the close; then the
  training state (and the job's `scratch` folders) is deleted. A finished run leaves no training state: only the
  model files, metrics.json and the run record (run/: config, versions, log) remain.
"""
from __future__ import annotations

import platform
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import nn

from bertkit.atomic_write import check_folder_target, write_json
from bertkit.checkpoints.json_files import META_FILE, read_json
from bertkit.checkpoints.weights import holds_model
from bertkit.config import save_config
from bertkit.errors import BertkitError
from bertkit.job_config import flat_keys
from bertkit.folder_names import refuse_links
from bertkit.runtime import distributed_env, seed_everything
from bertkit.train import distributed as dist_
from bertkit.train.batches import BatchSource
from bertkit.train.checkpointing import load_state, state_path
from bertkit.train.loop import LossFn, TrainResult, greater_is_better, say, train
from bertkit.train.saved_score import METRICS_FILE, read_saved_metrics

RUN_DIR = "run"


@dataclass
class Job:
    model: nn.Module
    loss_fn: LossFn
    batches: BatchSource
    save: Callable[[Any, dict], None]        # (trained model, its dev metrics or {}) -> writes the folder `output`
    evaluate: Optional[Callable[[Any], dict[str, float]]] = None
    metric: Optional[str] = None             # the evaluate() key that picks the best model; None: evaluations are
                                             # only logged and the last model is saved
    best_to_beat: Optional[float] = None     # `metric` of the model already in output, on the same dev data
    tie_breaker: Optional[str] = None        # an evaluate() key, lower is better (a dev loss), that picks between
                                             # evaluations equal in `metric`; where a result lacks it, the earlier stays
    on_epoch_start: Optional[Callable[[Any, int], None]] = None
    is_head: Optional[Callable[[str], bool]] = None
    record: dict = field(default_factory=dict)           # more keys for output/metrics.json
    run_files: dict[str, Any] = field(default_factory=dict)  # more JSON files for output/run/ (name -> value)
    epoch_batches: Optional[int] = None      # batches per epoch when the recipe counted its epochs as max_steps
    config: Any = None                       # the effective config when the recipe resolved some of it (finetune's
                                             # data-sized recipe); None: the config fit was given
    loop: dict = field(default_factory=dict)  # loop settings of this run besides config.train (max_steps counted
                                             # from the batches, checkpoint_on_eval, ...)
    save_with_state: bool = False            # save(model, {"step": n}) also runs with every training state the loop
                                             # saves (pre-training: the folder matches what --resume continues); the
                                             # loop saves its last state at the final step, so that is the final save
    scratch: tuple[Path, ...] = ()           # folders built for this run only (pre-training's token shards), deleted
                                             # with the training state when the run finishes


@dataclass
class JobResult:
    output: Path
    metrics: dict                            # best dev metrics (or the last evaluation; {} without dev data)
    train_seconds: float                     # optimizer steps only (no evaluation or saving)
    epochs: float                            # epochs this run's steps make (epochs_done), 2 decimals
    steps: int
    stop_reason: str
    kept_earlier_model: bool = False         # this run did not beat the model already in `output`, which stays
                                             # (then `metrics` are that model's, and run_metrics this run's)
    loop: Optional[TrainResult] = None       # the loop's own result (losses per step, last evaluation)
    run_metrics: Optional[dict] = None       # this run's own best dev metrics (with kept_earlier_model: not saved)

    def summary(self) -> dict:
        """What `bertkit finetune` prints at the end: which model `output` holds ("kept"), and, when it kept the
        earlier one, that model's dev metrics ("previous") apart from this run's own figures ("this_run")."""
        run = {"dev": self.metrics, "epochs": self.epochs, "steps": self.steps,
               "train_seconds": round(self.train_seconds, 1)}
        if not self.kept_earlier_model:
            return {"output": str(self.output), "kept": "this run", **run}
        return {"output": str(self.output), "kept": "previous", "previous": {"dev": self.metrics},
                "this_run": {**run, "dev": self.run_metrics}}


def epochs_done(steps: int, grad_accum: int, batches: BatchSource, counted: int) -> float:
    """The epochs `steps` optimizer steps make, 2 decimals (a whole number as an int), at least the loop's count
    of epochs gone through (`counted`, which alone is known when the batches have no length)."""
    try:
        per_epoch = len(batches)  # type: ignore[arg-type]
    except TypeError:
        return counted
    done = max(counted, round(steps * grad_accum / max(per_epoch, 1), 2))
    return int(done) if float(done).is_integer() else done


def run_folder(output: str | Path) -> Path:
    return Path(output) / RUN_DIR


def check_required(config: Any, command: str, names: tuple[str, ...] = ("model", "data.train", "output")) -> None:
    """A one-line error naming the first of `names` (dotted fields) the job config lacks, as `command` spells its
    flag (data.train: --train)."""
    short = {new: old for old, new in flat_keys(type(config)).items()}
    for name in names:
        value = config
        for part in name.split("."):
            value = getattr(value, part)
        if not value:
            raise BertkitError(f"{command} needs --{short.get(name, name).replace('_', '-')}")


def check_pretraining_output(output: Path, init: Optional[str]) -> None:
    """A pre-training run (BERT or GPT) writes its model into `output` itself. A model there that is not an earlier
    pre-training run's (a fine-tuned model, a downloaded one, the --model being continued) would be replaced by the
    new weights: refused in one line. An earlier run's folder (bertkit.json's task "pretraining", or a run record
    without a task, as a GPT run leaves) may be run into again."""
    if not holds_model(output):
        return
    meta = output / META_FILE
    task = read_json(meta).get("task") if meta.is_file() else None
    if task == "pretraining" or (task is None and (run_folder(output) / "config.effective.json").is_file()):
        return
    if init is not None and output.resolve() == Path(init).resolve():
        raise BertkitError(f"--output {output} is --model's own folder, which continued pre-training would write "
                           "over; name a new --output")
    held = f"a {task} model" if isinstance(task, str) else "a model that no bertkit pre-training wrote"
    raise BertkitError(f"--output {output} holds {held}, which this run would replace; name a new folder (to "
                       f"continue pre-training that model, pass it as --model)")


def check_resume(resume: bool, output: str | Path) -> None:
    """--resume without a saved state: a one-line error, before the job reads data or builds a model (a state in
    the pickle format of earlier versions is named as such, by load_state). The run folder, which the run writes,
    appends to and deletes in, must hold its own files (refuse_links)."""
    check_folder_target(output)
    refuse_links(run_folder(output))
    saved = state_path(run_folder(output))
    if resume and not saved.is_file():
        load_state(saved)
        raise BertkitError(f"--resume: no training state at {saved}; start without --resume")


def fresh_unless_resumed(folder: Path, resume: bool) -> None:
    """A folder a run builds for itself and keeps for --resume only (the vocab a pre-training run trained, then
    listed in its Job's `scratch`): a new run into an earlier run's output starts without the earlier one's."""
    refuse_links(folder)
    if not resume and folder.is_dir() and dist_.rank() == 0:
        shutil.rmtree(folder)
    dist_.barrier()


def record_run(config: Any, run_dir: Path, files: Optional[dict[str, Any]] = None) -> None:
    """The run record: the effective config, package versions and the job's own JSON files, in run_dir."""
    refuse_links(run_dir)
    save_config(config, run_dir)
    write_json(run_dir / "versions.json", package_versions())
    for name, value in (files or {}).items():
        write_json(run_dir / name, value)


def fit(config: Any, build: Callable[[], Job | JobResult], output: str | Path | None = None) -> JobResult:
    """Seed from config.train.seed, build the job, train it with config.train, keep the best (or last) model in
    `output` (default: config.output) and record the run. `build` may return a finished JobResult instead (a job
    with nothing to train: prompt classification's zero-shot evaluation)."""
    output = Path(output if output is not None else config.output)
    run_dir = run_folder(output)
    check_resume(config.train.resume, output)
    seed_everything(config.train.seed)
    job = build()
    if isinstance(job, JobResult):
        return job
    config = job.config if job.config is not None else config
    if config.train.head_lr is not None and job.is_head is None:
        raise BertkitError("--head-lr: this job trains no new task head; use --lr")
    has_dev = job.evaluate is not None
    picks = has_dev and job.metric is not None          # the best evaluation picks the model, else the last one
    train_config = replace(config.train, **job.loop, output_dir=str(run_dir),
                           metric_for_best=job.metric if picks else None,
                           best_to_beat=job.best_to_beat if picks else None,
                           tie_breaker=job.tie_breaker if picks else None)
    main = distributed_env()[0] == 0
    if main:
        record_run(config, run_dir, job.run_files)
    evaluations: list[dict] = []

    def evaluate(model) -> dict:
        evaluations.append(job.evaluate(model))
        return evaluations[-1]

    def save_best(model, metrics: dict) -> None:
        job.save(model, metrics)
        write_json(output / METRICS_FILE, {"dev": metrics, "metric_for_best": job.metric, **job.record})

    started = time.perf_counter()
    result = train(job.model, job.loss_fn, job.batches, train_config, evaluate=evaluate if has_dev else None,
                   on_best=save_best if picks else None, on_epoch_start=job.on_epoch_start,
                   on_checkpoint=(lambda model, step: job.save(model, {"step": step})) if job.save_with_state
                   else None,
                   **({"is_head": job.is_head} if job.is_head is not None else {}))
    wall = time.perf_counter() - started
    metrics = result.best_eval or result.last_eval
    epochs = epochs_done(result.steps, train_config.grad_accum, job.batches, result.epochs)
    stop_reason = result.stop_reason
    if job.epoch_batches and stop_reason == "max_steps":     # the epochs were counted in steps
        stop_reason = "epochs"
    kept = picks and job.best_to_beat is not None and not result.best_eval   # nothing beat the saved model
    run_metrics = metrics                    # this run's own best dev metrics
    if kept:                                 # the loop kept no best of its own: this run's best evaluation
        best_of = max if greater_is_better(train_config) is not False else min
        run_metrics = best_of((e for e in evaluations if job.metric in e), key=lambda e: e[job.metric],
                              default=metrics)
    if main:
        if not picks and not job.save_with_state:
            job.save(job.model, result.last_eval)     # the last model is the one saved
        record = {"dev": run_metrics, "metric_for_best": job.metric,
                  "train_seconds": result.elapsed_s, "wall_seconds": wall, "epochs": epochs, "steps": result.steps,
                  "stop_reason": stop_reason, **job.record}
        if result.clock_lead > 0:
            record["schedule_clock_lead"] = round(result.clock_lead, 4)
        if kept:
            ours = run_metrics.get(job.metric)
            say(f"kept the model already in {output} ({job.metric} {job.best_to_beat:.4g}); the best of this run"
                f"{f', {ours:.4g},' if ours is not None else ''} did not beat it")
            earlier = read_saved_metrics(output) or {}
            metrics = earlier.get("dev", {})
            record = {**earlier, "last_run_not_saved": record}
        write_json(output / METRICS_FILE, record)
        for folder in (run_dir / "checkpoint", *job.scratch):       # resume state; the model is `output`
            shutil.rmtree(folder, ignore_errors=True)
    dist_.barrier()
    return JobResult(output, metrics, result.elapsed_s, epochs, result.steps, stop_reason, kept, result, run_metrics)


def package_versions() -> dict[str, str]:
    versions = {"python": sys.version.split()[0], "platform": platform.platform(), "torch": torch.__version__}
    for name in ("bertkit", "numpy", "tokenizers", "safetensors", "transformers"):
        try:
            versions[name] = version(name)
        except Exception:  # not installed: nothing to record
            continue
    return versions
