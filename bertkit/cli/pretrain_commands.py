"""`bertkit pretrain` and `bertkit evaluate-mlm`: thin shells over bertkit.pretrain.job (BERT) and
bertkit.generate.pretrain_job (`--arch gpt`)."""
from __future__ import annotations

import argparse
import json

from bertkit.cli.flags import add_deprecated_flag
from bertkit.config import ConfigError, find_config, load_config
from bertkit.errors import BertkitError
from bertkit.pretrain.objectives import OBJECTIVES


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "pretrain", help="pre-train (or continue pre-training) a BERT or a GPT on raw text",
        description="Pre-train a BERT (MLM) or, with --arch gpt, a GPT-2-style causal LM on plain-text corpora "
                    "(one sentence or paragraph per line, a blank line between documents; UTF-8, .gz accepted). "
                    "GPT output is an HF GPT-2 folder for `bertkit generate`. Any config key can be set with "
                    "--section.key=value, e.g. --train.lr=5e-4 --data.batch_size=64. Run under "
                    "`torchrun --nproc_per_node=N -m bertkit pretrain ...` for several processes/GPUs.")
    p.add_argument("--arch", choices=["bert", "gpt", "xlnet"], default="bert",
                   help="bert: masked LM (default); gpt: GPT-2-style causal LM with a byte-level BPE vocab; "
                        "xlnet: --objective plm (permutation LM, an XLNetLMHeadModel folder)")
    p.add_argument("--corpus", nargs="+", required=True, metavar="FILE", help="corpus text files")
    p.add_argument("--output", required=True, metavar="DIR",
                   help="run folder; also the saved model folder (HF BertForMaskedLM / BertForPreTraining, "
                        "or GPT2LMHeadModel with --arch gpt)")
    p.add_argument("--config", metavar="TOML",
                   help="a TOML file, or a preset shipped with bertkit: tiny, tiny-zh, base, base-zh, large "
                        "(bert) or gpt-tiny (gpt)")
    p.add_argument("--model", dest="init", metavar="DIR",
                   help="continue pre-training this model folder, keeping its tokenizer")
    add_deprecated_flag(p, "--init", "--model")
    vocab = p.add_mutually_exclusive_group()
    vocab.add_argument("--vocab", metavar="DIR|FILE",
                       help="tokenizer folder or vocab.txt to use (gpt: a folder with a byte-level BPE tokenizer)")
    vocab.add_argument("--vocab-size", type=int,
                       help="train a vocab of this size on the corpus (WordPiece; byte-level BPE for gpt)")
    p.add_argument("--objective", choices=list(OBJECTIVES),
                   help="not with --arch gpt; electra saves the discriminator as the model folder and the "
                        "generator in <output>/generator; plm is XLNet's (= --arch xlnet)")
    p.add_argument("--masking", choices=["token", "whole-word", "span", "phrase", "entity"],
                   help="bert only; phrase / entity: ERNIE 1.0 knowledge masking, whole phrases (jieba words with "
                        "--data.segmenter=jieba, else whitespace words) or --lexicon entries masked as units")
    p.add_argument("--lexicon", metavar="FILE", help="phrases or entities, one per line, masked as units")
    limit = p.add_mutually_exclusive_group()
    limit.add_argument("--max-steps", type=int)
    limit.add_argument("--time-budget", metavar="T", help="fit the schedule to wall-clock time: 30m, 2h, ...")
    p.add_argument("--resume", action="store_true", help="continue the interrupted run in --output exactly")
    p.set_defaults(func=run_pretrain, accepts_overrides=True)

    e = subparsers.add_parser("evaluate-mlm", help="held-out MLM loss / accuracy / perplexity of a model",
                              description="Mask a corpus (15%, fixed seed) and print JSON with loss, "
                                          "mlm_accuracy, perplexity and the number of predicted tokens.")
    e.add_argument("--model", required=True, metavar="DIR")
    e.add_argument("--corpus", nargs="+", required=True, metavar="FILE")
    e.add_argument("--max-length", type=int, default=128)
    e.add_argument("--batch-size", type=int, default=32)
    e.add_argument("--masking", choices=["token", "whole-word", "span"], default="token")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--device", default="auto")
    e.set_defaults(func=run_evaluate_mlm)


