"""Command-line flags generated from a config dataclass, and the parsed flags turned back into the config.

`add_config_flags(parser, Config)` adds one flag per field: `--field-name` (a nested section's field:
`--section.field-name`), bool fields as `--x / --no-x`, Literal fields with their choices, every default shown,
help taken from the comment on (or just above) the field. `config_from_args(Config, args)` builds the config
through the one loader, bertkit/config.py: defaults, then `--config FILE.toml`, then the flags given, then
`--section.key=value` overrides; so every command types, checks and reports its settings the same way (a bad
value is one line naming the field, exit 2). Flags not given leave the file's (or the default's) value.

`aliases` adds short spellings beside the generated one (`{"lr": "train.lr"}`); `deprecated` keeps an old
spelling working with one warning line, `bertkit: warning: --old is deprecated; use --new`.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import re
import types
import typing
import warnings
from typing import Any, Iterable, Optional

from bertkit.config import find_config, load_config
from bertkit.errors import BertkitError, BertkitWarning
from bertkit.options import LAYER_STRATEGIES, LAYERS_HELP, parse_layers, repetition_problem

def positive_int(value: str) -> int:
    """argparse `type` of count flags (--batch-size): a whole number >= 1 (0 or -2 would run and misbehave)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def layers_flag(value: str) -> str:
    """argparse `type` of every --layers flag: options.parse_layers, its error as argparse's (exit 2)."""
    try:
        return parse_layers(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--layers ")) from None


def add_layers_flag(parser, default_help: str) -> None:
    """The one --layers flag (encode, index build, whiten, evaluate-/plot-embeddings, serve)."""
    parser.add_argument("--layers", type=layers_flag, default=None, metavar="NAME|I,J,...",
                        help=f"{', '.join(LAYER_STRATEGIES)}; or {LAYERS_HELP} ({default_help})")


FIELDS_KEY = "config_flags"      # the namespace attribute listing (dest, dotted field) of the generated flags
KEYS_KEY = "config_keys"         # ... and every dotted key of the config, with a flag or not (--section.key=value)


def check_stride_flag(args: argparse.Namespace) -> None:
    """--stride is the sliding-window overlap: given with another --long-texts it did nothing, silently."""
    if args.stride is not None and args.long_texts != "sliding-window":
        raise BertkitError(f"--stride {args.stride} is the overlap of --long-texts sliding-window, not of "
                           f"--long-texts {args.long_texts}; add --long-texts sliding-window, or leave --stride out")


def flag_name(dotted: str) -> str:
    """`options.doc_stride` -> `--options.doc-stride`."""
    return "--" + dotted.replace("_", "-")


def _dest(dotted: str) -> str:
    return "cfg__" + dotted.replace(".", "__")


def config_fields(cls: type, prefix: str = "", defaults: Any = None) -> list[tuple[str, Any, Any]]:
    """(dotted name, annotation, default) for every leaf field of `cls`, nested sections flattened; a section's
    defaults are the ones `cls` gives it (its default_factory), not its class's."""
    hints = typing.get_type_hints(cls)
    defaults = cls() if defaults is None else defaults  # type: ignore[call-arg]
    rows = []
    for field in dataclasses.fields(cls):
        annotation, default = hints[field.name], getattr(defaults, field.name)
        if dataclasses.is_dataclass(annotation):
            rows += config_fields(type(default), f"{prefix}{field.name}.", default)
        else:
            rows.append((f"{prefix}{field.name}", annotation, default))
    return rows


@functools.lru_cache(maxsize=None)
def field_comments(cls: type) -> dict[str, str]:
    """Field name -> its source comment: the trailing `# ...` on its line (with the `# ...` lines indented under it
    that continue it), else the `# ...` lines just above; tool pragmas (`type: ignore[...]`, `noqa`) left out. A
    field a dataclass inherits has its base class's comment unless it redefines the field with one."""
    inherited = {}
    for base in reversed(cls.__mro__[1:]):
        if dataclasses.is_dataclass(base):
            inherited.update(_own_comments(base))
    return {**inherited, **_own_comments(cls)}


_PRAGMA = re.compile(r"\s*(?:type:\s*ignore\b|noqa\b|pragma:)")


def _without_pragmas(comment: str) -> str:
    """`type: ignore[assignment]  # None: the recipe's` -> `None: the recipe's`."""
    return "#".join(part for part in comment.split("#") if not _PRAGMA.match(part)).strip()


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _own_comments(cls: type) -> dict[str, str]:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    above: list[str] = []
    trailing: str | None = None     # the field whose trailing comment the next deeper `# ...` lines continue
    indent = 0
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            text = _without_pragmas(stripped.lstrip("#"))
            if trailing is not None and _indent(line) > indent:
                comments[trailing] = f"{comments[trailing]} {text}".strip()
            elif text:
                above.append(text)
            continue
        trailing = None
        match = re.match(r"\s+(\w+)\s*:[^#]*?(?:#\s*(.*))?$", line)
        if match and not stripped.startswith(("def ", "class ", "return", "@")):
            own = _without_pragmas(match.group(2) or "")
            text = own or " ".join(above)
            if text and match.group(1) not in comments:
                comments[match.group(1)] = text
                trailing, indent = (match.group(1) if own else None), _indent(line)
        above = []
    return comments


def _choices(annotation: Any) -> Optional[tuple]:
    inner = _without_none(annotation)
    return typing.get_args(inner) if typing.get_origin(inner) is typing.Literal else None


def _without_none(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _metavar(annotation: Any) -> str:
    inner = _without_none(annotation)
    origin = typing.get_origin(inner)
    if origin in (list, tuple):
        return "A,B,..."
    return {int: "N", float: "X"}.get(inner, "TEXT")


def _negative(option: str) -> str:
    """`--verbose` -> `--no-verbose`; `--train.shuffle` -> `--train.no-shuffle`."""
    head, dot, leaf = option[2:].rpartition(".")
    return f"--{head}{dot}no-{leaf}"


class _Switch(argparse.Action):
    """A bool field: `--x` stores "true", `--no-x` "false" (strings, typed by the config loader like any value)."""

    def __init__(self, option_strings, dest, negatives=(), explicit=False, **kwargs):
        self.negatives = set(negatives)
        # explicit: `--x=false` too (a value right after the flag, as the config loader reads it)
        super().__init__(option_strings, dest, nargs="?" if explicit else 0, default=argparse.SUPPRESS,
                         metavar="true|false" if explicit else None, **kwargs)

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)

    def __call__(self, parser, namespace, values, option_string=None):
        value = "true" if values in (None, []) else values
        if option_string in self.negatives:
            value = {"true": "false", "false": "true"}.get(str(value).lower(), value)
        setattr(namespace, self.dest, value)


class _Deprecated(argparse.Action):
    """An old spelling: stores like the new flag, and says once that it is deprecated."""

    def __init__(self, option_strings, dest, new_flag: str, const=None, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, const=const, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        warnings.warn(f"{option_string} is deprecated; use {self.new_flag}", BertkitWarning, stacklevel=2)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def check_repetition_flags(args: argparse.Namespace) -> None:
    """--no-repeat-ngram-size / --repetition-penalty (generate, predict), checked before any model is loaded;
    None = not given (the command's default applies)."""
    size, penalty = args.no_repeat_ngram_size, args.repetition_penalty
    problem = repetition_problem(0 if size is None else size, 1.0 if penalty is None else penalty,
                                 ("--no-repeat-ngram-size", "--repetition-penalty"))
    if problem is not None:
        raise BertkitError(problem)


def add_deprecated_flag(parser: argparse.ArgumentParser, old: str, new: str, nargs=None) -> None:
    """Keep `old` (e.g. "--data") working as a hidden spelling of the flag `new` (e.g. "--input"), with one
    deprecation line. `new` must be added first; it cannot be required=True (argparse would not see it given)."""
    action = next(a for a in parser._actions if new in a.option_strings)
    const = "true" if isinstance(action, _Switch) else action.const      # a bool field's old spelling turns it on
    parser.add_argument(old, dest=action.dest, action=_Deprecated, new_flag=new, nargs=action.nargs if nargs is None
                        else nargs, const=const, default=argparse.SUPPRESS, metavar=action.metavar,
                        help=f"deprecated: use {new}")


OLD_PROGRESS_BAR = "old_progress_bar_flags"    # a parser default: the command once had --progress-bar (its field)


def skip_progress_bar_field(parser: argparse.ArgumentParser) -> set[str]:
    """For a config with a `progress_bar` field (finetune, simcse, distill): the global --progress / --no-progress
    is the one flag for it; the console flags (cli/__init__.py) add the old --progress-bar / --no-progress-bar as
    deprecated spellings of them. Returns the `skip` for add_config_flags. (`progress_bar = false` in a --config
    file and the --progress_bar=false override still set the field.)"""
    parser.set_defaults(**{OLD_PROGRESS_BAR: True})
    return {"train.progress_bar"}


def add_config_flags(parser: argparse.ArgumentParser, cls: type, *, skip: Iterable[str] = (),
                     aliases: dict[str, str] | None = None, deprecated: dict[str, str] | None = None,
                     help: dict[str, str] | None = None, choices: dict[str, tuple] | None = None,
                     group_of: dict[str, Any] | None = None, metavars: dict[str, str] | None = None,
                     config_flag: bool = True, bool_values: bool = False) -> None:
    """One flag per field of `cls` (nested sections flattened), except the dotted names in `skip`.

    aliases: {alias: dotted field}, extra spellings shown beside the generated flag (`{"lr": "train.lr"}`).
    deprecated: {old spelling: dotted field}, accepted with a one-line deprecation warning.
    help / choices: per dotted field, replacing the source comment / the Literal's choices.
    group_of: per dotted field, the argparse group to put the flag in (default: the parser).
    metavars: per dotted field, the placeholder shown in --help (default: N, X, TEXT or A,B,... by type).
    config_flag: also add `--config FILE.toml` (a file, or a preset name).
    bool_values: a bool flag also takes a value, `--x=false` (for a command whose `--section.key=value` overrides
    came before its generated flags: that spelling keeps working); off, `--x` / `--no-x` only.
    A second call on the same parser adds the fields of another config (skip the dotted names the first added).
    """
    skip, aliases, deprecated = set(skip), aliases or {}, deprecated or {}
    help, choices, group_of, metavars = help or {}, choices or {}, group_of or {}, metavars or {}
    fields = list(parser.get_default(FIELDS_KEY) or ())    # a second call (another config's fields) adds to them
    if config_flag:
        parser.add_argument("--config", metavar="FILE.toml",
                            help=f"TOML file with {cls.__name__} keys (sections as [tables]); the flags below "
                                 "and --section.key=value overrides win over it")
    for dotted, annotation, default in config_fields(cls):
        if dotted in skip:
            continue
        name, dest = flag_name(dotted), _dest(dotted)
        section, _, leaf = dotted.rpartition(".")
        owner = _section_class(cls, section)
        text = help.get(dotted) or field_comments(owner).get(leaf, "")
        shown = "none" if default is None else str(default).lower() if isinstance(default, bool) else default
        if default != "":
            text = f"{text} (default: {shown})" if text else f"default: {shown}"
        names = [name] + [f"--{alias}" for alias, target in aliases.items() if target == dotted]
        target = group_of.get(dotted, parser)
        is_bool = _without_none(annotation) is bool
        if is_bool:
            negatives = [_negative(option) for option in names]
            target.add_argument(*names, *negatives, dest=dest, action=_Switch, negatives=negatives,
                                explicit=bool_values, help=text.replace("%", "%%"))
        else:
            target.add_argument(*names, dest=dest, default=argparse.SUPPRESS, choices=choices.get(dotted) or
                                _choices(annotation), metavar=None if _choices(annotation) or dotted in choices
                                else metavars.get(dotted) or _metavar(annotation), help=text.replace("%", "%%"))
        for old, new_target in deprecated.items():
            if new_target == dotted:
                add_deprecated_flag(parser, f"--{old}", name, nargs=0 if is_bool else None)
        fields.append((dest, dotted))
    keys = (*(parser.get_default(KEYS_KEY) or ()), *(dotted for dotted, _, _ in config_fields(cls)))
    parser.set_defaults(**{FIELDS_KEY: tuple(fields), KEYS_KEY: tuple(dict.fromkeys(keys))})


def config_key_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The command's config keys spelled as flags, `--section.key-name` (given as `--section.key-name=value`)."""
    return [flag_name(dotted) for dotted in parser.get_default(KEYS_KEY) or ()]


def known_flags(parser: argparse.ArgumentParser) -> list[str]:
    """What a mistyped flag may have meant: the command's long flags (not the deprecated spellings) and its config
    keys as flags."""
    flags = [option for action in parser._actions if not isinstance(action, _Deprecated)
             for option in action.option_strings if option.startswith("--")]
    return list(dict.fromkeys(flags + config_key_flags(parser)))


def _section_class(cls: type, section: str) -> type:
    for part in filter(None, section.split(".")):
        cls = typing.get_type_hints(cls)[part]
    return cls


def given_flags(args: argparse.Namespace) -> dict[str, str]:
    """Dotted field -> the raw value of each generated flag given on the command line."""
    return {dotted: getattr(args, dest) for dest, dotted in getattr(args, FIELDS_KEY, ()) if hasattr(args, dest)}


def config_from_args(cls: type, args: argparse.Namespace, kind: str = "", given: dict[str, str] | None = None):
    """`cls` from its defaults, `--config` (a file, or a preset of `kind`), the flags given, then the command's
    `--section.key=value` overrides (args.overrides), all through bertkit.config.load_config."""
    given = given_flags(args) if given is None else given
    flags = [f"{dotted}={_raw(value)}" for dotted, value in given.items()]
    path = getattr(args, "config", None)
    source = find_config(path, kind) if path is not None and kind else path
    return load_config(cls, source, flags + list(getattr(args, "overrides", None) or []))


def _raw(value: Any) -> str:
    """A flag's value as the loader's override text: bools as true/false, None as none."""
    if value is None:
        return "none"
    return str(value).lower() if isinstance(value, bool) else str(value)
