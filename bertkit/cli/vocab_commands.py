"""`bertkit vocab train` / `bertkit vocab extend`: thin shells over bertkit.tokenizer.train_wordpiece and
bertkit.pretrain.extend_vocab."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bertkit.cli.flags import add_deprecated_flag
from bertkit.errors import BertkitError


def register(subparsers) -> None:
    vocab = subparsers.add_parser("vocab", help="vocabulary tools: train a WordPiece vocab, or extend a model's")
    actions = vocab.add_subparsers(dest="vocab_command", metavar="ACTION")
    actions.required = True
    p = actions.add_parser("train", help="train a BERT WordPiece vocab on text files",
                           description="Train a BERT WordPiece vocabulary on text files (UTF-8, .gz accepted, "
                                       "one sentence or paragraph per line) and write vocab.txt, tokenizer.json "
                                       "and tokenizer_config.json, which bertkit and Hugging Face load.")
    p.add_argument("--corpus", nargs="+", metavar="FILE", help="text files (required)")
    add_deprecated_flag(p, "--input", "--corpus")
    p.add_argument("--output", required=True, metavar="DIR", help="folder to write the tokenizer files into")
    p.add_argument("--vocab-size", type=int, default=30522, help="tokens in the vocab (default: BERT's 30522)")
    casing = p.add_mutually_exclusive_group()
    casing.add_argument("--lowercase", dest="lowercase", action="store_true", default=True,
                        help="uncased: lowercase and strip accents (default)")
    casing.add_argument("--cased", dest="lowercase", action="store_false", help="keep case and accents")
    p.add_argument("--min-frequency", type=int, default=2, help="least count for a merged piece (default 2)")
    p.add_argument("--unused", type=int, default=100, help="[unusedN] slots reserved after the special tokens")
    p.add_argument("--limit-alphabet", type=int, default=None,
                   help="most single characters kept (default: max(1000, vocab-size / 4), raised while the "
                        "vocab has room for characters seen --min-frequency times)")
    p.add_argument("--encoding", default="utf-8", help="input file encoding, e.g. gb18030")
    p.set_defaults(func=run_train)
    e = actions.add_parser("extend", help="add a corpus's [UNK] characters (e.g. CJK) to a model's vocab",
                           description="Append the characters of a corpus that the model's WordPiece vocab maps to "
                                       "[UNK] (CJK characters for an English vocab) as new tokens, with new embedding "
                                       "rows (the mean of the existing ones), and write the model to --output. Old "
                                       "ids and weights are unchanged; continue MLM pre-training (`bertkit pretrain "
                                       "--model OUTPUT --corpus FILE`) so the new rows learn.")
    e.add_argument("--model", required=True, metavar="DIR", help="model folder with a WordPiece vocab")
    e.add_argument("--corpus", required=True, nargs="+", metavar="FILE", help="text files (UTF-8, .gz accepted)")
    e.add_argument("--output", required=True, metavar="DIR", help="folder to write the extended model into")
    e.add_argument("--min-count", type=int, default=2,
                   help="add a character seen at least this often (default 2: a one-off stays [UNK])")
    e.add_argument("--init", choices=("mean", "unk"), default="mean",
                   help="new embedding rows: the mean of the existing rows (default) or copies of [UNK]'s")
    e.add_argument("--encoding", default="utf-8", help="corpus encoding, e.g. gb18030")
    e.set_defaults(func=run_extend)


def run_train(args: argparse.Namespace) -> int:
    from bertkit.checkpoints.weights import holds_model
    from bertkit.tokenizer.train import train_wordpiece

    if not args.corpus:
        raise BertkitError("vocab train needs --corpus FILE [FILE ...]")
    output = Path(args.output)
    if holds_model(output):
        raise BertkitError(f"--output {output} holds a model; a new vocabulary there would no longer match its "
                           "weights (write it to a new folder, or grow the model's own with `bertkit vocab extend`)")
    if output.exists() and not output.is_dir():
        raise BertkitError(f"--output {output} is a file; name a folder for the tokenizer files")
    for flag, value, least in (("--min-frequency", args.min_frequency, 0), ("--unused", args.unused, 0),
                               ("--limit-alphabet", args.limit_alphabet, 1)):
        if value is not None and value < least:
            raise BertkitError(f"{flag} must be >= {least}, got {value}")
    tokenizer = train_wordpiece(args.corpus, vocab_size=args.vocab_size, lowercase=args.lowercase,
                                min_frequency=args.min_frequency, num_unused=args.unused,
                                limit_alphabet=args.limit_alphabet, encoding=args.encoding)
    tokenizer.save(args.output)
    casing = "uncased" if tokenizer.lowercase else "cased"
    print(f"trained a WordPiece vocab ({casing}) of {tokenizer.vocab_size} tokens on {len(args.corpus)} file(s) "
          f"-> {args.output} (vocab.txt, tokenizer.json, tokenizer_config.json)", file=sys.stderr)
    return 0


def run_extend(args: argparse.Namespace) -> int:
    from bertkit.pretrain.extend_vocab import corpus_text, extend_vocab

    if args.min_count < 1:
        raise BertkitError(f"vocab extend: --min-count {args.min_count} must be at least 1")
    result = extend_vocab(args.model, corpus_text(args.corpus, args.encoding), args.output, args.min_count, args.init)
    shown = "".join(result.added[:20]) + (" ..." if len(result.added) > 20 else "")
    if not result.added:
        print(f"added no tokens: no character seen --min-count {args.min_count} times is missing from the vocab "
              f"([UNK] share of the corpus's characters {result.unknown_before:.1%}) -> "
              + ("nothing written" if Path(args.output).resolve() == Path(args.model).resolve()
                 else f"{args.output}, a copy of the model"), file=sys.stderr)
        return 0
    print(f"added {len(result.added)} tokens ({result.old_size} -> {result.new_size}): {shown}; [UNK] share of the "
          f"corpus's characters {result.unknown_before:.1%} -> {result.unknown_after:.1%} -> {args.output}. "
          f"Continue MLM pre-training so the new rows learn: bertkit pretrain --model {args.output} --corpus ...",
          file=sys.stderr)
    return 0
