"""`bertkit pretrain` and `bertkit evaluate-mlm`: thin shells over bertkit.pretrain.job (BERT) and
bertkit.generate.pretrain_job (`--arch gpt`)."""
from __future__ import annotations

import argparse
import json
import typing

from bertkit.cli.flags import (add_config_flags, add_deprecated_flag, config_fields, config_from_args, field_comments,
                               given_flags, positive_int)
from bertkit.errors import ConfigError
from bertkit.errors import BertkitError
from bertkit.pretrain.objectives import OBJECTIVES


# Old spellings, kept as aliases of the generated flags (--section.key-name): {alias: dotted field}
ALIASES = {"vocab-size": "vocab.vocab_size", "max-steps": "train.max_steps", "time-budget": "train.time_budget",
           "resume": "train.resume", "encoding": "data.encoding"}
# The masked-LM choices stay written by hand, as they were: with --arch gpt each is refused by its flag's name, and
# the --data.objective=... / --data.masking=... spellings stay overrides, checked by the job (one line naming them)
MASKED_LM = {"data.objective": "objective", "data.masking": "masking", "data.lexicon": "lexicon"}
# Set by fit (the run folder, the metric that picks a model), by the global --progress / --no-progress, or by the
# job from the tokenizer (the encoder's vocabulary size and padding id): no flags (a TOML key or override still parses)
NOT_FLAGS = {"train.output_dir", "train.metric_for_best", "train.best_to_beat", "train.tie_breaker",
             "train.progress_bar", "encoder.vocab_size", "encoder.pad_token_id"}


def _bert_config() -> type:
    from bertkit.pretrain.config import PretrainConfig
    return PretrainConfig


def _gpt_config() -> type:
    from bertkit.generate.pretrain_config import GPTPretrainConfig
    return GPTPretrainConfig


def _comment(cls: type, dotted: str) -> str:
    """The source comment of the field `dotted` ("data.block_size") of the config `cls`."""
    *sections, leaf = dotted.split(".")
    for section in sections:
        cls = typing.get_type_hints(cls)[section]
    return field_comments(cls).get(leaf, "")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "pretrain", help="pre-train (or continue pre-training) a BERT or a GPT on raw text",
        description="Pre-train a BERT (MLM) or, with --arch gpt, a GPT-2-style causal LM on plain-text corpora "
                    "(one sentence or paragraph per line, a blank line between documents; UTF-8, .gz accepted). "
                    "GPT output is an HF GPT-2 folder for `bertkit generate`. Every setting is a flag generated from "
                    "the job's config (PretrainConfig; GPTPretrainConfig with --arch gpt, whose own defaults apply "
                    "then), e.g. --train.lr 5e-4 --data.batch-size 64; --section.key=value works too. Run under "
                    "`torchrun --nproc_per_node=N -m bertkit pretrain ...` for several processes/GPUs.")
    p.add_argument("--arch", choices=["bert", "gpt", "xlnet"], default="bert",
                   help="bert: masked LM (default); gpt: GPT-2-style causal LM with a byte-level BPE vocab; "
                        "xlnet: --objective plm (permutation LM, an XLNetLMHeadModel folder)")
    p.add_argument("--corpus", nargs="+", required=True, metavar="FILE", help="corpus text files")
    p.add_argument("--output", required=True, metavar="DIR",
                   help="the saved model folder (HF BertForMaskedLM / BertForPreTraining, or GPT2LMHeadModel with "
                        "--arch gpt), with the run record in DIR/run/")
    p.add_argument("--config", metavar="TOML",
                   help="a TOML file, or a preset shipped with bertkit: tiny, tiny-zh, base, base-zh, large "
                        "(bert) or gpt-tiny (gpt); the flags and --section.key=value overrides win over it")
    p.add_argument("--model", dest="init", metavar="DIR",
                   help="continue pre-training this model folder, keeping its tokenizer")
    add_deprecated_flag(p, "--init", "--model")
    vocab = p.add_mutually_exclusive_group()
    vocab.add_argument("--vocab", metavar="DIR|FILE",
                       help="tokenizer folder or vocab.txt to use (gpt: a folder with a byte-level BPE tokenizer)")
    limit = p.add_mutually_exclusive_group()
    groups = {"vocab.vocab_size": vocab, "train.max_steps": limit, "train.time_budget": limit}
    p.add_argument("--objective", choices=list(OBJECTIVES),
                   help="not with --arch gpt; electra saves the discriminator as the model folder and the "
                        "generator in <output>/generator; plm is XLNet's (= --arch xlnet) (default: mlm)")
    p.add_argument("--masking", choices=["token", "whole-word", "span", "phrase", "entity"],
                   help="bert only; phrase / entity: ERNIE 1.0 knowledge masking, whole phrases (jieba words with "
                        "--data.segmenter=jieba, else whitespace words) or --lexicon entries masked as units "
                        "(default: token)")
    p.add_argument("--lexicon", metavar="FILE", help="phrases or entities, one per line, masked as units")
    help = {            "vocab.vocab_size": "train a vocab of this size on the corpus (WordPiece; byte-level BPE for gpt)",
            "train.max_steps": "optimizer steps (unsets --time-budget)",
            "train.time_budget": "fit the schedule to wall-clock time: 30m, 2h, ... (unsets --max-steps)",
            "train.resume": "continue the interrupted run in --output exactly, with its settings (only the length "
                            "and the eval / save / log intervals may change)"}
    bert, gpt = _bert_config(), _gpt_config()
    add_config_flags(p, bert, skip=NOT_FLAGS | set(MASKED_LM), aliases=ALIASES, help=help, group_of=groups,
                     config_flag=False, bool_values=True)
    bert_fields = {dotted for dotted, _, _ in config_fields(bert)}
    gpt_only = {dotted: f"{_comment(gpt, dotted)} (--arch gpt)" for dotted, _, _ in config_fields(gpt)
                if dotted not in bert_fields}
    add_config_flags(p, gpt, skip=bert_fields | NOT_FLAGS | set(MASKED_LM), help=gpt_only, config_flag=False, bool_values=True)
    p.set_defaults(func=run_pretrain, accepts_overrides=True)

    e = subparsers.add_parser("evaluate-mlm", help="held-out MLM loss / accuracy / perplexity of a model",
                              description="Mask a corpus (15%, fixed seed) and print JSON with loss, "
                                          "mlm_accuracy, perplexity and the number of predicted tokens.")
    e.add_argument("--model", required=True, metavar="DIR")
    e.add_argument("--corpus", nargs="+", required=True, metavar="FILE")
    e.add_argument("--max-length", type=int, default=128)
    e.add_argument("--batch-size", type=positive_int, default=32)
    e.add_argument("--masking", choices=["token", "whole-word", "span"], default="token")
    e.add_argument("--segmenter", choices=["none", "jieba"], default="none",
                   help="jieba: Chinese words for whole-word / span masking, as pretrain --data.segmenter "
                        "(default: none, each Chinese character a word)")
    e.add_argument("--encoding", default="utf-8", help="of the corpus files (gb18030 for GBK Chinese text)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--device", default="auto")
    e.set_defaults(func=run_evaluate_mlm)


