"""The `bertkit` command: argparse subcommands, each a thin shell over one API call.

Each module listed in COMMAND_MODULES defines `register(subparsers)`, which adds its subcommands and sets
`func` (args -> exit code) on them. User errors (BertkitError) print one line and exit 2, no traceback;
bertkit's warnings (BertkitWarning) print one line each, `bertkit: warning: ...`, with no source path or line.
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path

from bertkit import __version__, progress
from bertkit.cli.flags import OLD_PROGRESS_BAR, add_deprecated_flag, config_key_flags, known_flags
from bertkit.errors import BertkitError, BertkitWarning

COMMAND_MODULES = [
    "bertkit.cli.model_commands",    # encode, convert, quickstart
    "bertkit.cli.vocab_commands",    # vocab train
    "bertkit.cli.finetune_commands", # finetune, baseline, evaluate, predict
    "bertkit.cli.serve_commands",    # serve
    "bertkit.cli.search_commands",   # index build|add|update|delete|info, search
    "bertkit.cli.pretrain_commands", # pretrain, evaluate-mlm
    "bertkit.cli.embed_commands",    # whiten, simcse, evaluate-embeddings, plot-embeddings
    "bertkit.cli.compress_commands", # export-onnx, quantize, prune-heads, distill
    "bertkit.cli.generate_commands", # generate, vocab-bpe
]


EPILOG = """\
every command also takes --quiet (no progress bars or progress lines), --progress / --no-progress (progress
bars on or off; default: each command's own) and, where it reads a config, --config FILE.toml plus
--section.key=value overrides. Exit codes: 0 ok; 2 bad input (a file, flag or value: one line naming it, nothing
already saved is lost); 1 internal error (a bug: please report it with the traceback); 130 interrupted."""


MISSING = ("the following arguments are required", "one of the arguments")   # argparse's errors for required flags


class OneLineErrors(argparse.ArgumentParser):
    """A bad flag is one line, like every other bad input (exit 2), pointing at --help instead of printing the
    usage block (45 lines for finetune). Subcommand parsers are of the same class (add_subparsers' default).
    An unknown flag is named before a missing required one (often the same flag, mistyped), with the closest
    known spelling; a job command's `--section.key=value` overrides are left to its config loader."""

    arguments: list[str] = []

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        self.arguments = list(sys.argv[1:] if args is None else args)     # for error(): parsed again
        namespace, extras = super().parse_known_args(args, namespace)
        overrides = getattr(namespace, "accepts_overrides", False)
        unknown = [item for item in extras if _is_flag(item) and not (overrides and "=" in item)]
        if unknown:
            self.exit(2, f"bertkit: error: {self._unknown_flag(unknown[0].split('=', 1)[0])}\n")
        return namespace, extras

    def error(self, message: str):
        if message.startswith(MISSING):
            with _nothing_required(self), warnings.catch_warnings():
                warnings.simplefilter("ignore")                 # a deprecated spelling warns once, not twice
                self.parse_known_args(self.arguments)           # exits naming an unknown flag, if one was given
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _unknown_flag(self, flag: str) -> str:
        command = self.prog.removeprefix("bertkit").strip()
        where = f"{command}: " if command else ""
        if flag in config_key_flags(self):
            return f"{where}{flag} takes its value after '=': {flag}=VALUE"
        known = known_flags(self)
        if flag in known:            # a real flag left over: it came after "--", which ends the flags
            return f"{where}{flag} comes after '--', which ends the flags; put the flags before it"
        extended = [name for name in known if flag.startswith((f"{name}-", f"{name}_"))]    # --lr-rate: --lr + words
        close = [max(extended, key=len)] if extended else difflib.get_close_matches(flag, known, n=1)
        return f"{where}unknown flag {flag}" + (f" (did you mean {close[0]}?)" if close else "")


def _is_flag(item: str) -> bool:
    """`--x`, `-x`, `--x=1`; not a value such as -5 or a lone `-` / `--`."""
    return item.startswith("-") and item.lstrip("-")[:1].isalpha()


@contextlib.contextmanager
def _nothing_required(parser: argparse.ArgumentParser) -> Iterator[None]:
    """Every flag, positional and mutually exclusive group of `parser` optional for a while."""
    items = [*parser._actions, *parser._mutually_exclusive_groups]
    saved = [item.required for item in items]
    for item in items:
        item.required = False
    try:
        yield
    finally:
        for item, required in zip(items, saved):
            item.required = required


def _version() -> str:
    """The installed distribution's version (bertkit.__version__ in a checkout that is not installed)."""
    try:
        return metadata.version("bertkit")
    except metadata.PackageNotFoundError:
        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(prog="bertkit", description="Tools for BERT-family language models.",
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"bertkit {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    for command in _leaf_parsers(parser):
        _add_console_flags(command)
    return parser


def _leaf_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    groups = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not groups:
        return [parser]
    return [leaf for group in groups for child in dict.fromkeys(group.choices.values()) for leaf in _leaf_parsers(child)]


def _add_console_flags(parser: argparse.ArgumentParser) -> None:
    """The one set of output flags, on every command (bertkit/progress.py)."""
    console = parser.add_argument_group("output")
    console.add_argument("--quiet", action="store_true", help="no progress bars or progress lines; results, "
                                                              "warnings and errors still print")
    console.add_argument("--progress", dest="progress", action="store_const", const=True, default=None,
                         help="draw progress bars even when stderr is not a terminal")
    console.add_argument("--no-progress", dest="progress", action="store_const", const=False,
                         help="no progress bars")
    if parser.get_default(OLD_PROGRESS_BAR):
        add_deprecated_flag(parser, "--progress-bar", "--progress")
        add_deprecated_flag(parser, "--no-progress-bar", "--no-progress")


def main(argv: list[str] | None = None) -> int:
    """Run one command. A reader that stops early (`bertkit index info | head`) closes the pipe: the command
    ends quietly, as Python's signal docs recommend: stdout is pointed at devnull so the interpreter's final
    flush cannot fail again, and the exit code is 1."""
    try:
        try:
            with warnings.catch_warnings():    # the hook below is undone when the command returns
                warnings.formatwarning = _one_line_warning(warnings.formatwarning)
                return _run(argv)
        finally:
            sys.stdout.flush()  # inside the try: a closed pipe surfaces here, not at interpreter shutdown
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "accepts_overrides", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides = extra
    progress.configure(progress=args.progress, quiet=args.quiet)
    code = 1
    try:
        code = int(args.func(args) or 0)
        return code
    except BertkitError as err:
        print(f"bertkit: error: {err}", file=sys.stderr)
        code = 2
        return code
    except KeyboardInterrupt:
        print(f"bertkit: interrupted{_resume_hint(args)}", file=sys.stderr)
        code = 130
        return code
    finally:
        _leave_process_group(wait_for_others=code == 0)


def _resume_hint(args: argparse.Namespace) -> str:
    """After Ctrl-C in a training command: where its last training state is, and the flag that continues it."""
    output = getattr(args, "output", None) or getattr(args, "cfg__output", None)
    if not isinstance(output, str) or "train.resume" not in getattr(args, "config_keys", ()):
        return ""
    from bertkit.train.checkpointing import state_path     # torch: loaded by the run already, not by --help
    from bertkit.train.fit import run_folder

    saved = state_path(run_folder(output))
    return f"; the last training state is in {saved.parent}: the same command with --resume continues from it" \
        if saved.is_file() else ""


def _one_line_warning(format_other):
    """A warnings.formatwarning that writes every warning as one line with no source path or line:
    bertkit's own as `bertkit: warning: <message>` (the message names the flag that changes the behaviour), a
    library's as `bertkit: warning: <package>: <Category>: <first line>` (torch, transformers, ... print the
    path of their source file and the line of code otherwise). A formatter, not a showwarning, so that callers
    recording warnings still record them; `format_other` is kept for the signature of the formatter it wraps."""
    def format(message, category, filename, lineno, line=None):
        if issubclass(category, BertkitWarning):
            return f"bertkit: warning: {' '.join(str(message).split())}\n"
        first = next((text for text in str(message).splitlines() if text.strip()), "")
        return f"bertkit: warning: {_package_of(filename)}: {category.__name__}: {' '.join(first.split())}\n"
    return format


def _package_of(filename: str) -> str:
    """The top-level package a warning came from: the folder after site-packages / dist-packages, else the file's
    own name (no path: it says where a library is installed, not what to do)."""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts and parts.index(marker) + 1 < len(parts):
            return Path(parts[parts.index(marker) + 1]).stem
    return Path(filename).stem


def _leave_process_group(wait_for_others: bool) -> None:
    """Under torchrun: leave the gloo/NCCL group before exit. A group still alive at interpreter shutdown can
    abort the process ("terminate called without an active exception") after the job itself succeeded, and so
    can a rank that tears its group down while rank 0 is still saving: on success every rank meets at a barrier
    first. After a failure nobody waits (the other ranks may never arrive)."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        if wait_for_others:
            distributed.barrier()
        distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
