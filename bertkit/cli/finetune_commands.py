"""`bertkit finetune`, `bertkit baseline`, `bertkit evaluate`, `bertkit predict`: thin shells over bertkit.finetune.

finetune settings come from FinetuneConfig defaults, then `--config FILE.toml`, then the flags below, then
`--key=value` / `--options.key=value` overrides for everything else (e.g. --options.doc_stride=64).
`--task seq2seq` (UniLM) and `--template` (PET / P-tuning) run the jobs in bertkit.generate, with their own
configs (Seq2SeqConfig, PromptConfig); evaluate / predict recognise their folders by bertkit.json's task.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from bertkit.cli.precision_option import add_precision_flag, say_precision
from bertkit.config import apply_overrides, load_config
from bertkit.errors import BertkitError
from bertkit.options import SAVED_TASKS, TRAINABLE_TASKS

SEQ2SEQ, PROMPT = "seq2seq", "prompt-classification"   # tasks of the bertkit.generate jobs
RERANK = "rerank"                                       # bertkit.finetune.rerank: a cross-encoder
SIMBERT = "simbert"                                     # bertkit.finetune.seq2seq.simbert: generate + retrieve similar texts

# flag -> FinetuneConfig field, for the flags every user needs; the rest go through --key=value overrides.
_FLAGS = {"task": str, "model": str, "train": str, "dev": str, "output": str, "epochs": int, "lr": float,
          "batch_size": int, "max_length": int, "seed": int, "warmup_ratio": float, "eval_every": int,
          "early_stopping_patience": int, "layerwise_lr_decay": float, "schedule": str, "metric": str,
          "encoding": str, "device": str, "max_train_examples": int, "max_dev_examples": int,
          "aux_mlm_weight": float, "head_lr": float, "class_weights": str, "time_budget": str, "method": str, "save_every": int}


def register(subparsers) -> None:
    p = subparsers.add_parser("finetune", help="fine-tune a model on labeled data (classification, NER, QA...)",
                              description="Train a task head (and the encoder) on a labeled file; writes the best "
                                          "model folder to --output, with metrics.json and run/ (config, versions, log).")
    p.add_argument("--task", choices=TRAINABLE_TASKS,
                   help="seq2seq: UniLM sequence-to-sequence on {source, target} (or text_a, text_b) JSONL pairs, "
                        "from a folder with an MLM head; rerank: a cross-encoder for /rerank from {query, positive, "
                        "negative} JSONL (--loss=listwise|pairwise, --negatives=N, --in-batch-negatives=N), saved "
                        "as a pair-classification folder; simbert: SimBERT, seq2seq generation of the pair's other "
                        "text + in-batch retrieval on its sentence vectors, from {text_a, text_b} (or source, "
                        "target) pairs (--pooling=cls|mean, --scale=30, --similarity_weight=1); then bertkit "
                        "generate --similar")
    p.add_argument("--model", help="model folder to start from")
    p.add_argument("--train", help="training file: .jsonl/.tsv/.csv (classification), .jsonl/.conll (ner), "
                                   "SQuAD .json (qa), pairs .jsonl (seq2seq); .gz allowed")
    p.add_argument("--dev", help="dev file, evaluated every epoch (or --eval-every steps); picks the best model")
    p.add_argument("--output", help="folder for the best model")
    p.add_argument("--config", help="TOML file with FinetuneConfig keys")
    recipe = p.add_argument_group("training settings (default: the recipe picks each from the data and the model, "
                                  "prints its choice and writes run/recipe.json)")
    recipe.add_argument("--epochs", type=int)
    recipe.add_argument("--lr", type=float)
    recipe.add_argument("--head-lr", type=float, help="lr of a newly initialized task head (default 20 x lr)")
    recipe.add_argument("--batch-size", type=int)
    recipe.add_argument("--max-length", type=int, help="tokens per row; longer NER/QA inputs are windowed, longer "
                                                       "texts keep their head and tail")
    recipe.add_argument("--class-weights", choices=("auto", "none", "balanced", "sqrt"),
                        help="loss weights per label (auto: sqrt-balanced when the labels are skewed)")
    recipe.add_argument("--time-budget", help="wall-clock cap, e.g. 20m (off: none; default 30m when the recipe "
                                              "picks the epochs)")
    p.add_argument("--seed", type=int)
    p.add_argument("--warmup-ratio", type=float)
    p.add_argument("--schedule", choices=("linear", "cosine", "constant", "slanted_triangular"))
    p.add_argument("--eval-every", type=int, help="evaluate every N steps (default: every epoch)")
    p.add_argument("--metric", help="dev metric that picks the best model (default: the task's main metric)")
    p.add_argument("--early-stopping-patience", type=int, help="stop after N evaluations without improvement")
    p.add_argument("--layerwise-lr-decay", type=float, help="lr x d per layer below the top (e.g. 0.9)")
    p.add_argument("--gradual-unfreezing", action="store_true", default=None)
    p.add_argument("--aux-mlm-weight", type=float, metavar="G",
                   help="SiATL: add G x MLM loss on masked copies of the training texts (needs a folder with "
                        "an MLM head, e.g. from bertkit pretrain; --aux_mlm_decay=D multiplies G by D each epoch)")
    p.add_argument("--skip-bad-rows", action="store_true", default=None,
                   help="write bad rows to OUTPUT.rejects.jsonl and go on instead of stopping")
    p.add_argument("--encoding", help="input encoding, e.g. gb18030 (default utf-8)")
    p.add_argument("--max-train-examples", type=int, help="use only the first N training rows")
    p.add_argument("--max-dev-examples", type=int, help="use only the first N dev rows")
    p.add_argument("--device", help="cpu, cuda or auto")
    p.add_argument("--resume", action="store_true", default=None,
                   help="continue the interrupted run in --output from its last saved state (saved after each "
                        "evaluation and every --save-every steps)")
    p.add_argument("--save-every", type=int, help="also save the training state every N steps (for --resume)")
    p.add_argument("--method", choices=("finetune", "linear-probe", "hybrid"),
                   help="linear-probe: logistic regression on the frozen model's vectors (minutes on a CPU); "
                        "hybrid: that stacked with the TF-IDF baseline; default: fine-tune the whole model")
    p.add_argument("--no-baseline", action="store_true", default=None,
                   help="skip the TF-IDF baseline that is otherwise fitted on the same split and reported beside "
                        "the result (classification, pairs, regression)")
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
    p.add_argument("--data", required=True)
    p.add_argument("--task", choices=SAVED_TASKS, help="fail unless the model was fine-tuned for this task")
    p.add_argument("--encoding", default="utf-8")
    p.add_argument("--batch-size", type=int, default=64)
    add_precision_flag(p)
    p.set_defaults(func=run_evaluate_command)

    p = subparsers.add_parser("predict", help="predict labels, entities or answers for a file (JSONL out)")
    p.add_argument("--model", required=True)
    p.add_argument("--input", required=True, help=".jsonl/.tsv/.csv/.txt, .conll, or SQuAD .json; ner also takes "
                   "raw text (.txt lines or {\"text\": ...} JSONL), split into words as Model.predict splits it")
    p.add_argument("--output", required=True, help="output .jsonl")
    p.add_argument("--task", choices=SAVED_TASKS, help="fail unless the model was fine-tuned for this task")
    p.add_argument("--encoding", default="utf-8")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=64, help="seq2seq models: most tokens to generate per row")
    p.add_argument("--num-beams", type=int, default=1, help="seq2seq models: beam search width (1 = greedy)")
    p.add_argument("--no-repeat-ngram-size", type=int, default=0,
                   help="seq2seq models: never repeat an n-gram of the output (0 = off)")
    add_precision_flag(p)
    p.set_defaults(func=run_predict_command)


def _given_flags(args: argparse.Namespace) -> dict:
    given = {name: getattr(args, name) for name in _FLAGS if getattr(args, name) is not None}
    for flag in ("gradual_unfreezing", "skip_bad_rows", "ptuning", "freeze_encoder", "resume"):
        if getattr(args, flag):
            given[flag] = True
    for flag in ("template", "verbalizer"):
        if getattr(args, flag) is not None:
            given[flag] = getattr(args, flag)
    if args.no_baseline:
        given["baseline"] = False
    return given


def _job(given: dict):
    """The config and runner for the task: FinetuneConfig, or a bertkit.generate job's config."""
    prompt_flags = [f for f in ("template", "verbalizer", "ptuning", "freeze_encoder") if f in given]
    task = given.get("task")
    if task in (SEQ2SEQ, RERANK, SIMBERT) and prompt_flags:
        raise BertkitError(f"--{prompt_flags[0].replace('_', '-')} is for prompt-based classification, not "
                           f"--task {task}")
    if task == SEQ2SEQ:
        from bertkit.finetune.seq2seq.job import Seq2SeqConfig, run_seq2seq_finetune
        return Seq2SeqConfig, run_seq2seq_finetune, "--task seq2seq"
    if task == SIMBERT:
        from bertkit.finetune.seq2seq.simbert import SimBertConfig, run_simbert_finetune
        return SimBertConfig, run_simbert_finetune, "--task simbert"
    if task == RERANK:
        from bertkit.finetune.rerank import RerankConfig, run_rerank_finetune
        return RerankConfig, run_rerank_finetune, "--task rerank"
    if prompt_flags:
        if given.get("task", "classification") != "classification":
            raise BertkitError(f"--{prompt_flags[0].replace('_', '-')} (prompt-based classification) works with "
                               f"--task classification, not --task {given['task']}")
        from bertkit.finetune.prompt.job import PromptConfig, run_prompt_finetune
        return PromptConfig, run_prompt_finetune, "--template (prompt-based classification)"
    from bertkit.finetune.job import FinetuneConfig, run_finetune
    return FinetuneConfig, run_finetune, None


