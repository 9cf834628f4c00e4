"""`bertkit finetune`, `bertkit baseline`, `bertkit evaluate`, `bertkit predict`: thin shells over bertkit.finetune.

finetune settings come from FinetuneConfig defaults, then `--config FILE.toml`, then the flags below, then
`--key=value` / `--options.key=value` overrides; the flags are generated from FinetuneConfig (cli/flags.py).
The job that trains a task comes from finetune/tasks.py (TASKS[task].job -> JOBS: module, config class, runner);
`--template` (PET / P-tuning) picks the prompt-classification task. evaluate / predict hand every folder to
bertkit.finetune.predict, which routes it by bertkit.json's task.
"""
from __future__ import annotations

import argparse
import json
import sys
from importlib import import_module
from pathlib import Path

from bertkit.cli.flags import (add_config_flags, add_deprecated_flag, check_repetition_flags, config_from_args,
                               given_flags, positive_int, skip_progress_bar_field)
from bertkit.cli.precision_option import add_precision_flag, say_precision
from bertkit.errors import BertkitError
from bertkit.finetune.config import FinetuneConfig
from bertkit.job_config import FIT_SET, flat_keys, has_field, short_flags
from bertkit.options import SAVED_TASKS, TRAINABLE_TASKS

_HELP = {  # per FinetuneConfig field (flat names: flat_keys), where the source comment is not the whole story
    "task": "seq2seq: UniLM sequence-to-sequence on {source, target} (or text_a, text_b) JSONL pairs, from a folder "
            "with an MLM head; rerank: a cross-encoder for /rerank from {query, positive, negative} JSONL "
            "(--loss=listwise|pairwise, --negatives=N, --in-batch-negatives=N), saved as a pair-classification "
            "folder; simbert: SimBERT, seq2seq generation of the pair's other text + in-batch retrieval on its "
            "sentence vectors, from {text_a, text_b} (or source, target) pairs (--pooling=cls|mean, --scale=30, "
            "--similarity_weight=1); then bertkit generate --similar",
    "train": "training file: .jsonl/.tsv/.csv (classification), .jsonl/.conll (ner), SQuAD .json (qa), pairs .jsonl "
             "(seq2seq); .gz allowed",
    "dev": "dev file, evaluated every epoch (or --eval-every steps); picks the best model",
    "output": "folder for the best model",
    "head_lr": "lr of a newly initialized task head (default 20 x lr)",
    "max_length": "tokens per row; longer NER/QA inputs are windowed, longer texts keep their head and tail",
    "class_weights": "loss weights per label (auto: sqrt-balanced when the labels are skewed)",
    "time_budget": "wall-clock cap, e.g. 20m (off: none; none: 30m when the recipe picks the epochs)",
    "eval_every": "evaluate every N steps (none or 0: every epoch)",
    "early_stopping_patience": "stop after N evaluations without improvement",
    "layerwise_lr_decay": "lr x d per layer below the top (e.g. 0.9)",
    "aux_mlm_weight": "SiATL: add G x MLM loss on masked copies of the training texts (needs a folder with an MLM "
                      "head, e.g. from bertkit pretrain; --aux-mlm-decay=D multiplies G by D each epoch)",
    "skip_bad_rows": "write bad rows to OUTPUT.rejects.jsonl and go on instead of stopping",
    "encoding": "input encoding, e.g. gb18030",
    "device": "cpu, cuda or auto",
    "resume": "continue the interrupted run in --output from its last saved state (saved after each evaluation "
              "and every --save-every steps)",
    "precision": "auto: bf16 autocast on CUDA and on CPUs with AMX / avx512_bf16, fp32 on other CPUs (the recipe's "
                 "choice); bf16 / fp32: always",
    "save_every": "also save the training state every N steps (for --resume); 0: only after evaluations",
    "method": "linear-probe: logistic regression on the frozen model's vectors (minutes on a CPU); hybrid: that "
              "stacked with the TF-IDF baseline; finetune: the whole model",
    "baseline": "fit the TF-IDF baseline on the same split and report it beside the result (classification, "
                "pairs, regression); --no-baseline skips it",
}
_SHORT = flat_keys(FinetuneConfig)
_HELP = {_SHORT.get(name, name): text for name, text in _HELP.items()}
_RECIPE = tuple(_SHORT.get(name, name) for name in ("epochs", "lr", "head_lr", "batch_size", "max_length",
                                                    "class_weights", "time_budget", "warmup_ratio"))


