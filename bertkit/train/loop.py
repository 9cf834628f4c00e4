"""The one training loop, shared by pre-training, fine-tuning, embedding training and distillation.

A job brings a model, `loss_fn(model, batch) -> (loss, {name: float})` and a resumable batch source; the
loop owns everything else: AdamW groups and the lr schedule, gradient accumulation and clipping, bf16
autocast on CUDA, DDP under torchrun, periodic evaluation with best-model and early-stopping callbacks,
log.jsonl / loss.png / a progress bar, atomic checkpoints with exact resume, and roll-back on a
non-finite loss. loss_fn must call `model(...)` (under DDP that is the wrapper, which syncs gradients).
"""
from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import nn
from tqdm.auto import tqdm

from bertkit.progress import clock, quiet, show_progress
from bertkit.errors import BertkitError, CheckpointError
from bertkit.model.precision import inference_only
from bertkit.runtime import autocast, distributed_env, init_distributed, pick_device, rng_state, seed_everything, set_rng_state
from bertkit.train import distributed as dist_
from bertkit.train.batches import BatchSource, to_device
from bertkit.train.checkpointing import load_state, save_state, state_path
from bertkit.train.log import JsonlLog, plot_loss
from bertkit.job_config import TrainConfig
from bertkit.train.optim import Schedule, build_optimizer, encoder_layer_of, parse_duration

LossFn = Callable[[nn.Module, Any], tuple[torch.Tensor, dict[str, float]]]
# Metrics summed (not averaged) over micro-batches and ranks; "tokens" also gives tokens/s in the log.
SUMMED_METRICS = ("tokens",)


@dataclass
class TrainResult:
    steps: int
    epochs: int                             # completed passes over the data
    elapsed_s: float
    stop_reason: str                        # max_steps | time_budget | epochs | early_stopping
    losses: list[float] = field(default_factory=list)        # per optimizer step, this call only
    last_eval: dict[str, float] = field(default_factory=dict)
    best_metric: Optional[float] = None
    best_eval: dict[str, float] = field(default_factory=dict)
    rollbacks: int = 0
    clock_lead: float = 0.0                 # with a time budget and a step count: how far the budget's share of the
                                            # run got ahead of the steps' share, at most (> 0: the clock drove the lr)


def greater_is_better(config: TrainConfig) -> Optional[bool]:
    """Whether a higher config.metric_for_best is better: as set, else False for names containing "loss"."""
    if config.greater_is_better is not None or not config.metric_for_best:
        return config.greater_is_better
    return "loss" not in config.metric_for_best


def say(message: str) -> None:
    if not quiet():
        tqdm.write(f"bertkit: {message}", file=sys.stderr)


PROGRESS_LINE_S = 30.0     # where no bar is drawn: a progress line at most this often


class ProgressLines:
    """Training progress where no bar is drawn (stderr not a terminal: logs, pipes, CI; or --no-progress): a
    plain line at most every PROGRESS_LINE_S seconds with the step, the loss, the speed and the time left. A bar
    in a log file is a wall of carriage returns. None under --quiet (say)."""

    def __init__(self, enabled: bool):
        self.enabled, self.last = enabled, time.perf_counter()

    def update(self, schedule, total: Optional[int], loss: float, step_s: float) -> None:
        now = time.perf_counter()
        if not self.enabled or now - self.last < PROGRESS_LINE_S:
            return
        self.last, done = now, schedule.progress()
        left = f", about {clock(schedule.elapsed_s * (1 - done) / done)} left" if 0 < done < 1 else ""
        say(f"step {schedule.step}{f'/{total}' if total else ''} ({done:.0%}), loss {loss:.4f}, "
            f"{step_s:.2f} s/step{left}")