def run_finetune_command(args: argparse.Namespace) -> int:


    given = _given_flags(args)
    cls, run, job_name = _job(given)
    if job_name is not None:
        given.pop("task", None)
        fields = {f.name for f in dataclasses.fields(cls)}
        unsupported = [name for name in given if name not in fields]
        if unsupported:
            raise BertkitError(f"--{unsupported[0].replace('_', '-')} is not supported with {job_name}")
    config = load_config(cls, args.config, [])
    config = dataclasses.replace(config, **given)
    config = apply_overrides(config, args.overrides)
    result = run(config)
    print(json.dumps({"output": str(result.output), "dev": result.metrics, "epochs": result.epochs,
                      "steps": result.steps, "train_seconds": round(result.train_seconds, 1)}, indent=2))
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


def _generate_job_task(args: argparse.Namespace):
    """SEQ2SEQ or PROMPT when args.model is such a folder (checking --task against it), else None."""
    from bertkit.finetune.loop_job import saved_task

    task = saved_task(args.model)
    if task not in (SEQ2SEQ, PROMPT):
        return None
    accepted = {SEQ2SEQ: (SEQ2SEQ,), PROMPT: (PROMPT, "classification")}[task]
    if args.task is not None and args.task not in accepted:
        raise BertkitError(f"{args.model} was fine-tuned for {task!r}, not {args.task!r}")
    return task