def register(subparsers) -> None:
    p = subparsers.add_parser("finetune", help="fine-tune a model on labeled data (classification, NER, QA...)",
                              description="Train a task head (and the encoder) on a labeled file; writes the best "
                                          "model folder to --output, with metrics.json and run/ (config, versions, "
                                          "log). Settings: FinetuneConfig defaults, then --config FILE.toml, then "
                                          "the flags, then --key=value / --options.key=value overrides.")
    recipe = p.add_argument_group("training settings (none: the recipe picks each from the data and the model, "
                                  "prints its choice and writes run/recipe.json)")
    add_config_flags(p, FinetuneConfig, skip=skip_progress_bar_field(p) | FIT_SET, aliases=short_flags(FinetuneConfig),
                     help=_HELP, choices={"task": TRAINABLE_TASKS}, group_of=dict.fromkeys(_RECIPE, recipe),
                     metavars={"model": "DIR", "output": "DIR", "data.train": "FILE", "data.dev": "FILE"})
    prompt = p.add_argument_group("prompt-based classification (PET / P-tuning; --task classification, a model "
                                  "with an MLM head; --epochs 0 = zero-shot: evaluate on --dev and save)")
    prompt.add_argument("--template", help='cloze pattern with {text} and [MASK] once each, e.g. "{text} It was '
                                           '[MASK]."; [P] slots hold learned vectors with --ptuning')
    prompt.add_argument("--verbalizer", help="label=word pairs, one vocabulary token per word, e.g. "
                                             "pos=great,neg=terrible")
    prompt.add_argument("--ptuning", action="store_true", default=None,
                        help="P-tuning: learn continuous prompt vectors for the template's [P] slots")
    prompt.add_argument("--freeze-encoder", action="store_true", default=None,
                        help="with --ptuning: train only the prompt vectors")
    p.set_defaults(func=run_finetune_command, accepts_overrides=True)

    p = subparsers.add_parser("baseline", help="TF-IDF + a linear model: the baseline to beat (seconds, no GPU)",
                              description="Fit TF-IDF word 1-2-grams + character 2-5-grams (Chinese: characters "
                                          "1-3 + jieba words) with logistic regression (ridge for regression), the "
                                          "regularization chosen on --dev; writes a model folder that evaluate, "
                                          "predict and serve read. Needs scikit-learn.")
    p.add_argument("--task", choices=("classification", "pair-classification", "regression"),
                   default="classification")
    p.add_argument("--train", required=True, help=".jsonl/.tsv/.csv (.gz allowed)")
    p.add_argument("--dev", required=True, help="picks the regularization")
    p.add_argument("--test", help="evaluated once at the end (metrics.json)")
    p.add_argument("--output", required=True, help="model folder to write")
    p.add_argument("--min-df", type=int, help="drop terms found in fewer training texts (default 2)")
    p.add_argument("--encoding", default="utf-8")
    p.add_argument("--skip-bad-rows", action="store_true",
                   help="write bad rows to OUTPUT.rejects.jsonl and go on instead of stopping")
    p.set_defaults(func=run_baseline_command)

    p = subparsers.add_parser("evaluate", help="score a fine-tuned model on a labeled file (JSON metrics)")
    p.add_argument("--model", required=True)
    p.add_argument("--input", metavar="FILE", help="labeled .jsonl/.tsv/.csv, .conll, or SQuAD .json (required)")
    add_deprecated_flag(p, "--data", "--input")
    p.add_argument("--task", choices=SAVED_TASKS, help="fail unless the model was fine-tuned for this task")
    p.add_argument("--against", metavar="MODEL", help="a second classifier scored on the same file: its metrics "
                   "beside, and McNemar's exact test on the rows only one of the two predicts right (e.g. "
                   "OUTPUT/run/baseline, the TF-IDF baseline finetune saves)")
    p.add_argument("--encoding", default="utf-8")
    p.add_argument("--batch-size", type=positive_int, default=64)
    add_precision_flag(p)
    p.set_defaults(func=run_evaluate_command)

    p = subparsers.add_parser("predict", help="predict labels, entities or answers for a file (JSONL out)")
    p.add_argument("--model", required=True)
    p.add_argument("--input", required=True, help=".jsonl/.tsv/.csv/.txt, .conll, or SQuAD .json; ner also takes "
                   "raw text (.txt lines or {\"text\": ...} JSONL), split into words as Model.predict splits it")
    p.add_argument("--output", required=True, help="output .jsonl")
    p.add_argument("--task", choices=SAVED_TASKS, help="fail unless the model was fine-tuned for this task")
    p.add_argument("--encoding", default="utf-8")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=64, help="seq2seq models: most tokens to generate per row")
    p.add_argument("--num-beams", type=int, default=1, help="seq2seq models: beam search width (1 = greedy)")
    p.add_argument("--no-repeat-ngram-size", type=int, default=0,
                   help="seq2seq models: never repeat an n-gram of the output (0 = off)")
    p.add_argument("--repetition-penalty", type=float, default=1.0,
                   help="seq2seq models: CTRL's penalty on tokens already in the output (1.0 = off; 1.2 in the paper)")
    add_precision_flag(p)
    p.set_defaults(func=run_predict_command)


