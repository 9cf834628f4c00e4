"""The fine-tuning job's settings, as plain dataclasses: FinetuneConfig (the job) and TaskOptions (encoding and
decoding, saved with the model). Plain data with no torch, so the command line builds its flags from them
(bertkit/cli/flags.py) without loading the job."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional


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


Task = Literal["classification", "pair-classification", "multi-label", "regression", "ner", "qa"]


@dataclass
class FinetuneConfig:
    task: Task = "classification"
    model: str = ""                       # model folder to start from (bertkit, HF or Google BERT)
    train: str = ""
    dev: Optional[str] = None
    output: str = ""
    # None / "auto": chosen by the default recipe (recipe.py) from the data and the model
    epochs: Optional[int] = None
    lr: Optional[float] = None
    head_lr: Optional[float] = None       # lr of a newly initialized task head
    batch_size: Optional[int] = None
    eval_batch_size: int = 64
    max_length: Optional[int] = None      # QA: 384 is BERT's SQuAD setting
    seed: int = 42
    warmup_ratio: Optional[float] = None
    weight_decay: float = 0.01
    schedule: Literal["linear", "cosine", "constant", "slanted_triangular"] = "linear"
    clip_norm: Optional[float] = 1.0
    grad_accum: int = 1
    eval_every: Optional[int] = None      # steps; 0 = after every epoch
    metric: Optional[str] = None          # metric that picks the best model; None = the task's main one
    early_stopping_patience: Optional[int] = None   # evaluations without improvement; 0 = never stop early
    class_weights: Literal["auto", "none", "balanced", "sqrt"] = "auto"   # auto: sqrt-balanced when skewed
    # optimizer steps: the run and its lr schedule end at N (N wins over --epochs); no default time cap then
    max_steps: Optional[int] = None
    time_budget: Optional[str] = None     # wall-clock cap, e.g. "20m" ("off": none); None: 30m when epochs are unset
    layerwise_lr_decay: Optional[float] = None
    gradual_unfreezing: bool = False      # epoch k trains the head and the top k layers
    bucket_by_length: bool = True
    max_train_examples: Optional[int] = None   # first N rows only (quick runs, subsets)
    max_dev_examples: Optional[int] = None
    encoding: str = "utf-8"
    skip_bad_rows: bool = False
    device: str = "auto"
    resume: bool = False                  # continue an interrupted run from output/run/checkpoint
    save_every: int = 0                   # steps between training states (besides one after each evaluation)
    # auto: bf16 autocast on CUDA and on CPUs with AMX / avx512_bf16, fp32 on other CPUs
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    progress_bar: bool = True
    aux_mlm_weight: float = 0.0           # SiATL's gamma: + gamma x MLM loss on a masked copy of each batch; 0 = off
    aux_mlm_decay: float = 1.0            # gamma x decay ** epoch (SiATL lowers gamma over training); 1 = constant
    # linear-probe / hybrid: a linear model over the frozen model's vectors (and TF-IDF), minutes on a CPU
    method: Literal["finetune", "linear-probe", "hybrid"] = "finetune"
    baseline: bool = True                 # fit the TF-IDF baseline on the same split, report it beside the result
    options: TaskOptions = field(default_factory=TaskOptions)
