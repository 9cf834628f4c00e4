"""`bertkit pretrain`'s flags, generated from PretrainConfig (and GPTPretrainConfig for --arch gpt): every command
line of the hand-written parser gives the config object it gave then. Each expected config is the hand-written
parser's translation (its flags as dotted overrides before the command line's own), which the old code passed to
the same loader: --objective/--masking/--lexicon -> data.*, --vocab-size -> vocab.vocab_size, --max-steps N ->
train.max_steps=N + train.time_budget=none (and the reverse for --time-budget), --resume -> train.resume=true."""
from __future__ import annotations


import pytest

from bertkit.cli import build_parser
from bertkit.cli.pretrain_commands import pretrain_config
from bertkit.config import find_config, load_config
from bertkit.errors import BertkitError
from bertkit.generate.pretrain_config import GPTPretrainConfig
from bertkit.pretrain.config import PretrainConfig

# (argv after --corpus c.txt --output o, the config class, preset, the old parser's translation + overrides)
OLD = [
    ([], PretrainConfig, None, []),
    (["--config", "tiny", "--max-steps", "40", "--train.save_every=20", "--encoder.hidden_size=32", "--train.lr=1e-3",
      "--data.heldout_fraction=0.1", "--train.progress_bar=false"], PretrainConfig, "tiny",
     ["train.max_steps=40", "train.time_budget=none", "train.save_every=20", "encoder.hidden_size=32", "train.lr=1e-3",
      "data.heldout_fraction=0.1", "train.progress_bar=false"]),
    (["--objective", "mlm+sop", "--masking", "whole-word", "--lexicon", "lex.txt", "--vocab-size", "300",
      "--time-budget", "30m", "--resume", "--heads.train_only=true", "--train.bf16=false"], PretrainConfig, None,
     ["data.objective=mlm+sop", "data.masking=whole-word", "data.lexicon=lex.txt", "vocab.vocab_size=300",
      "train.time_budget=30m", "train.max_steps=none", "train.resume=true", "heads.train_only=true",
      "train.bf16=false"]),
    (["--arch", "xlnet", "--max-steps", "3"], PretrainConfig, None,
     ["data.objective=plm", "train.max_steps=3", "train.time_budget=none"]),
    (["--arch", "gpt", "--vocab-size", "300", "--max-steps", "1", "--encoder.hidden_size=32", "--data.block_size=16",
      "--vocab.min_frequency=1", "--train.eval_every=10"], GPTPretrainConfig, None,
     ["vocab.vocab_size=300", "train.max_steps=1", "train.time_budget=none", "encoder.hidden_size=32",
      "data.block_size=16", "vocab.min_frequency=1", "train.eval_every=10"]),
    (["--arch", "gpt", "--config", "gpt-tiny", "--time-budget", "5m", "--train.resume=true", "--encoder.dropout=0.0"],
     GPTPretrainConfig, "gpt-tiny",
     ["train.time_budget=5m", "train.max_steps=none", "train.resume=true", "encoder.dropout=0.0"]),
    (["--config", "base", "--time-budget", "2h", "--train.time_budget=1h", "--masking", "span"], PretrainConfig, "base",
     ["data.masking=span", "train.time_budget=2h", "train.max_steps=none", "train.time_budget=1h"]),
]


def _config(argv):
    args, extra = build_parser().parse_known_args(["pretrain", "--corpus", "c.txt", "--output", "o", *argv])
    args.overrides = extra
    return pretrain_config(args)


@pytest.mark.parametrize("argv,cls,preset,overrides", OLD)
def test_old_pretrain_command_lines_give_the_same_config(argv, cls, preset, overrides):
    expected = load_config(cls, find_config(preset, "pretrain") if preset else None, overrides)
    assert _config(argv) == expected


def test_generated_flags_equal_their_override_spelling():
    generated = _config(["--train.lr", "3e-4", "--data.batch-size", "8", "--encoder.num-layers", "2",
                         "--data.no-static-masking", "--train.precision", "bf16", "--electra.generator-width",
                         "0.5"])
    overrides = _config(["--train.lr=3e-4", "--data.batch_size=8", "--encoder.num_layers=2",
                         "--data.static_masking=false", "--train.precision=bf16", "--electra.generator_width=0.5"])
    assert generated == overrides and generated.train.lr == 3e-4 and generated.encoder.num_layers == 2
    assert generated.train.precision == "bf16" and generated.data.batch_size == 8
    gpt = _config(["--arch", "gpt", "--data.block-size", "32", "--vocab.min-frequency", "3", "--encoder.dropout", "0"])
    assert (gpt.data.block_size, gpt.vocab.min_frequency, gpt.encoder.dropout) == (32, 3, 0.0)


def test_a_toml_file_then_flags_then_overrides(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[train]\nlr = 2e-4\nmax_steps = 50\n\n[data]\nbatch_size = 4\n', encoding="utf-8")
    config = _config(["--config", str(path), "--data.batch-size", "16", "--train.lr=1e-3"])
    assert (config.train.lr, config.train.max_steps, config.data.batch_size) == (1e-3, 50, 16)


@pytest.mark.parametrize("argv,message", [
    (["--arch", "gpt", "--data.max-length", "64"], "unknown key data.max_length"),      # a BERT setting, one line
    (["--data.block-size", "64"], "unknown key data.block_size"),                        # a GPT setting with bert
    (["--arch", "xlnet", "--objective", "electra"], "--arch xlnet trains the permutation LM"),
    (["--arch", "gpt", "--lexicon", "l.txt"], "drop --lexicon"),
])
def test_a_setting_of_the_other_arch_is_one_line(argv, message):
    with pytest.raises(BertkitError, match=message):
        _config(argv)


def test_max_steps_and_time_budget_stay_exclusive(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_known_args(["pretrain", "--corpus", "c", "--output", "o", "--max-steps", "3",
                                         "--time-budget", "5m"])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("argv,right,wrong", [
    (["--config", "tiny-zh", "--data.batchsize=3"], "unknown key data.batchsize", "a preset for --arch gpt"),
    (["--config", "{own}", "--max-steps", "3"], "own.toml: unknown key data.batchsize", "a preset for --arch gpt"),
    (["--config", "gpt-tiny"], "is gpt-tiny a preset for --arch gpt?", None),
    (["--arch", "gpt", "--config", "tiny"], "is tiny a preset for --arch bert?", None),
])
def test_the_other_arch_is_suspected_only_for_a_config_of_the_other_arch(tmp_path, argv, right, wrong):
    """A typo in an override or in the user's own file was blamed on the preset ('is tiny-zh a preset for --arch
    gpt?'); only a --config that loads as the other arch's config gets that hint."""
    own = tmp_path / "own.toml"
    own.write_text("[data]\nbatchsize = 3\n", encoding="utf-8")
    with pytest.raises(BertkitError) as caught:
        _config([arg.replace("{own}", str(own)) for arg in argv])
    assert right in str(caught.value) and (wrong is None or wrong not in str(caught.value))