def _limit_flags(args: argparse.Namespace) -> list[str]:
    flags = []
    if args.vocab_size:
        flags.append(f"vocab.vocab_size={args.vocab_size}")
    if args.max_steps is not None:
        flags += [f"train.max_steps={args.max_steps}", "train.time_budget=none"]
    if args.time_budget:
        flags += [f"train.time_budget={args.time_budget}", "train.max_steps=none"]
    if args.resume:
        flags.append("train.resume=true")
    return flags


def _load(cls, args: argparse.Namespace, flags: list[str]):
    """The job config; a --config preset written for the other --arch gets a hint instead of a bare key error."""

    path = find_config(args.config, "pretrain") if args.config else None
    try:
        return load_config(cls, path, flags + list(args.overrides))
    except ConfigError as err:
        if not args.config:
            raise
        presets = {"bert": "tiny", "gpt": "gpt-tiny"}
        other = "gpt" if args.arch == "bert" else "bert"
        raise ConfigError(f"{err} (is {args.config} a preset for --arch {other}? --arch {args.arch} takes presets "
                          f"such as {presets[args.arch]})") from None


def run_pretrain(args: argparse.Namespace) -> int:
    if args.arch == "gpt":
        return run_pretrain_gpt(args)
    from bertkit.pretrain.config import PretrainConfig
    from bertkit.pretrain.job import run_pretraining

    flags = []
    if args.arch == "xlnet":
        if args.objective not in (None, "plm"):
            raise BertkitError(f"--arch xlnet trains the permutation LM (--objective plm), not {args.objective}")
        args.objective = "plm"
    if args.objective:
        flags.append(f"data.objective={args.objective}")
    if args.masking:
        flags.append(f"data.masking={args.masking}")
    if args.lexicon:
        flags.append(f"data.lexicon={args.lexicon}")
    config = _load(PretrainConfig, args, flags + _limit_flags(args))
    result = run_pretraining(config, args.corpus, args.output, init=args.init, vocab=args.vocab)
    summary = {"model": str(result.model_dir), "steps": result.train.steps, "stop_reason": result.train.stop_reason,
               "last_loss": result.train.losses[-1] if result.train.losses else None, **{
                   f"eval_{k}": v for k, v in result.train.last_eval.items()}}
    from bertkit.train.distributed import rank
    if rank() == 0:
        print(json.dumps(summary))
    return 0


def run_pretrain_gpt(args: argparse.Namespace) -> int:
    from bertkit.generate.pretrain_job import GPTPretrainConfig, run_gpt_pretraining
    from bertkit.train.distributed import rank

    for flag, value in (("--objective", args.objective), ("--masking", args.masking), ("--lexicon", args.lexicon)):
        if value:
            raise BertkitError(f"{flag} {value} is a masked-LM (BERT) setting; --arch gpt always trains next-token "
                               f"prediction on whole documents: drop {flag}")
    config = _load(GPTPretrainConfig, args, _limit_flags(args))
    result = run_gpt_pretraining(config, args.corpus, args.output, init=args.init, vocab=args.vocab)
    summary = {"model": str(result.model_dir), "arch": "gpt", "steps": result.train.steps,
               "stop_reason": result.train.stop_reason,
               "last_loss": result.train.losses[-1] if result.train.losses else None,
               **{f"eval_{k}": v for k, v in result.train.last_eval.items()},
               "unigram_perplexity": result.unigram_perplexity}
    if rank() == 0:
        print(json.dumps(summary))
    return 0


def run_evaluate_mlm(args: argparse.Namespace) -> int:
    from bertkit.pretrain.job import evaluate_mlm_on_corpus

    metrics = evaluate_mlm_on_corpus(args.model, args.corpus, args.max_length, args.batch_size, args.masking,
                                     args.seed, args.device)
    print(json.dumps(metrics))
    return 0