def train(model: nn.Module, loss_fn: LossFn, batches: BatchSource, config: TrainConfig,
          evaluate: Optional[Callable[[nn.Module], dict[str, float]]] = None,
          on_best: Optional[Callable[[nn.Module, dict[str, float]], None]] = None,
          on_epoch_start: Optional[Callable[[nn.Module, int], None]] = None,
          on_checkpoint: Optional[Callable[[nn.Module, int], None]] = None,
          layer_of: Callable[[str], Optional[int]] = encoder_layer_of,
          is_head: Optional[Callable[[str], bool]] = None) -> TrainResult:
    """Train `model` in place. Callbacks get the unwrapped model and run on rank 0 only, except
    on_epoch_start (every rank, at each epoch start and again after a resume; make it idempotent).
    `is_head(parameter name)` marks the parameters that train at config.head_lr."""
    reason = inference_only(model)
    if reason:
        raise BertkitError(f"this model cannot be trained: {reason}")
    device = pick_device(config.device)
    rank, world = init_distributed(device)
    local_rank = distributed_env()[2]
    main = rank == 0
    seed_everything(config.seed + rank)    # dropout differs per rank; data order comes from the batch source
    model.to(device)
    net: nn.Module = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if device.type == "cuda" else None,
            find_unused_parameters=config.find_unused_parameters)
    optimizer = build_optimizer(model, config.lr, config.weight_decay, (config.adam_beta1, config.adam_beta2),
                                config.adam_eps, config.layerwise_lr_decay, layer_of, config.head_lr, is_head)
    total = _total_steps(config, batches)
    schedule = Schedule(config.schedule, total, parse_duration(config.time_budget) if config.time_budget else None,
                        config.warmup_ratio, config.warmup_steps)
    out = Path(config.output_dir) if config.output_dir else None
    ckpt = state_path(out) if out else None
    greater = greater_is_better(config)
    run = {"epoch": 0, "best": config.best_to_beat, "best_eval": {}, "bad_evals": 0, "rollbacks": 0}
    saved_at = [-1]                                       # the step of the last checkpoint

    def checkpoint() -> None:
        saved_at[0] = schedule.step
        rngs = dist_.gather_objects(rng_state())          # collective: every rank calls it
        if main and ckpt is not None:
            save_state(ckpt, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                              "schedule": schedule.state_dict(), "data": batches.state_dict(),
                              "rng": rngs, "run": dict(run), "world_size": world})
            if on_checkpoint is not None:
                on_checkpoint(model, schedule.step)

    def restore(state: dict) -> None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        batches.load_state_dict(state["data"])
        set_rng_state(state["rng"][rank] if len(state["rng"]) == world else state["rng"][0])
        best, best_eval = run["best"], run["best_eval"]
        run.update(state["run"])
        # A better score known now (found after that checkpoint, or best_to_beat) is never forgotten: a
        # roll-back or resume must not let a worse model replace the one saved for it.
        if _improves(best, run["best"], greater):
            run.update(best=best, best_eval=best_eval)

    if config.resume:
        state = load_state(ckpt) if ckpt is not None else None
        if state is None:
            raise BertkitError(f"--resume: no training state at {ckpt or '(no output_dir)'}; start without --resume")
        try:
            restore(state)
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as err:   # another run's, or tampered
            raise CheckpointError(f"{ckpt}: the training state does not fit this run ({type(err).__name__}: "
                                  f"{str(err)[:300]}); resume with the settings that wrote it, or delete it to start "
                                  "over") from None
        if main:
            say(f"resumed from {ckpt} at step {schedule.step}")
    elif ckpt is not None:
        checkpoint()                                      # the step-0 state a NaN can roll back to

    log = JsonlLog(out, enabled=main, fresh=not config.resume)    # a new run into an old folder: a new log
    # a bar on a terminal (or where --progress asks for one); plain lines elsewhere
    drawn = main and show_progress(config.progress_bar and sys.stderr.isatty())
    bar = tqdm(total=total, initial=schedule.step, disable=not drawn, unit="step", dynamic_ncols=True,
               file=sys.stderr)
    lines = ProgressLines(main and not drawn and config.progress_bar)
    result = TrainResult(steps=schedule.step, epochs=run["epoch"], elapsed_s=schedule.elapsed_s, stop_reason="")
    net.train()
    micro, sums, started = 0, {}, time.perf_counter()
    stop: Optional[str] = _stop_reason(config, schedule, run)

    def run_eval() -> Optional[str]:
        metrics = None
        if main:
            model.eval()
            with torch.no_grad(), autocast(device, config.precision != "fp32", cpu=config.precision == "bf16"):
                metrics = {k: float(v) for k, v in evaluate(model).items()}
            model.train()
        metrics = dist_.broadcast_object(metrics)
        result.last_eval = metrics
        log.write({"step": schedule.step, "epoch": run["epoch"], "eval": metrics})
        run["eval_step"] = schedule.step
        if main:
            bar.write(f"step {schedule.step}: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()), file=sys.stderr)
        key, stopping = config.metric_for_best, False
        if key is not None:
            if key not in metrics:
                raise BertkitError(f"metric_for_best {key!r} is not among the evaluation metrics {sorted(metrics)}")
            if _improves(metrics[key], run["best"], greater) or (
                    metrics[key] == run["best"] and _wins_tie(metrics, run["best_eval"], config.tie_breaker)):
                run.update(best=metrics[key], best_eval=metrics, bad_evals=0)
                if main and on_best is not None:
                    on_best(model, metrics)
            else:
                run["bad_evals"] += 1
                patience = config.early_stopping_patience
                begun = schedule.progress() >= config.early_stopping_start
                stopping = patience is not None and run["bad_evals"] >= patience and begun
        if config.checkpoint_on_eval:
            checkpoint()
        return "early_stopping" if stopping else None

    while stop is None:
        if on_epoch_start is not None:
            on_epoch_start(model, run["epoch"])
        rolled_back = False
        for batch in batches:
            micro += 1
            sync = micro % config.grad_accum == 0
            with (net.no_sync() if world > 1 and not sync else contextlib.nullcontext()):
                with autocast(device, config.precision != "fp32", cpu=config.precision == "bf16"):
                    loss, metrics = loss_fn(net, to_device(batch, device))
                (loss / config.grad_accum).backward()
            for key, value in [("loss", float(loss.detach()))] + list(metrics.items()):
                sums[key] = sums.get(key, 0.0) + float(value)
            if not sync:
                continue
            keys = sorted(sums)
            values = [sums[k] if k in SUMMED_METRICS else sums[k] / config.grad_accum for k in keys]
            values = dict(zip(keys, dist_.mean_over_ranks(values, device)))
            for k in SUMMED_METRICS:
                if k in values:
                    values[k] *= world
            sums = {}
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm or float("inf"))
            if not (math.isfinite(values["loss"]) and math.isfinite(float(norm))):
                _rollback(values["loss"], schedule, optimizer, ckpt, run, config, restore, log)
                result.rollbacks = run["rollbacks"]
                bar.n = schedule.step
                rolled_back = True
                break
            lr = schedule.apply(optimizer)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            now = time.perf_counter()
            step_s, started = now - started, now
            schedule.step += 1
            schedule.elapsed_s = dist_.broadcast_float(schedule.elapsed_s + step_s, device)
            result.clock_lead = max(result.clock_lead, schedule.clock_lead())
            result.losses.append(values["loss"])
            bar.update(1)
            lines.update(schedule, total, values["loss"], step_s)
            if main and (schedule.step % config.log_every == 0 or schedule.step == 1):
                record = {"step": schedule.step, "epoch": run["epoch"], "lr": lr, "grad_norm": float(norm),
                          "elapsed_s": round(schedule.elapsed_s, 3), **values}
                if "tokens" in values:
                    record["tokens_per_s"] = values["tokens"] / max(step_s, 1e-9)
                log.write(record)
                bar.set_postfix(loss=f"{values['loss']:.4f}", lr=f"{lr:.2e}", refresh=False)
            if evaluate is not None and config.eval_every and schedule.step % config.eval_every == 0:
                stop = run_eval()
            if config.save_every and schedule.step % config.save_every == 0 and saved_at[0] != schedule.step:
                checkpoint()
            stop = stop or _stop_reason(config, schedule, run)
            if stop:
                break
        if rolled_back:
            continue
        if stop is None:                                   # the epoch ran to its end
            run["epoch"] += 1
            if evaluate is not None and not config.eval_every:
                stop = run_eval()
            stop = stop or _stop_reason(config, schedule, run)

    if evaluate is not None and run.get("eval_step") != schedule.step:
        stop = run_eval() or stop                         # a final evaluation of the finished model
    if saved_at[0] != schedule.step:
        checkpoint()
    bar.close()
    log.close()
    if main and log.path is not None:
        note = plot_loss(log.path, out / "loss.png")
        if note:
            say(note)
    result.steps, result.epochs, result.elapsed_s, result.stop_reason = schedule.step, run["epoch"], schedule.elapsed_s, stop
    result.best_metric, result.best_eval = run["best"], run["best_eval"]
    return result


