"""The one config mechanism: typed dataclass <- TOML file <- `--section.key=value` overrides.

Every job config is a dataclass (possibly nesting other dataclasses as sections). `load_config` builds
one from defaults, then a TOML file, then dotted overrides; every key is type-checked and an unknown key
is rejected with the list of valid ones. `save_config` writes the effective config into a run folder.
Presets ship inside the package (bertkit/presets/<kind>/NAME.toml); `find_config` resolves `--config NAME`
to one through importlib.resources, so they work from an installed wheel, not only from a checkout.
"""
from __future__ import annotations

import dataclasses
import sys
import types
import typing
import warnings
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, TypeVar

from bertkit.atomic_write import write_json
from bertkit.errors import BertkitWarning, ConfigError
from bertkit.job_config import OLD_PRECISION_SWITCHES, flat_keys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

T = TypeVar("T")


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Convert `value` (from TOML or a command-line string) to `annotation`, or raise ConfigError."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if errors else f"{where}: cannot be None")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        items = [_coerce(v, inner, where) for v in value]
        return items if origin is list else tuple(items)
    if annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if annotation is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        try:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
    if annotation is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if annotation is str:
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table (section), got {value!r}")
        return _from_dict(annotation, value, where)
    return value


def _from_dict(cls: type[T], data: dict[str, Any], where: str = "", base: Any = None) -> T:
    """`base` (default: the defaults of `cls`) with the keys of `data`; a nested table changes only its own keys
    of the section `base` holds (a job's own section defaults stay)."""
    types_ = _field_types(cls)
    data = _old_switches(cls, data, where)
    unknown = sorted(set(data) - set(types_))
    if unknown:
        prefix = f"{where}." if where else ""
        raise ConfigError(f"unknown key {prefix}{unknown[0]}; valid keys: {', '.join(sorted(types_))}")
    base = cls() if base is None else base  # type: ignore[call-arg]
    changes = {}
    for key, value in data.items():
        name = f"{where}.{key}" if where else key
        annotation = types_[key]
        if dataclasses.is_dataclass(annotation) and isinstance(value, dict):
            current = getattr(base, key)
            changes[key] = _from_dict(type(current), value, name, current)
        else:
            changes[key] = _coerce(value, annotation, name)
    try:
        return dataclasses.replace(base, **changes)
    except ValueError as err:        # a value out of its range (the section's __post_init__)
        raise ConfigError(f"{where or 'config'}: {err}") from None


def _old_switches(cls: type, data: dict[str, Any], where: str) -> dict[str, Any]:
    """TrainConfig's old `bf16` / `cpu_bf16` switches as its `precision` (OLD_PRECISION_SWITCHES), one warning each."""
    if "precision" not in _field_types(cls) or not {"bf16", "cpu_bf16"} & set(data):
        return data
    data = dict(data)
    for key in ("bf16", "cpu_bf16"):
        if key in data:
            prefix = f"{where}." if where else ""
            value = _coerce(data.pop(key), bool, prefix + key)
            precision = OLD_PRECISION_SWITCHES[key, value]
            warnings.warn(f"{prefix}{key}={str(value).lower()} is deprecated; use {prefix}precision={precision}",
                          BertkitWarning, stacklevel=4)
            if precision != "auto" or "precision" not in data:
                data["precision"] = precision
    return data


def _is_flat(cls: type, key: str, value: Any) -> bool:
    """`key` is an old flat spelling (FLAT_KEYS) here: not a field of `cls`, or the name of a section given a
    plain value (`train = "train.jsonl"` beside the [train] section)."""
    if key not in flat_keys(cls):
        return False
    annotation = _field_types(cls).get(key)
    return annotation is None or (dataclasses.is_dataclass(annotation) and not isinstance(value, dict))


def _unflatten(cls: type, data: dict[str, Any], where: str) -> dict[str, Any]:
    """Top-level keys of the flat configs (`lr = 1e-4`) moved into their section (`[train] lr = 1e-4`), each with
    one deprecation warning; the section's own key wins when both are given."""
    moved = {key: dict(value) if isinstance(value, dict) else value for key, value in data.items()
             if not _is_flat(cls, key, value)}
    for key, value in data.items():
        if _is_flat(cls, key, value):
            section, leaf = flat_keys(cls)[key].split(".")
            warnings.warn(f"{where}{key} is deprecated; use {section}.{leaf}", BertkitWarning, stacklevel=3)
            table = moved.setdefault(section, {})
            if isinstance(table, dict):
                table.setdefault(leaf, value)
    return moved