_PROMPT_FLAGS = ("template", "verbalizer", "ptuning", "freeze_encoder")   # they make --task classification ...
PROMPT_TASK = "prompt-classification"                                          # ... this TASKS entry


def _given_flags(args: argparse.Namespace) -> dict:
    """Dotted field -> raw value of every setting given as a flag (FinetuneConfig's and the prompt group's)."""
    given = given_flags(args)
    given.update({name: getattr(args, name) for name in _PROMPT_FLAGS if getattr(args, name) is not None})
    return given


def _job(given: dict):
    """The config class and runner of the job that trains the task (finetune/tasks.py's TASKS and JOBS), and how
    the command line names that job (None for bertkit.finetune.job)."""
    from bertkit.finetune.tasks import JOBS, TASKS

    prompt_flags = [f for f in _PROMPT_FLAGS if f in given]
    task = given.get("task", "classification")
    if prompt_flags and task != "classification":
        flag = f"--{prompt_flags[0].replace('_', '-')}"
        raise BertkitError(f"{flag} is for prompt-based classification, not --task {task}" if TASKS[task].job !=
                           "finetune" else f"{flag} (prompt-based classification) works with --task classification, "
                                           f"not --task {task}")
    kind = TASKS[PROMPT_TASK if prompt_flags else task]
    module, config_class, runner = JOBS[kind.job]
    job = import_module(module)
    name = None if kind.job == "finetune" else "--template (prompt-based classification)" if prompt_flags \
        else f"--task {task}"
    return getattr(job, config_class), getattr(job, runner), name


def finetune_config(args: argparse.Namespace):
    """The job's config (FinetuneConfig, or the config of the --task seq2seq / rerank / prompt job) and its runner:
    defaults, then --config, then the flags given, then overrides, through bertkit.config's loader."""
    given = _given_flags(args)
    cls, run, job_name = _job(given)
    if job_name is not None:
        given.pop("task", None)
        unsupported = [name for name in given if not has_field(cls, name)]
        if unsupported:
            short = {new: old for old, new in _SHORT.items()}.get(unsupported[0], unsupported[0])
            raise BertkitError(f"--{short.replace('_', '-')} is not supported with {job_name}")
    return config_from_args(cls, args, given=given), run


def run_finetune_command(args: argparse.Namespace) -> int:
    config, run = finetune_config(args)
    result = run(config)
    print(json.dumps(result.summary(), indent=2))
    return 0


