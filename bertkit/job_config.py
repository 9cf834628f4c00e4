"""The sections every training job's config shares: `train: TrainConfig` (the loop's settings) and `data: JobData`
(the training / dev files and how they are read), plain dataclasses with no torch so the command line builds its
flags from them (cli/flags.py) without loading a job.

A job config is `model / data / task-or-objective / train`: FinetuneConfig, the loop jobs' LoopJobConfig (prompt,
seq2seq, rerank, simbert), SimCSEConfig, DistillConfig and PretrainConfig nest these sections, each with its own
defaults (a `default_factory`), and train/fit.py reads `config.train`. FLAT_KEYS keeps the flat spellings of the
configs before the sections: short flags (`--lr`, `--train`, `--batch-size`), and deprecated top-level TOML keys
and overrides (`lr = 1e-4`), which the loader (bertkit/config.py) moves into their section with one warning.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass
from typing import Literal, Optional

from bertkit.errors import ConfigError

ScheduleName = Literal["linear", "cosine", "constant", "slanted_triangular"]
Precision = Literal["auto", "fp32", "bf16"]


def check_ranges(section: typing.Any, rules: dict[str, tuple[float, float, bool]]) -> None:
    """ConfigError (one line, exit 2 from the CLI) for the first field out of its range, before anything is read,
    built or written: rules are name -> (low, high, low_inclusive); None (the recipe's choice) always passes.
    A negative batch size or lr would otherwise run (a loop that never ends, a model that overwrites a good one)."""
    for name, (low, high, inclusive) in rules.items():
        value = getattr(section, name)
        if value is None or isinstance(value, bool):
            continue
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value > high \
                or value < low or (value == low and not inclusive):
            bound = f"{'>=' if inclusive else '>'} {low:g}" + (f" and <= {high:g}" if high != math.inf else "")
            raise ConfigError(f"{name} must be a number {bound}, got {value}")


POSITIVE, AT_LEAST_ONE, NON_NEGATIVE = (0.0, math.inf, False), (1, math.inf, True), (0.0, math.inf, True)
FRACTION = (0.0, 1.0, True)
MAX_LENGTH = (3, math.inf, True)       # tokens per row: [CLS], one token, [SEP]


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
    grad_accum: int = 1                     # micro-batches per optimizer step
    clip_norm: Optional[float] = 1.0
    eval_every: int = 0                     # steps; 0 = at the end of each epoch
    save_every: int = 0                     # steps between training states, which resume continues from; 0 = only
                                            # at the end (and at step 0, for roll-back)
    checkpoint_on_eval: bool = False        # also save the state after each evaluation (what resume continues)
    log_every: int = 1
    seed: int = 0
    device: str = "auto"
    # auto: bf16 autocast on CUDA only; bf16: on CPU too (fast with AMX / avx512_bf16); fp32: never
    precision: Precision = "auto"
    layerwise_lr_decay: Optional[float] = None   # lr x d per layer below the top (e.g. 0.9)
    head_lr: Optional[float] = None         # lr of the parameters train(is_head=...) names; None: lr like the rest
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    output_dir: Optional[str] = None        # log.jsonl, loss.png, checkpoint/training_state.safetensors
    resume: bool = False                    # continue an interrupted run from its last saved training state
    metric_for_best: Optional[str] = None   # an evaluate() key
    greater_is_better: Optional[bool] = None  # None: False for names containing "loss", else True
    tie_breaker: Optional[str] = None       # an evaluate() key, lower is better (a dev loss), that decides between
                                            # evaluations equal in metric_for_best (a small dev set ties often)
    early_stopping_patience: Optional[int] = None  # evaluations without improvement
    early_stopping_start: float = 0.0       # fraction of the run before which it never stops early (Keras'
                                            # start_from_epoch): a model still on its first plateau is not done
    best_to_beat: Optional[float] = None    # the score of a model saved earlier: on_best only for better ones
    max_rollbacks: int = 3
    rollback_lr_factor: float = 0.5
    progress_bar: bool = True
    find_unused_parameters: bool = False    # DDP option for models with branches unused by the loss

    def __post_init__(self) -> None:
        check_ranges(self, {"lr": POSITIVE, "weight_decay": NON_NEGATIVE, "warmup_ratio": FRACTION,
                            "warmup_steps": NON_NEGATIVE, "max_steps": AT_LEAST_ONE, "epochs": NON_NEGATIVE,
                            "grad_accum": AT_LEAST_ONE, "clip_norm": NON_NEGATIVE, "eval_every": NON_NEGATIVE,
                            "save_every": NON_NEGATIVE, "log_every": AT_LEAST_ONE, "layerwise_lr_decay": POSITIVE,
                            "head_lr": POSITIVE, "adam_beta1": (0.0, 1.0, True), "adam_beta2": (0.0, 1.0, True),
                            "adam_eps": POSITIVE, "early_stopping_patience": NON_NEGATIVE,
                            "early_stopping_start": FRACTION, "max_rollbacks": NON_NEGATIVE,
                            "rollback_lr_factor": (0.0, 1.0, False)})


@dataclass
class JobData:
    train: str = ""                       # training file
    dev: Optional[str] = None             # dev file, evaluated every epoch (or eval_every steps)
    batch_size: int = 32                  # training rows per micro-batch
    eval_batch_size: int = 64
    max_length: Optional[int] = None      # tokens per row
    max_train_examples: Optional[int] = None   # first N rows only (quick runs, subsets)
    max_dev_examples: Optional[int] = None
    encoding: str = "utf-8"

    def __post_init__(self) -> None:
        check_ranges(self, {"batch_size": AT_LEAST_ONE, "eval_batch_size": AT_LEAST_ONE,
                            "max_length": MAX_LENGTH,
                            "max_train_examples": AT_LEAST_ONE, "max_dev_examples": AT_LEAST_ONE})


# set by fit for each run (the run folder, the job's metric, the saved model's score): no flags for them
FIT_SET = frozenset({"train.output_dir", "train.metric_for_best", "train.best_to_beat", "train.tie_breaker"})

_TRAIN_KEYS = ("lr", "epochs", "seed", "warmup_ratio", "weight_decay", "schedule", "clip_norm", "grad_accum",
               "eval_every", "early_stopping_patience", "max_steps", "time_budget", "layerwise_lr_decay", "head_lr",
               "save_every", "resume", "precision", "device", "progress_bar")
_DATA_KEYS = ("train", "dev", "batch_size", "eval_batch_size", "max_length", "max_train_examples",
              "max_dev_examples", "encoding", "skip_bad_rows", "bucket_by_length")
# flat name (before the sections) -> its field now; one table for the short flags and the deprecated keys
FLAT_KEYS: dict[str, str] = {**{name: f"train.{name}" for name in _TRAIN_KEYS},
                             **{name: f"data.{name}" for name in _DATA_KEYS},
                             "max_examples": "data.max_train_examples"}   # simcse's spelling


def has_field(cls: type, dotted: str) -> bool:
    """`cls` has the leaf field `dotted` ("data.train"; not a section)."""
    for part in dotted.split("."):
        if not dataclasses.is_dataclass(cls):
            return False
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return False
        cls = hints[part]
    return not dataclasses.is_dataclass(cls)


# TrainConfig's switches before `precision`: each old (key, value) -> the precision it meant
OLD_PRECISION_SWITCHES = {("bf16", False): "fp32", ("bf16", True): "auto", ("cpu_bf16", True): "bf16",
                          ("cpu_bf16", False): "auto"}


@functools.lru_cache(maxsize=None)
def flat_keys(cls: type) -> dict[str, str]:
    """The FLAT_KEYS of the config class `cls`: those whose field it has, under a name that is not one of its own
    leaf fields (`train` stays the short name of data.train beside the `train` section)."""
    return {old: new for old, new in FLAT_KEYS.items() if has_field(cls, new) and not has_field(cls, old)}


def short_flags(cls: type) -> dict[str, str]:
    """flat_keys as add_config_flags' aliases: {"batch-size": "data.batch_size", "lr": "train.lr", ...}."""
    return {old.replace("_", "-"): new for old, new in flat_keys(cls).items()}


T = typing.TypeVar("T")


def job_config(cls: type[T], **values: typing.Any) -> T:
    """A job config from keyword values, the flat names of FLAT_KEYS put in their section (no warning: the Python
    spelling of the short flags): job_config(FinetuneConfig, model="m", train="t.jsonl", lr=1e-4) is
    FinetuneConfig(model="m", data=FinetuneData(train="t.jsonl"), train=FinetuneTrain(lr=1e-4)). A section given
    whole (train=TrainConfig(...)) is taken as it is."""
    keys, hints = flat_keys(cls), typing.get_type_hints(cls)
    top: dict[str, typing.Any] = {}
    sections: dict[str, dict[str, typing.Any]] = {}
    for name, value in values.items():
        own = name in hints and (not dataclasses.is_dataclass(hints[name]) or dataclasses.is_dataclass(value))
        if name in keys and not own:
            section, leaf = keys[name].split(".")
            sections.setdefault(section, {})[leaf] = value
        else:
            top[name] = value
    config = cls(**top)
    return dataclasses.replace(config, **{name: dataclasses.replace(getattr(config, name), **changes)  # type: ignore
                                          for name, changes in sections.items()})
