"""The fine-tuning job's settings, as plain dataclasses: FinetuneConfig (the job: model, task, `data` and `train`
sections) and TaskOptions (encoding and decoding, saved with the model). Plain data with no torch, so the command
line builds its flags from them (bertkit/cli/flags.py) without loading the job."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Optional

from bertkit.errors import CheckpointError, ConfigError
from bertkit.job_config import AT_LEAST_ONE, MAX_LENGTH, NON_NEGATIVE, JobData, TrainConfig, check_ranges

LONG_TEXTS = ("truncate", "head+tail")
ANY_NUMBER = (-math.inf, math.inf, True)


@dataclass(frozen=True)
class TaskOptions:
    """Task settings that shape encoding and decoding (saved in bertkit.json so predict uses the same)."""
    max_length: int = 128
    long_texts: Literal["truncate", "head+tail"] = "head+tail"  # single texts over max_length: keep both ends
    ner_stride: Optional[int] = None       # NER window overlap in sub-tokens (None: a quarter of the window)
    doc_stride: int = 128                  # QA: tokens between the starts of consecutive context windows
    max_question_length: int = 64
    max_answer_length: int = 30
    n_best: int = 20
    null_threshold: float = 0.0
    with_negative: Optional[bool] = None   # QA v2.0 no-answer; None: on when the training data has any

    def __post_init__(self) -> None:
        """Folders carry these (bertkit.json, an ONNX export's metadata) and anyone may have written them: each
        is type- and range-checked, a one-line ConfigError, before any text is encoded with it."""
        for name in ("max_length", "doc_stride", "max_question_length", "max_answer_length", "n_best", "ner_stride"):
            value = getattr(self, name)
            if not (value is None and name == "ner_stride") and (type(value) is not int):
                raise ConfigError(f"{name} must be a whole number, got {value!r}")
        if isinstance(self.null_threshold, bool) or not isinstance(self.null_threshold, (int, float)):
            raise ConfigError(f"null_threshold must be a number, got {self.null_threshold!r}")
        check_ranges(self, {"max_length": MAX_LENGTH, "doc_stride": AT_LEAST_ONE, "max_question_length": AT_LEAST_ONE,
                            "max_answer_length": AT_LEAST_ONE, "n_best": AT_LEAST_ONE, "ner_stride": NON_NEGATIVE,
                            "null_threshold": ANY_NUMBER})
        if self.long_texts not in LONG_TEXTS:
            raise ConfigError(f"long_texts must be one of {', '.join(LONG_TEXTS)}, got {self.long_texts!r}")
        if self.with_negative not in (None, True, False):
            raise ConfigError(f"with_negative must be true, false or null, got {self.with_negative!r}")

    @classmethod
    def saved(cls, meta: Optional[dict], where: object = "the folder") -> "TaskOptions":
        """The options a folder saved (bertkit.json "task_options"); the defaults for one that saved none. Keys
        this version does not know are left out; a bad value is one CheckpointError naming `where` and the key."""
        saved = (meta or {}).get("task_options") or {}
        if not isinstance(saved, dict):
            raise CheckpointError(f"{where}: task_options must be an object, got {type(saved).__name__}")
        try:
            return cls(**{k: v for k, v in saved.items() if k in cls.__dataclass_fields__})
        except ConfigError as err:
            raise CheckpointError(f"{where}: task_options.{err}") from None


Task = Literal["classification", "pair-classification", "multi-label", "regression", "ner", "qa"]


@dataclass
class FinetuneTrain(TrainConfig):
    """The loop's settings for fine-tuning; None is the default recipe's choice (recipe.py), from the data and the
    model (so is precision "auto": bf16 on CUDA and on CPUs with AMX / avx512_bf16, fp32 on other CPUs)."""
    epochs: Optional[int] = None
    lr: Optional[float] = None  # type: ignore[assignment]
    warmup_ratio: Optional[float] = None  # type: ignore[assignment]
    eval_every: Optional[int] = None  # type: ignore[assignment]  # steps; 0 = after every epoch
    early_stopping_patience: Optional[int] = None   # evaluations without improvement; 0 = never stop early
    # optimizer steps: the run and its lr schedule end at N (N wins over epochs); no default time cap then
    max_steps: Optional[int] = None
    time_budget: Optional[str] = None     # wall-clock cap, e.g. "20m" ("off": none); None: 30m when epochs are unset
    seed: int = 42
    log_every: int = 10


@dataclass
class FinetuneData(JobData):
    batch_size: Optional[int] = None  # type: ignore[assignment]  # None: the recipe's, from the data
    max_length: Optional[int] = None      # QA: 384 is BERT's SQuAD setting
    skip_bad_rows: bool = False
    bucket_by_length: bool = True


@dataclass
class FinetuneConfig:
    task: Task = "classification"
    model: str = ""                       # model folder to start from (bertkit, HF or Google BERT)
    output: str = ""
    metric: Optional[str] = None          # metric that picks the best model; None = the task's main one
    class_weights: Literal["auto", "none", "balanced", "sqrt"] = "auto"   # auto: sqrt-balanced when skewed
    gradual_unfreezing: bool = False      # epoch k trains the head and the top k layers
    aux_mlm_weight: float = 0.0           # SiATL's gamma: + gamma x MLM loss on a masked copy of each batch; 0 = off
    aux_mlm_decay: float = 1.0            # gamma x decay ** epoch (SiATL lowers gamma over training); 1 = constant
    # linear-probe / hybrid: a linear model over the frozen model's vectors (and TF-IDF), minutes on a CPU
    method: Literal["finetune", "linear-probe", "hybrid"] = "finetune"
    baseline: bool = True                 # fit the TF-IDF baseline on the same split, report it beside the result
    options: TaskOptions = field(default_factory=TaskOptions)
    data: FinetuneData = field(default_factory=FinetuneData)
    train: FinetuneTrain = field(default_factory=FinetuneTrain)