def run_baseline_command(args: argparse.Namespace) -> int:
    from bertkit.finetune.linear import BaselineConfig, run_baseline
    from bertkit.finetune.linear.training import TfidfOptions

    if args.min_df is not None and args.min_df < 1:
        raise BertkitError(f"--min-df must be >= 1, got {args.min_df}")
    tfidf = TfidfOptions(min_df=args.min_df) if args.min_df is not None else TfidfOptions()
    result = run_baseline(BaselineConfig(task=args.task, train=args.train, dev=args.dev, test=args.test,
                                         output=args.output, tfidf=tfidf, encoding=args.encoding,
                                         skip_bad_rows=args.skip_bad_rows))
    print(json.dumps({"output": str(result.output), "dev": result.dev, "test": result.test,
                      "features": result.features, "seconds": round(result.seconds, 1)}, indent=2))
    return 0


def _model_in_precision(args: argparse.Namespace, path: str | None = None):
    """The folder path (default --model) as is (fp32, or int8 for a quantized folder), or the model loaded in
    --precision; an ONNX export (a .onnx file or its folder) loaded, as it has no config.json for the folder
    readers."""
    from bertkit import api
    from bertkit.distill.onnx_model import onnx_file_of
    path = path or args.model
    if args.precision is None and onnx_file_of(path) is None:
        return path
    model = api.load(path, precision=args.precision)
    say_precision(model, args.precision)
    return model


def _check_precision_for_own_model(args: argparse.Namespace) -> None:
    """Folders of jobs with a model of their own (prompt classification, seq2seq) run in fp32."""
    from bertkit.finetune.loaded import OWN_MODEL_TASKS
    from bertkit.finetune.loop_job import saved_task

    task = saved_task(args.model) if Path(args.model).is_dir() else None
    if task in OWN_MODEL_TASKS and args.precision not in (None, "fp32"):
        raise BertkitError(f"--precision {args.precision}: {args.model} is a {task} folder, which runs in fp32")


def run_evaluate_command(args: argparse.Namespace) -> int:
    from bertkit.finetune.predict import evaluate_file

    if not args.input:
        raise BertkitError("evaluate needs --input FILE (the labeled file to score)")
    _check_precision_for_own_model(args)
    model = _model_in_precision(args)
    metrics = evaluate_file(model, args.input, args.encoding, args.batch_size, args.task)
    if args.against:
        metrics = {**metrics, **_paired_evaluation(args, model)}
    print(json.dumps(metrics, indent=2, ensure_ascii=False))
    return 0


def _paired_evaluation(args: argparse.Namespace, model) -> dict:
    """evaluate --against: the second model's metrics on the same file, and the two paired (McNemar)."""
    from bertkit.finetune.linear.report import mcnemar, paired_line
    from bertkit.finetune.predict import classified_rows, evaluate_file

    other = _model_in_precision(args, args.against)
    gold, mine = classified_rows(model, args.input, args.encoding, args.batch_size, args.task)
    _, theirs = classified_rows(other, args.input, args.encoding, args.batch_size)
    paired = mcnemar([p == g for p, g in zip(mine, gold)], [p == g for p, g in zip(theirs, gold)])
    print(f"bertkit: {paired_line(paired, args.model, args.against, f'{Path(args.input).name} rows')}",
          file=sys.stderr)
    return {"against": {"model": args.against, **evaluate_file(other, args.input, args.encoding, args.batch_size)},
            "paired": {"model_only": paired["model_only"], "against_only": paired["baseline_only"],
                       "p_value": paired["p_value"]}}


def run_predict_command(args: argparse.Namespace) -> int:
    from bertkit.finetune.predict import predict_file

    _check_precision_for_own_model(args)
    check_repetition_flags(args)
    generation = {"max_new_tokens": args.max_new_tokens, "num_beams": args.num_beams,
                  "no_repeat_ngram_size": args.no_repeat_ngram_size, "repetition_penalty": args.repetition_penalty}
    count = predict_file(_model_in_precision(args), args.input, args.output, args.encoding, args.batch_size,
                         args.task, generation)
    print(f"bertkit: wrote {count} predictions to {args.output}", file=sys.stderr)
    return 0