def pretrain_config(args: argparse.Namespace):
    """The job config of `args.arch` from its defaults, --config, the generated flags given, then the
    --section.key=value overrides. --max-steps and --time-budget each unset the other (a preset may set either)."""
    given = given_flags(args)
    given.update({dotted: getattr(args, name) for dotted, name in MASKED_LM.items() if getattr(args, name)})
    if "train.max_steps" in given and "train.time_budget" not in given:
        given["train.time_budget"] = None
    if "train.time_budget" in given and "train.max_steps" not in given:
        given["train.max_steps"] = None
    if args.arch == "xlnet":
        if given.get("data.objective") not in (None, "plm"):
            raise BertkitError(f"--arch xlnet trains the permutation LM (--objective plm), not "
                               f"{given['data.objective']}")
        given["data.objective"] = "plm"
    if args.arch == "gpt":
        for dotted, flag in (("data.objective", "--objective"), ("data.masking", "--masking"),
                             ("data.lexicon", "--lexicon")):
            if dotted in given:
                raise BertkitError(f"{flag} {given[dotted]} is a masked-LM (BERT) setting; --arch gpt always trains "
                                   f"next-token prediction on whole documents: drop {flag}")
    cls = _gpt_config() if args.arch == "gpt" else _bert_config()
    try:
        return config_from_args(cls, args, "pretrain", given)
    except ConfigError as err:
        # a config of the other arch has keys this one lacks: say so only when --config is one (an unknown key of a
        # flag, an override or a typo in the user's own file is not)
        other_cls = _bert_config() if args.arch == "gpt" else _gpt_config()
        if not args.config or "unknown key" not in str(err) or not _loads_alone(other_cls, args.config):
            raise
        presets = {"bert": "tiny", "gpt": "gpt-tiny"}
        arch = "gpt" if args.arch == "gpt" else "bert"
        other = "gpt" if arch == "bert" else "bert"
        raise ConfigError(f"{err} (is {args.config} a preset for --arch {other}? --arch {arch} takes presets "
                          f"such as {presets[arch]})") from None


def _loads_alone(cls, config: str) -> bool:
    """Whether the --config file or preset loads into `cls` without any flag or override."""
    try:
        config_from_args(cls, argparse.Namespace(config=config), "pretrain", {})
    except ConfigError:
        return False
    return True


def run_pretrain(args: argparse.Namespace) -> int:
    from bertkit.train.distributed import rank

    config = pretrain_config(args)
    if args.arch == "gpt":
        from bertkit.generate.pretrain_job import run_gpt_pretraining

        result = run_gpt_pretraining(config, args.corpus, args.output, init=args.init, vocab=args.vocab)
        extra = {"unigram_perplexity": result.unigram_perplexity}
    else:
        from bertkit.pretrain.job import run_pretraining

        result, extra = run_pretraining(config, args.corpus, args.output, init=args.init, vocab=args.vocab), {}
    summary = {"model": str(result.model_dir), **({"arch": "gpt"} if args.arch == "gpt" else {}),
               "steps": result.train.steps, "stop_reason": result.train.stop_reason,
               "last_loss": result.train.losses[-1] if result.train.losses else None,
               **{f"eval_{k}": v for k, v in result.train.last_eval.items()}, **extra}
    if rank() == 0:
        print(json.dumps(summary))
    return 0


def run_evaluate_mlm(args: argparse.Namespace) -> int:
    from bertkit.pretrain.job import evaluate_mlm_on_corpus

    metrics = evaluate_mlm_on_corpus(args.model, args.corpus, args.max_length, args.batch_size, args.masking,
                                     args.seed, args.device, args.segmenter, args.encoding)
    print(json.dumps(metrics))
    return 0
