"""bertkit/cli/flags.py: flags generated from a config dataclass parse back to the same config through the one
loader (bertkit/config.py): round trip, choices, bool negation, nested sections, aliases, deprecated spellings,
--config files, and bad input as one line with exit 2."""
from __future__ import annotations

import argparse
import warnings
from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest

from bertkit.cli import main
from bertkit.cli.flags import add_config_flags, config_from_args, config_fields, field_comments
from bertkit.errors import ConfigError
from bertkit.errors import BertkitWarning


@dataclass(frozen=True)
class Inner:
    lr: float = 1e-3          # learning rate
    warmup: Optional[int] = None
    shuffle: bool = True


@dataclass(frozen=True)
class Small:
    name: str = ""            # what to call it
    # how hard to try
    level: Literal["low", "high"] = "low"
    steps: int = 10
    limit: Optional[float] = None
    verbose: bool = False
    tags: tuple[str, ...] = ()
    train: Inner = field(default_factory=Inner)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t", exit_on_error=True)
    add_config_flags(parser, Small, aliases={"lr": "train.lr"}, deprecated={"num-steps": "steps"})
    return parser


def _parse(argv: list[str]) -> Small:
    args, extra = _parser().parse_known_args(argv)
    args.overrides = extra
    return config_from_args(Small, args)


def test_every_leaf_field_gets_a_flag_with_its_comment_as_help():
    names = [dotted for dotted, _, _ in config_fields(Small)]
    assert names == ["name", "level", "steps", "limit", "verbose", "tags", "train.lr", "train.warmup",
                     "train.shuffle"]
    assert field_comments(Small)["name"] == "what to call it"
    assert field_comments(Small)["level"] == "how hard to try"
    text = _parser().format_help()
    assert "--train.lr X, --lr X" in text and "learning rate (default: 0.001)" in text
    assert "{low,high}" in text


def test_no_flags_gives_the_defaults_and_flags_round_trip():
    assert _parse([]) == Small()
    config = _parse(["--name", "x", "--level", "high", "--steps", "3", "--limit", "0.5", "--verbose",
                     "--tags", "a,b", "--train.lr", "0.1", "--train.warmup", "7", "--train.no-shuffle"])
    assert config == Small(name="x", level="high", steps=3, limit=0.5, verbose=True, tags=("a", "b"),
                           train=Inner(lr=0.1, warmup=7, shuffle=False))


def test_bool_negation_last_one_wins():
    assert _parse(["--verbose", "--no-verbose"]).verbose is False
    assert _parse(["--no-verbose", "--verbose"]).verbose is True


def test_alias_and_override_syntax_reach_the_same_field():
    assert _parse(["--lr", "0.2"]).train.lr == 0.2
    assert _parse(["--train.lr=0.3"]).train.lr == 0.3
    assert _parse(["--train.warmup=none"]).train.warmup is None


def test_deprecated_spelling_parses_to_the_new_field_and_warns_once():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = _parse(["--num-steps", "5"])
    assert config.steps == 5
    messages = [str(w.message) for w in caught if issubclass(w.category, BertkitWarning)]
    assert messages == ["--num-steps is deprecated; use --steps"]


def test_choices_are_checked_by_argparse():
    with pytest.raises(SystemExit) as exit:
        _parse(["--level", "medium"])
    assert exit.value.code == 2


def test_bad_value_and_unknown_override_are_config_errors_naming_the_field():
    with pytest.raises(ConfigError, match="^steps: expected an integer, got 'many'$"):
        _parse(["--steps", "many"])
    with pytest.raises(ConfigError, match="unknown key train.momentum"):
        _parse(["--train.momentum=0.9"])


def test_config_file_then_flags_then_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('name = "file"\nsteps = 4\n[train]\nlr = 0.5\nwarmup = 2\n')
    config = _parse(["--config", str(path), "--steps", "6", "--train.warmup=3"])
    assert config == Small(name="file", steps=6, train=Inner(lr=0.5, warmup=3))


def test_unknown_field_through_the_cli_is_one_line_and_exit_2(tmp_path, capsys):
    code = main(["serve", "--model", str(tmp_path), "--max-batch-sise=3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("bertkit: error: unknown key max-batch-sise; valid keys here: api_key,")


# serve: every spelling of the hand-written flags (before they were generated from ServeConfig) -> the same config
_SERVE_OLD = [
    (["--model", "M"], dict()),
    (["--model", "M", "--index", "I", "--host", "0.0.0.0", "--port", "9000", "--workers", "2"],
     dict(index="I", host="0.0.0.0", port=9000, workers=2)),
    (["--model", "M", "--max-batch-tokens", "512", "--max-batch-size", "8", "--batch-overhead-tokens", "0",
      "--max-request-texts", "5", "--max-queued-texts", "10", "--max-connections", "3"],
     dict(max_batch_tokens=512, max_batch_size=8, batch_overhead_tokens=0, max_request_texts=5,
          max_queued_texts=10, max_connections=3)),
    (["--model", "M", "--request-timeout", "2.5", "--header-timeout", "1", "--body-timeout", "3",
      "--keep-alive-timeout", "4"],
     dict(request_timeout_s=2.5, header_timeout_s=1.0, body_timeout_s=3.0, keep_alive_timeout_s=4.0)),
    (["--model", "M", "--api-key", "k", "--precision", "bf16"], dict(api_key="k", precision="bf16")),
]


def _serve_args(argv):
    from bertkit.cli import build_parser
    args, extra = build_parser().parse_known_args(["serve", *argv])
    args.overrides = extra
    return args


@pytest.mark.parametrize("argv,changes", _SERVE_OLD)
def test_serve_old_command_lines_give_the_same_config(argv, changes, monkeypatch):
    from bertkit.cli.serve_commands import serve_config
    from bertkit.serve.config import ServeConfig
    monkeypatch.delenv("BERTKIT_API_KEY", raising=False)
    assert serve_config(_serve_args(argv)) == ServeConfig(model="M", **changes)


def test_serve_config_file_and_overrides(tmp_path, monkeypatch):
    from bertkit.cli.serve_commands import serve_config
    from bertkit.serve.config import ServeConfig
    monkeypatch.setenv("BERTKIT_API_KEY", "env")
    path = tmp_path / "serve.toml"
    path.write_text('model = "M"\nport = 1234\nworkers = 3\n')
    config = serve_config(_serve_args(["--config", str(path), "--workers", "2", "--max-request-bytes=99"]))
    assert config == ServeConfig(model="M", port=1234, workers=2, max_request_bytes=99, api_key="env")


def test_serve_without_a_model_and_bad_values_are_one_line_exit_2(tmp_path, capsys):
    assert main(["serve"]) == 2
    assert capsys.readouterr().err.strip() == 'bertkit: error: serve needs --model (or model = "DIR" in the --config file)'
    assert main(["serve", "--model", "M", "--workers", "0"]) == 2
    assert capsys.readouterr().err.strip() == "bertkit: error: serve: --workers must be positive, got 0"


def test_override_keys_take_hyphens_or_underscores():
    from bertkit.config import apply_overrides
    from bertkit.serve.config import ServeConfig
    assert apply_overrides(ServeConfig(), ["--max-request-bytes=99", "--max_batch_size=3"]) == \
        ServeConfig(max_request_bytes=99, max_batch_size=3)