def _improves(value: Optional[float], best: Optional[float], greater: Optional[bool]) -> bool:
    return value is not None and (best is None or (value > best if greater else value < best))


def _wins_tie(metrics: dict[str, float], best: dict[str, float], key: Optional[str]) -> bool:
    """An evaluation equal to the best in metric_for_best replaces it when its `key` (a loss) is lower; a best
    without that key (the model already saved, known by its score alone) keeps its place."""
    return key is not None and key in metrics and key in best and metrics[key] < best[key]


def _total_steps(config: TrainConfig, batches: BatchSource) -> Optional[int]:
    if config.max_steps is not None:
        return config.max_steps
    if config.time_budget:
        return None
    try:
        per_epoch = len(batches)  # type: ignore[arg-type]
    except TypeError:
        raise BertkitError("set max_steps or time_budget: the batch source has no length to count epochs") from None
    return max(1, math.ceil(config.epochs * per_epoch / config.grad_accum))


def _stop_reason(config: TrainConfig, schedule: Schedule, run: dict) -> Optional[str]:
    if config.max_steps is not None and schedule.step >= config.max_steps:
        return "max_steps"
    if schedule.time_budget_s and schedule.elapsed_s >= schedule.time_budget_s:
        return "time_budget"
    if config.max_steps is None and not config.time_budget and run["epoch"] >= config.epochs:
        return "epochs"
    return None