def _model_in_precision(args: argparse.Namespace):
    """The folder path as is (fp32, or int8 for a quantized folder), or the model loaded in --precision; an
    ONNX export (a .onnx file or its folder) loaded, as it has no config.json for the folder readers."""
    from bertkit import api
    from bertkit.distill.onnx_model import onnx_file_of
    if args.precision is None and onnx_file_of(args.model) is None:
        return args.model
    model = api.load(args.model, precision=args.precision)
    say_precision(model, args.precision)
    return model


def _check_precision_for_generate_job(args: argparse.Namespace, task) -> None:
    if task is not None and args.precision not in (None, "fp32"):
        raise BertkitError(f"--precision {args.precision}: {args.model} is a {task} folder, which runs in fp32")


def run_evaluate_command(args: argparse.Namespace) -> int:
    from bertkit.finetune.predict import evaluate_file

    task = _generate_job_task(args)
    _check_precision_for_generate_job(args, task)
    if task == SEQ2SEQ:
        from bertkit.finetune.seq2seq.job import evaluate_seq2seq_file
        metrics = evaluate_seq2seq_file(args.model, args.data, args.encoding, args.batch_size)
    elif task == PROMPT:
        from bertkit.finetune.prompt.job import evaluate_prompt_file
        metrics = evaluate_prompt_file(args.model, args.data, args.encoding, args.batch_size)
    else:
        metrics = evaluate_file(_model_in_precision(args), args.data, args.encoding, args.batch_size, args.task)
    print(json.dumps(metrics, indent=2, ensure_ascii=False))
    return 0


def run_predict_command(args: argparse.Namespace) -> int:
    from bertkit.finetune.predict import predict_file

    task = _generate_job_task(args)
    _check_precision_for_generate_job(args, task)
    if task == SEQ2SEQ:
        from bertkit.finetune.seq2seq.job import predict_seq2seq_file
        count = predict_seq2seq_file(args.model, args.input, args.output, args.encoding, args.max_new_tokens,
                                     args.num_beams, args.no_repeat_ngram_size)
    elif task == PROMPT:
        from bertkit.finetune.prompt.job import predict_prompt_file
        count = predict_prompt_file(args.model, args.input, args.output, args.encoding, args.batch_size)
    else:
        count = predict_file(_model_in_precision(args), args.input, args.output, args.encoding, args.batch_size,
                             args.task)
    print(f"bertkit: wrote {count} predictions to {args.output}", file=sys.stderr)
    return 0
