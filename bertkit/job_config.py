"""The section every training job's config shares, `train: TrainConfig` (the training loop's settings): a plain
dataclass with no torch, so that the command line builds flags from the job configs that nest it (cli/flags.py)
without loading a job. train/loop.py runs it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

ScheduleName = Literal["linear", "cosine", "constant", "slanted_triangular"]


@dataclass
class TrainConfig:
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.0               # fraction of the run; slanted_triangular's cut fraction (0 -> 0.1)
    warmup_steps: Optional[int] = None      # overrides warmup_ratio
    schedule: ScheduleName = "linear"
    max_steps: Optional[int] = None         # optimizer steps; else epochs x batches per epoch
    epochs: int = 1                         # used when neither max_steps nor time_budget is set
    time_budget: Optional[str] = None       # "30m": the schedule is fitted to wall-clock time (Cramming)
    grad_accum: int = 1
    clip_norm: Optional[float] = 1.0
    eval_every: int = 0                     # steps; 0 = at the end of each epoch
    save_every: int = 0                     # steps; 0 = only at the end (and at step 0, for roll-back)
    checkpoint_on_eval: bool = False        # also save the state after each evaluation (what resume continues)
    log_every: int = 1
    seed: int = 0
    device: str = "auto"
    bf16: bool = True                       # autocast on CUDA only
    cpu_bf16: bool = False                  # and on CPU too (fast with AMX / avx512_bf16; see runtime.autocast)
    layerwise_lr_decay: Optional[float] = None
    head_lr: Optional[float] = None         # lr of the parameters train(is_head=...) names; None: lr like the rest
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    output_dir: Optional[str] = None        # log.jsonl, loss.png, checkpoint/training_state.safetensors
    resume: bool = False
    metric_for_best: Optional[str] = None   # an evaluate() key
    greater_is_better: Optional[bool] = None  # None: False for names containing "loss", else True
    early_stopping_patience: Optional[int] = None  # evaluations without improvement
    early_stopping_start: float = 0.0       # fraction of the run before which it never stops early (Keras'
                                            # start_from_epoch): a model still on its first plateau is not done
    best_to_beat: Optional[float] = None    # the score of a model saved earlier: on_best only for better ones
    max_rollbacks: int = 3
    rollback_lr_factor: float = 0.5
    progress_bar: bool = True
    find_unused_parameters: bool = False    # DDP option for models with branches unused by the loss