def _rollback(loss: float, schedule: Schedule, optimizer, ckpt: Optional[Path], run: dict, config: TrainConfig,
              restore: Callable[[dict], None], log: JsonlLog) -> None:
    """A NaN/inf loss or gradient: reload the last good state and continue with a lower lr."""
    optimizer.zero_grad(set_to_none=True)
    bad_step = schedule.step + 1
    state = load_state(ckpt) if ckpt is not None else None
    if state is None or run["rollbacks"] >= config.max_rollbacks:
        why = "no checkpoint to roll back to (set output_dir)" if state is None else \
            f"still not finite after {run['rollbacks']} roll-backs"
        raise BertkitError(f"step {bad_step}: loss is {loss}; {why}; lower the lr (now x{schedule.lr_scale:g}) "
                           "or check the data")
    scale = schedule.lr_scale * config.rollback_lr_factor
    rollbacks = run["rollbacks"] + 1
    restore(state)
    schedule.lr_scale = scale
    run["rollbacks"] = rollbacks
    say(f"step {bad_step}: loss is {loss}; rolled back to the checkpoint of step {schedule.step} "
        f"and lowered the learning rate to x{scale:g} of the schedule")
    log.write({"step": bad_step, "event": "rollback", "loss": loss, "to_step": schedule.step, "lr_scale": scale})