def apply_overrides(config: T, overrides: list[str]) -> T:
    """Apply `section.key=value` strings (a leading `--` is allowed; `-` and `_` alike in keys) to a dataclass config.

    All overrides of a section are applied together, so checks that tie fields together (hidden_size
    divisible by num_heads) see the final values.
    """
    changes: dict[str, Any] = {}
    for item in overrides:
        text = item[2:] if item.startswith("--") else item
        if "=" not in text:
            raise ConfigError(f"override {item!r} must look like --section.key=value")
        dotted, raw = text.split("=", 1)
        key = dotted.replace("-", "_")
        if _is_flat(type(config), key, raw):
            dotted = key = flat_keys(type(config))[key]
            warnings.warn(f"--{text.split('=', 1)[0]}= is deprecated; use --{key}=", BertkitWarning, stacklevel=2)
        _collect(config, key.split("."), raw, dotted, changes)
    return _rebuild(config, changes, "")


def _collect(config: Any, path: list[str], raw: str, dotted: str, changes: dict[str, Any]) -> None:
    types_ = _field_types(type(config))
    key = path[0]
    if len(path) == 1 and key in ("bf16", "cpu_bf16") and "precision" in types_:
        changes.update(_old_switches(type(config), {key: raw}, dotted.rpartition(".")[0]))
        return
    if key not in types_:
        raise ConfigError(f"unknown key {dotted}; valid keys here: {', '.join(sorted(types_))}")
    if len(path) == 1:
        changes[key] = _coerce(raw, types_[key], dotted)
        return
    child = getattr(config, key)
    if not dataclasses.is_dataclass(child):
        raise ConfigError(f"{dotted}: {key} is not a section")
    _collect(child, path[1:], raw, dotted, changes.setdefault(key, {}))


def _rebuild(config: Any, changes: dict[str, Any], where: str) -> Any:
    values = {key: _rebuild(getattr(config, key), value, f"{where}{key}.")
              if isinstance(value, dict) and dataclasses.is_dataclass(getattr(config, key)) else value
              for key, value in changes.items()}
    try:
        return dataclasses.replace(config, **values)
    except ValueError as err:
        raise ConfigError(f"{where.rstrip('.') or 'config'}: {err}") from None


def presets(kind: str) -> dict[str, Traversable]:
    """The presets shipped in the package for one kind of job (e.g. "pretrain"), by name."""
    folder = resources.files("bertkit") / "presets" / kind
    entries = folder.iterdir() if folder.is_dir() else []
    return {entry.name.removesuffix(".toml"): entry for entry in entries if entry.name.endswith(".toml")}


def find_config(value: str, kind: str) -> Path | Traversable:
    """`--config VALUE`: an existing TOML file, else the name of a preset shipped with bertkit ("tiny-zh")."""
    path = Path(value)
    if path.is_file():
        return path
    shipped = presets(kind)
    name = value.removesuffix(".toml")
    if name in shipped and path.name == value:   # a bare name: a missing file in some folder stays an error
        return shipped[name]
    hint = f"; did you mean --config {path.stem}?" if path.stem in shipped else ""
    if path.exists():
        raise ConfigError(f"--config {value}: not a regular file (a folder or a device); pass a .toml file or one "
                          f"of the {kind} presets shipped with bertkit: {', '.join(sorted(shipped))}")
    raise ConfigError(f"--config {value}: no such file, and not one of the {kind} presets shipped with bertkit: "
                      f"{', '.join(sorted(shipped))}{hint}")


def load_config(cls: type[T], path: str | Path | Traversable | None = None,
                overrides: list[str] | None = None) -> T:
    """Defaults of `cls`, then the TOML file at `path` (a file or a shipped preset), then dotted overrides."""
    config = cls()  # type: ignore[call-arg]
    if path is not None:
        path = path if isinstance(path, Traversable) else Path(path)
        if not path.is_file():
            exists = isinstance(path, Path) and path.exists()
            raise ConfigError(f"config file {path} " + ("is not a regular file (a folder or a device); pass a .toml "
                                                        "file" if exists else "does not exist"))
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{path}: invalid TOML: {err}") from None
        except UnicodeDecodeError as err:
            raise ConfigError(f"{path}: not UTF-8 text (byte at offset {err.start}); a config is a TOML file") from None
        try:
            config = _from_dict(cls, _unflatten(cls, data, f"{path}: "))
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None
    return apply_overrides(config, overrides or [])


def config_to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def save_config(config: Any, folder: str | Path, name: str = "config.effective.json") -> Path:
    """Write the effective config (after file and overrides) into a run folder."""
    target = Path(folder) / name
    write_json(target, config_to_dict(config))
    return target
