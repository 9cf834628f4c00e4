"""The default fine-tuning recipe: epochs, learning rates, warm-up, batch size, max_length, evaluation frequency,
early stopping, class weights and precision chosen from the data and the model, for every setting left unset.

BERT's GLUE recipe (3 epochs, lr 2e-5..5e-5, batch 32, 128 tokens) was tuned for a 12-layer model on tens of
thousands of rows. Applied to a 6-layer, 384-wide model on 6k rows in 36 skewed classes it collapsed onto the
frequent classes (issue 19: accuracy 0.529, macro-F1 0.15, against TF-IDF's 0.647). `choose_recipe` is a pure
function of a DataProfile and a ModelProfile; the job measures the profiles, calls it, prints `describe()` and
writes the recipe with its reasons into the run folder (run/recipe.json). Settings the user gave always win.

Measurements behind each rule (BENCHMARKS.md, "The default fine-tuning recipe (issue 19)"). Proxy =
benchmarks/datasets.py wordnet_lexname: 5,999 short WordNet definitions in 45 skewed classes (1,777 .. 2 rows),
standing in for the held-out set; all-MiniLM-L6-v2, seed 42, test split (1,503); TF-IDF + LinearSVC 0.582 /
macro-F1 0.322. The paper's GLUE defaults (3 epochs, lr 3e-5, no head lr, 128 tokens) collapse there: 0.459 /
0.051. This recipe: 0.741 / 0.540 (best dev at epoch 5 of 6).
BBC (1,467 news articles, median 421 tokens): 0.9809, equal to TF-IDF's 0.9809, with the 30-minute cap ending
the run after 1.5 epochs at load ~10. chnsenticorp_like with a 2 x 128 Chinese model pre-trained here: 0.825 vs
TF-IDF's 0.864 (the model, not the recipe, is the limit there).
- lr = 1.5e-4 x (384 / hidden) ** 1.5 for the sequence tasks (classification, pairs, regression): 1.5e-4 for
  MiniLM-L6, 5.3e-5 for BERT-base (768; the paper's 2e-5..5e-5), 3.4e-5 for BERT-large, 7.8e-4 for a 128-wide
  tiny model (Turc et al. 2019 and Cramming use 1e-4..1e-3 for small BERTs). 1.5e-4 against 1e-4, same recipe
  otherwise: proxy best dev 0.731 vs 0.726, test 0.744 / macro-F1 0.569 vs 0.741 / 0.540; chnsenticorp_like
  (MiniLM with Chinese characters, continued pre-training) dev 0.868 vs 0.865, test 0.872 vs 0.864, and with the
  model adapted on an H100 test 0.870 vs 0.863 (dev 0.867 both); BBC (EPYC, every evaluation scored) kept 0.974
  vs 0.986 / 0.967 for two seeds at 1e-4, the same within its noise (a 419-text test split; mean test accuracy over
  the evaluations after epoch 1: 0.976 vs 0.979 / 0.977); 2e-4 is past the optimum on the proxy (0.731), 3e-5
  collapses. NER and QA keep 1e-4 x (384 / hidden) ** 1.5 (TOKEN_TASK_LR_SHARE), the rate they were measured at.
- head lr = HEAD_LR_FACTOR x lr for a freshly initialized head (Howard & Ruder 2018 train new layers faster).
  Proxy, dev after 4 epochs: head at 2e-3 0.708 / macro-F1 0.496, head at the encoder's 1e-4 0.660 / 0.340.
- epochs: enough optimizer steps (TARGET_STEPS) for small sets, at least MIN_EPOCHS, at most MAX_EPOCHS
  (Mosbach et al. 2021, Zhang et al. 2021: few-sample fine-tuning fails mostly from too few updates), dev
  evaluation every epoch (every ~EVAL_INTERVAL_STEPS steps for large sets), the best model kept (a tie in dev
  accuracy goes to the lower dev loss: a 210-text dev set scores epochs alike), early stopping after PATIENCE
  evaluations without improvement but never before EARLY_STOPPING_START of the run (while the linear lr is still
  above a quarter of its peak: a dip at the start is not convergence), and a wall-clock cap (TIME_CAP) when the
  recipe chose the epochs: on a slow machine the lr schedule follows the clock (the loop's time budget) and the run
  ends by then. Such a run says so at the end (the job, when the clock led the steps by 5% of the run or more) and
  records the lead in metrics.json: the same command on a quieter machine trains on another schedule (chnsenticorp_like:
  0.8704 on a loaded machine, 0.8646 quiet, BENCHMARKS.md "The recipe's learning rate, again").
- class weights when the label distribution is skewed (largest / smallest class >= SKEW_RATIO): cross-entropy
  weighted by (n / (K n_c)) ** CLASS_WEIGHT_POWER. Proxy, dev after 4 epochs: weighted 0.708 / macro-F1 0.496,
  unweighted 0.693 / 0.391.
- max_length: the 99th percentile of the training texts' token lengths, rounded up to a multiple of 32, at most
  the model's positions; longer texts keep their first 128 and last 382 tokens (scaled to max_length; Sun et
  al. 2019). With dynamic padding a short max_length saves nothing on short texts; it bounds the long tail.
- precision: bf16 autocast on CPUs with AMX / avx512_bf16 and on CUDA, fp32 on other CPUs. Proxy, same seed:
  bf16 0.7405 / 0.5402, fp32 0.7405 / 0.5399, in 1,732 vs 3,049 s side by side (1.76x).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

import numpy as np

from bertkit.finetune.tasks import SEQUENCE_TASKS, SINGLE_LABEL_TASKS, TASKS

REFERENCE_HIDDEN, REFERENCE_LR = 384, 1.5e-4    # MiniLM-L6: best dev on the proxy and on chnsenticorp_like
TOKEN_TASK_LR_SHARE = 2 / 3                     # NER and QA: 1e-4 at width 384 (measured there; 1.5e-4 was not)
LR_EXPONENT = 1.5
LR_RANGE = (1e-5, 5e-3)
HEAD_LR_FACTOR = 20.0
HEAD_LR_MAX = 5e-3                              # but never above (a linear head on AdamW diverges well before 1e-1)
TARGET_STEPS = 1000
MIN_EPOCHS, MAX_EPOCHS = 2, 20
SMALL_SET, SMALL_BATCH, BATCH = 2000, 16, 32    # fewer rows than SMALL_SET: batch 16 (more updates per epoch)
TIME_CAP = "30m"                                # a run whose epochs the recipe chose stops by then (see below)
EVAL_INTERVAL_STEPS = 500
PATIENCE = 2
# Never stop before three quarters of the run. At 0.5, a BBC fine-tune on a 2-core EPYC stopped at its third epoch
# (dev 0.9905, 0.9905, 0.9857; 51% of the 30-minute cap) and kept epoch 1 (test 0.967, TF-IDF 0.981); the same recipe
# run again dipped the same way (0.9905, 0.9857, 0.9810, at 44%) and reached its best dev at 60% (0.9952, test 0.986)
# (BENCHMARKS.md, "Which evaluation keeps the model").
EARLY_STOPPING_START = 0.75
SKEW_RATIO = 5.0
CLASS_WEIGHT_POWER = 0.5
LENGTH_QUANTILE, LENGTH_ROUND, MIN_LENGTH = 99, 32, 32
WARMUP_RATIO = 0.1
WEIGHTED_TASKS = tuple(name for name in SINGLE_LABEL_TASKS if TASKS[name].labels == "class")   # class weights
QA_MAX_LENGTH = 384                             # BERT's SQuAD setting; contexts longer than that are windowed
NER_MAX_LENGTH = 128                            # NER windows long sentences with overlap (NERTask)


@dataclass(frozen=True)
class DataProfile:
    task: str
    examples: int                                # training rows (QA: questions; NER: sentences)
    label_counts: tuple[int, ...] = ()           # per label, classification and pairs only
    token_lengths: tuple[int, ...] = ()          # full token length of each training row, specials included

    @staticmethod
    def of(task: str, lengths: Sequence[int], labels: Sequence[int] = (), num_labels: int = 0) -> "DataProfile":
        counts = tuple(int(c) for c in np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_labels)) \
            if task in WEIGHTED_TASKS and len(labels) else ()
        return DataProfile(task, len(lengths), counts, tuple(int(n) for n in lengths))


@dataclass(frozen=True)
class ModelProfile:
    hidden_size: int
    num_layers: int
    max_positions: int
    fast_bf16: bool                              # a CUDA device, or a CPU with AMX / avx512_bf16
    new_head: bool = True                        # the task head is freshly initialized (not a saved one)


@dataclass
class Recipe:
    epochs: int
    lr: float
    head_lr: Optional[float]
    warmup_ratio: float
    batch_size: int
    max_length: int
    eval_every: int                              # steps; 0 = every epoch
    early_stopping_patience: Optional[int]
    early_stopping_start: float                  # fraction of the run before early stopping may stop it
    class_weights: Optional[list[float]]
    precision: str                               # fp32 | bf16
    time_budget: Optional[str]                   # wall-clock cap ("30m"); None: epochs only
    max_steps: Optional[int] = None              # set by the user: the run is that many steps, not `epochs`
    reasons: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Requested:
    """What the user set (None: let the recipe choose): the recipe's fields of FinetuneConfig's train and data sections,
    and its class_weights."""
    epochs: Optional[int] = None
    lr: Optional[float] = None
    head_lr: Optional[float] = None
    warmup_ratio: Optional[float] = None
    batch_size: Optional[int] = None
    max_length: Optional[int] = None
    eval_every: Optional[int] = None
    early_stopping_patience: Optional[int] = None   # 0 = off
    class_weights: str = "auto"                     # auto | none | balanced | sqrt
    precision: str = "auto"                         # auto | fp32 | bf16
    time_budget: Optional[str] = None               # "20m"; "off" = no cap
    max_steps: Optional[int] = None                 # set: the run's length is N steps, no default time cap


def reference_lr(task: str) -> float:
    """The rate at the reference width (384) for `task`: the sequence tasks' REFERENCE_LR, NER / QA's share of it."""
    return REFERENCE_LR * (1.0 if task in SEQUENCE_TASKS else TOKEN_TASK_LR_SHARE)


def default_lr(hidden_size: int, task: str = "classification") -> float:
    lr = reference_lr(task) * (REFERENCE_HIDDEN / hidden_size) ** LR_EXPONENT
    lr = float(f"{lr:.2g}")
    return min(max(lr, LR_RANGE[0]), LR_RANGE[1])


def default_max_length(task: str, lengths: Sequence[int], max_positions: int) -> int:
    if task == "qa":
        return min(QA_MAX_LENGTH, max_positions)
    if task == "ner":
        return min(NER_MAX_LENGTH, max_positions)
    if not len(lengths):
        return min(128, max_positions)
    quantile = float(np.percentile(np.asarray(lengths), LENGTH_QUANTILE))
    rounded = int(math.ceil(quantile / LENGTH_ROUND) * LENGTH_ROUND)
    return min(max(rounded, MIN_LENGTH), max_positions)


def class_weights_for(counts: Sequence[int], power: float) -> list[float]:
    """(n / (K n_c)) ** power, scaled so the average weight over the training rows is 1 (the loss keeps its
    scale); a label with no training rows gets weight 1."""
    counts = np.asarray(counts, dtype=np.float64)
    present = counts > 0
    raw = np.ones_like(counts)
    raw[present] = (counts.sum() / (present.sum() * counts[present])) ** power
    raw *= counts.sum() / float((raw * counts).sum())
    return [round(float(w), 6) for w in raw]


def is_skewed(counts: Sequence[int]) -> bool:
    present = [c for c in counts if c > 0]
    return len(present) > 1 and max(present) / min(present) >= SKEW_RATIO


def choose_recipe(data: DataProfile, model: ModelProfile, asked: Requested = Requested()) -> Recipe:
    reasons: dict[str, str] = {}

    def pick(name: str, value, why: str):
        given = getattr(asked, name)
        if given is not None:
            reasons[name] = "set by the user"
            return given
        reasons[name] = why
        return value

    lr = pick("lr", default_lr(model.hidden_size, data.task),
              f"{reference_lr(data.task):.2g} x (384 / hidden {model.hidden_size}) ** 1.5")
    head_lr = None
    if model.new_head:
        head_lr = pick("head_lr", float(f"{max(lr, min(lr * HEAD_LR_FACTOR, HEAD_LR_MAX)):.2g}"),
                       f"{HEAD_LR_FACTOR:g} x lr for the new head, at most {HEAD_LR_MAX:g}")
    elif asked.head_lr is not None:
        head_lr = pick("head_lr", None, "")
    else:
        reasons["head_lr"] = "the head was already trained (continuing a fine-tuned folder): same lr as the encoder"
    small = data.examples < SMALL_SET
    batch = pick("batch_size", SMALL_BATCH if small else BATCH,
                 f"{data.examples} rows {'<' if small else '>='} {SMALL_SET}")
    steps_per_epoch = max(1, -(-data.examples // batch))
    epochs = min(max(-(-TARGET_STEPS // steps_per_epoch), MIN_EPOCHS), MAX_EPOCHS)
    epochs = pick("epochs", epochs, f"~{TARGET_STEPS} steps at {steps_per_epoch} steps an epoch, within "
                                    f"{MIN_EPOCHS}..{MAX_EPOCHS} (early stopping picks the best)")
    evals = -(-steps_per_epoch // EVAL_INTERVAL_STEPS)
    eval_every = pick("eval_every", 0 if evals <= 1 else -(-steps_per_epoch // evals),
                      "every epoch" if evals <= 1 else f"{evals} times an epoch of {steps_per_epoch} steps")
    patience = pick("early_stopping_patience", PATIENCE, f"stop after {PATIENCE} evaluations without improvement, "
                                                          f"not in the first {EARLY_STOPPING_START:.0%} of the run")
    start = EARLY_STOPPING_START if asked.early_stopping_patience is None else 0.0
    if patience == 0:
        patience = None
    max_length = pick("max_length", default_max_length(data.task, data.token_lengths, model.max_positions),
                      f"{LENGTH_QUANTILE}th percentile of the training lengths, at most {model.max_positions}"
                      if data.task in SEQUENCE_TASKS else f"the {data.task} default")
    warmup = pick("warmup_ratio", WARMUP_RATIO, "BERT's 10% linear warm-up")
    weights = None
    if asked.class_weights == "auto":
        if data.task in WEIGHTED_TASKS and is_skewed(data.label_counts):
            weights = class_weights_for(data.label_counts, CLASS_WEIGHT_POWER)
            present = [c for c in data.label_counts if c > 0]
            reasons["class_weights"] = (f"labels skewed ({max(present)} vs {min(present)} rows): "
                                        f"(n / (K n_c)) ** {CLASS_WEIGHT_POWER:g}")
        else:
            reasons["class_weights"] = "labels balanced enough" if data.task in WEIGHTED_TASKS else \
                f"not used for {data.task}"
    elif asked.class_weights in ("balanced", "sqrt"):
        if data.task not in WEIGHTED_TASKS:
            raise ValueError(f"class_weights {asked.class_weights!r} applies to classification and pairs, "
                             f"not {data.task}")
        weights = class_weights_for(data.label_counts, 1.0 if asked.class_weights == "balanced" else 0.5)
        reasons["class_weights"] = "set by the user"
    else:
        reasons["class_weights"] = "set by the user" if asked.class_weights == "none" else ""
    if asked.precision == "auto":
        precision = "bf16" if model.fast_bf16 else "fp32"
        reasons["precision"] = "bf16: the device computes bf16 fast" if model.fast_bf16 else \
            "fp32: no fast bf16 on this CPU (no AMX / avx512_bf16)"
    else:
        precision = asked.precision
        reasons["precision"] = "set by the user"
    if asked.time_budget is not None:
        budget = None if asked.time_budget == "off" else asked.time_budget
        reasons["time_budget"] = "set by the user"
    elif asked.max_steps is not None:
        budget = None
        reasons["time_budget"] = "the user set the max steps"
    elif asked.epochs is None:
        budget = TIME_CAP
        reasons["time_budget"] = (f"at most {TIME_CAP}: on a slow machine the lr schedule follows the clock and the "
                                  "run ends by then")
    else:
        budget = None
        reasons["time_budget"] = "the user set the epochs"
    return Recipe(epochs, lr, head_lr, warmup, batch, max_length, eval_every, patience, start, weights, precision,
                  budget, asked.max_steps, reasons)


def describe(recipe: Recipe, data: DataProfile, epoch_steps: Optional[int] = None) -> str:
    """Two lines for the log: what was chosen, and why the data looked the way it did. `epoch_steps`: the optimizer
    steps `recipe.epochs` take (the job counts them from its batches; default: rows / batch size), named when
    max_steps sets the run's length instead."""
    head = f", head lr {recipe.head_lr:g}" if recipe.head_lr is not None else ""
    evals = "each epoch" if not recipe.eval_every else f"every {recipe.eval_every} steps"
    stop = f", early stopping after {recipe.early_stopping_patience}" if recipe.early_stopping_patience else ""
    weights = ", class-weighted loss" if recipe.class_weights is not None else ""
    cap = f" (at most {recipe.time_budget})" if recipe.time_budget else ""
    length = f"{recipe.epochs} epochs"
    if recipe.max_steps is not None:
        steps = epoch_steps if epoch_steps is not None else recipe.epochs * -(-data.examples // recipe.batch_size)
        whose = "the given" if recipe.reasons.get("epochs") == "set by the user" else "the recipe's"
        length = (f"{recipe.max_steps} step{'s' * (recipe.max_steps != 1)} (max_steps; {whose} {recipe.epochs} "
                  f"epochs would be {steps} steps)")
    first = (f"recipe: {length}{cap}, lr {recipe.lr:g}{head}, batch {recipe.batch_size}, warm-up "
             f"{recipe.warmup_ratio:g}, max_length {recipe.max_length}, {recipe.precision}, dev {evals}{stop}{weights}")
    lengths = np.asarray(data.token_lengths) if data.token_lengths else np.zeros(1)
    longer = int((lengths > recipe.max_length).sum())
    windowed = " (read in overlapping windows)" if data.task in ("qa", "ner") else ""
    second = (f"recipe: from {data.examples} training rows, token length median {int(np.median(lengths))} / "
              f"p99 {int(np.percentile(lengths, 99))}; {longer} rows longer than max_length{windowed}")
    if data.label_counts:
        present = [c for c in data.label_counts if c > 0]
        second += f"; {len(present)} labels, {max(present)}..{min(present)} rows each"
    return first + "\n" + second


def profile_data(task: str, tokenizer, examples: Sequence, label_names: Sequence[str]) -> DataProfile:
    """Token lengths (full, untruncated: QA's question and context together, before windowing; NER's words) and
    label counts (classification, pairs) of the training examples."""
    lengths: list[int] = []
    if task in SEQUENCE_TASKS:
        texts = [ex.text for ex in examples]
        pairs = [ex.text_pair or "" for ex in examples] if any(ex.text_pair for ex in examples) else None
        lengths = [len(ids) for ids in tokenizer.encode_batch(texts, pairs=pairs, max_length=None,
                                                              truncation=None).input_ids]
    elif task == "ner":
        lengths = [len(sentence.tokens) + 2 for sentence in examples]
    elif task == "qa":                                  # [CLS] question [SEP] context [SEP]
        lengths = [len(ids) for ids in tokenizer.encode_batch([ex.question for ex in examples],
                                                              pairs=[ex.context for ex in examples],
                                                              max_length=None, truncation=None).input_ids]
    else:
        raise ValueError(f"no length profile for task {task!r}")
    index = {name: i for i, name in enumerate(label_names)}
    labels = [index[ex.label] for ex in examples] if task in WEIGHTED_TASKS else []
    return DataProfile.of(task, lengths, labels, len(label_names))


# Prompt-based few-shot (PET / P-tuning, bertkit.finetune.prompt.job). PET trains the pre-trained MLM head, no new
# layer, so there is no head lr. Measured (issue 19, 32 BBC examples): PET at its old default lr 1e-5 reached 36%
# test accuracy, at 5e-5 85% (P-tuning 84%, plain fine-tuning 53%); on the 128-wide Chinese MLM of BENCHMARKS.md
# (32 examples, 5 draws, 20 epochs) PET at 1e-4 0.580 and 1e-3 0.572. A third of the width rule's lr gives 5e-5
# at width 384 and 2.6e-4 at 128, inside both measured optima. P-tuning with a frozen encoder trains only the prompt
# vectors: 1e-3 (P-tuning's own setting, Liu et al. 2021).
PROMPT_LR_SHARE = 1 / 3
FROZEN_PROMPT_LR = 1e-3


def prompt_recipe(examples: int, hidden_size: int, batch_size: int, frozen_encoder: bool) -> tuple[int, float, str]:
    """(epochs, lr, one line for the log) for prompt-based few-shot training on `examples` rows."""
    steps_per_epoch = max(1, -(-examples // batch_size))
    epochs = min(max(-(-TARGET_STEPS // steps_per_epoch), MIN_EPOCHS), MAX_EPOCHS)
    lr = FROZEN_PROMPT_LR if frozen_encoder else float(f"{default_lr(hidden_size) * PROMPT_LR_SHARE:.2g}")
    return epochs, lr, f"recipe: {epochs} epochs ({steps_per_epoch} steps each), lr {lr:g} for {examples} examples"
