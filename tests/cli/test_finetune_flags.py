"""`bertkit finetune`'s, `simcse`'s and `distill`'s flags, generated from FinetuneConfig / SimCSEConfig /
DistillConfig: every command line of the hand-written flag tables (before the flags were generated) gives the same
config object as it did then."""
from __future__ import annotations

import dataclasses
import importlib
import json

import pytest

from bertkit.job_config import job_config
from bertkit.cli import build_parser, main
from bertkit.errors import BertkitWarning
from bertkit.cli.finetune_commands import finetune_config
from bertkit.distill.config import DistillConfig
from bertkit.embed.config import SimCSEConfig
from bertkit.finetune.config import FinetuneConfig, TaskOptions

# (argv, FinetuneConfig fields besides model=M, train, output=O): checked against the hand-written table's code
OLD_FINETUNE = [
    (["--model", "M", "--train", "t.jsonl", "--output", "O"], dict()),
    (["--task", "ner", "--model", "M", "--train", "t.conll", "--dev", "d.conll", "--output", "O", "--epochs", "3",
      "--lr", "2e-5", "--head-lr", "1e-3", "--batch-size", "16", "--max-length", "64", "--seed", "7"],
     dict(task="ner", dev="d.conll", epochs=3, lr=2e-5, head_lr=1e-3, batch_size=16, max_length=64, seed=7)),
    (["--model", "M", "--train", "t.jsonl", "--output", "O", "--warmup-ratio", "0.1", "--schedule", "cosine",
      "--eval-every", "50", "--metric", "f1", "--early-stopping-patience", "2", "--layerwise-lr-decay", "0.9",
      "--gradual-unfreezing", "--class-weights", "balanced", "--time-budget", "20m"],
     dict(warmup_ratio=0.1, schedule="cosine", eval_every=50, metric="f1", early_stopping_patience=2,
          layerwise_lr_decay=0.9, gradual_unfreezing=True, class_weights="balanced", time_budget="20m")),
    (["--model", "M", "--train", "t.jsonl", "--output", "O", "--aux-mlm-weight", "0.5", "--skip-bad-rows",
      "--encoding", "gb18030", "--max-train-examples", "100", "--max-dev-examples", "20", "--device", "cpu",
      "--resume", "--save-every", "10", "--method", "linear-probe", "--no-baseline"],
     dict(aux_mlm_weight=0.5, skip_bad_rows=True, encoding="gb18030", max_train_examples=100, max_dev_examples=20,
          device="cpu", resume=True, save_every=10, method="linear-probe", baseline=False)),
    (["--model", "M", "--train", "t.jsonl", "--output", "O", "--aux_mlm_decay=0.5", "--options.doc_stride=64",
      "--weight_decay=0", "--lr", "1e-4", "--lr=3e-4"],
     dict(aux_mlm_decay=0.5, options=dict(doc_stride=64), weight_decay=0.0, lr=3e-4)),
]

OLD_OTHER_JOBS = [  # (argv, job config class path, fields)
    (["--task", "seq2seq", "--model", "M", "--train", "p.jsonl", "--output", "O", "--epochs", "2", "--lr", "1e-4"],
     "bertkit.finetune.seq2seq.job:Seq2SeqConfig", dict(model="M", train="p.jsonl", output="O", epochs=2, lr=1e-4)),
    (["--task", "rerank", "--model", "M", "--train", "q.jsonl", "--output", "O", "--batch-size", "4"],
     "bertkit.finetune.rerank:RerankConfig", dict(model="M", train="q.jsonl", output="O", batch_size=4)),
    (["--model", "M", "--train", "t.jsonl", "--output", "O", "--template", "{text} It was [MASK].",
      "--verbalizer", "pos=great,neg=bad", "--ptuning", "--freeze-encoder", "--epochs", "0"],
     "bertkit.finetune.prompt.job:PromptConfig",
     dict(model="M", train="t.jsonl", output="O", template="{text} It was [MASK].", verbalizer="pos=great,neg=bad",
          ptuning=True, freeze_encoder=True, epochs=0)),
]


def _config(argv):
    args, extra = build_parser().parse_known_args(["finetune", *argv])
    args.overrides = extra
    return finetune_config(args)[0]


@pytest.mark.parametrize("argv,changes", OLD_FINETUNE)
def test_old_finetune_command_lines_give_the_same_config(argv, changes):
    changes = dict(changes)
    if "options" in changes:
        changes["options"] = TaskOptions(**changes["options"])
    train = argv[argv.index("--train") + 1]
    assert _config(argv) == job_config(FinetuneConfig, model="M", train=train, output="O", **changes)


@pytest.mark.parametrize("argv,where,fields", OLD_OTHER_JOBS)
def test_old_command_lines_of_the_other_jobs_give_the_same_config(argv, where, fields):
    module, name = where.split(":")
    assert _config(argv) == job_config(getattr(importlib.import_module(module), name), **fields)


def test_every_finetune_config_field_has_a_flag():
    text = build_parser()._subparsers._group_actions[0].choices["finetune"].format_help()
    for flag in ("--grad-accum", "--weight-decay", "--clip-norm", "--precision", "--options.doc-stride",
                 "--options.long-texts", "--bucket-by-length", "--aux-mlm-decay", "--eval-batch-size"):
        assert flag in text
    assert _config(["--model", "M", "--train", "t", "--output", "O", "--grad-accum", "4", "--options.doc-stride",
                    "32", "--progress_bar=false"]) == job_config(FinetuneConfig, model="M", train="t", output="O", grad_accum=4,
                                                                      options=TaskOptions(doc_stride=32),
                                                                      progress_bar=False)
    # the field's own flag is gone: --no-progress-bar is now a deprecated spelling of the global --no-progress
    with pytest.warns(BertkitWarning, match="--no-progress-bar is deprecated; use --no-progress"):
        args = build_parser().parse_args(["finetune", "--model", "M", "--train", "t", "--output", "O",
                                          "--no-progress-bar"])
    assert args.progress is False and _config(["--model", "M", "--train", "t", "--output", "O"]).train.progress_bar


# (old flat TOML, the same settings in sections): the flat keys still load, each with one deprecation line
OLD_TOML = [
    ('model = "M"\ntrain = "t.jsonl"\ndev = "d.jsonl"\noutput = "O"\nlr = 2e-5\nepochs = 3\nbatch_size = 16\n'
     'max_length = 64\nseed = 7\nresume = true\nprecision = "bf16"\nskip_bad_rows = true\n',
     'model = "M"\noutput = "O"\n[data]\ntrain = "t.jsonl"\ndev = "d.jsonl"\nbatch_size = 16\nmax_length = 64\n'
     'skip_bad_rows = true\n[train]\nlr = 2e-5\nepochs = 3\nseed = 7\nresume = true\nprecision = "bf16"\n'),
    ('model = "M"\ntrain = "t"\noutput = "O"\nbatch_size = 8\n[data]\nbatch_size = 4\n[options]\n'
     'doc_stride = 16\n',   # the section's own key wins over the flat one
     'model = "M"\noutput = "O"\n[data]\ntrain = "t"\nbatch_size = 4\n[options]\ndoc_stride = 16\n'),
]


@pytest.mark.parametrize("old,new", OLD_TOML)
def test_old_flat_toml_gives_the_nested_config_with_a_warning(tmp_path, old, new):
    (tmp_path / "old.toml").write_text(old)
    (tmp_path / "new.toml").write_text(new)
    with pytest.warns(BertkitWarning, match=r"old.toml: \w+ is deprecated; use (train|data)\.\w+"):
        flat = _config(["--config", str(tmp_path / "old.toml")])
    assert flat == _config(["--config", str(tmp_path / "new.toml")])
    assert flat.data.train.startswith("t") and flat.model == "M"


def test_flat_toml_of_simcse_and_distill(tmp_path):
    from bertkit.config import load_config
    path = tmp_path / "s.toml"
    path.write_text('model = "M"\ntrain = "t.txt"\noutput = "O"\nlr = 1e-5\nmax_examples = 10\nbatch_size = 8\n')
    with pytest.warns(BertkitWarning, match="max_examples is deprecated; use data.max_train_examples"):
        assert load_config(SimCSEConfig, path) == job_config(SimCSEConfig, model="M", train="t.txt", output="O",
                                                             lr=1e-5, max_train_examples=10, batch_size=8)
    path.write_text('teacher = "T"\ntrain = "t.jsonl"\noutput = "O"\nepochs = 1\ngrad_accum = 2\n')
    with pytest.warns(BertkitWarning, match="epochs is deprecated; use train.epochs"):
        config = load_config(DistillConfig, path)
    assert (config.train.epochs, config.train.grad_accum, config.train.lr, config.data.train) == (1, 2, 5e-5, "t.jsonl")


def test_a_section_table_keeps_the_jobs_own_section_defaults(tmp_path):
    """Regression: a [train] table replaced the job's own TrainConfig defaults (distill's 3 epochs, lr 5e-5,
    warmup 0.1, seed 42) with TrainConfig's class defaults (1 epoch, warmup 0, seed 0) for every key not in it."""
    from bertkit.config import load_config
    path = tmp_path / "d.toml"
    path.write_text('teacher = "T"\n[train]\ngrad_accum = 2\n')
    assert load_config(DistillConfig, path).train == dataclasses.replace(DistillConfig().train, grad_accum=2)


def test_effective_config_is_nested(tmp_path):
    from bertkit.config import save_config
    config = _config(["--model", "M", "--train", "t", "--output", "O", "--lr", "1e-4"])
    saved = json.loads(save_config(config, tmp_path).read_text())
    assert saved["data"]["train"] == "t" and saved["train"]["lr"] == 1e-4 and "lr" not in saved


def test_config_file_then_flags(tmp_path):
    path = tmp_path / "ft.toml"
    path.write_text('model = "M"\ntrain = "t"\noutput = "O"\nepochs = 5\n[options]\ndoc_stride = 16\n')
    assert _config(["--config", str(path), "--epochs", "2"]) == job_config(FinetuneConfig, 
        model="M", train="t", output="O", epochs=2, options=TaskOptions(doc_stride=16))


def test_flag_of_another_job_and_bad_values_are_one_line_exit_2(capsys):
    assert main(["finetune", "--task", "seq2seq", "--model", "M", "--train", "t", "--output", "O",
                 "--class-weights", "sqrt"]) == 2
    assert capsys.readouterr().err.strip() == "bertkit: error: --class-weights is not supported with --task seq2seq"
    assert main(["finetune", "--model", "M", "--train", "t", "--output", "O", "--epochs", "two"]) == 2
    assert capsys.readouterr().err.strip() == "bertkit: error: train.epochs: expected an integer, got 'two'"


# (argv, SimCSEConfig fields besides model=M, train, output=O): checked against the hand-written table's code
OLD_SIMCSE = [
    (["--model", "M", "--train", "t.txt", "--output", "O"], dict()),
    (["--model", "M", "--train", "p.jsonl", "--output", "O", "--mode", "pairs", "--dev", "d.jsonl", "--pooling", "cls",
      "--batch-size", "16", "--epochs", "2", "--max-steps", "50", "--lr", "1e-5", "--max-length", "64",
      "--temperature", "0.1", "--seed", "3", "--save-every", "5", "--resume"],
     dict(mode="pairs", dev="d.jsonl", pooling="cls", batch_size=16, epochs=2, max_steps=50, lr=1e-5, max_length=64,
          temperature=0.1, seed=3, save_every=5, resume=True)),
    (["--model", "M", "--train", "t.txt", "--output", "O", "--grad_accum=2", "--layers=sum-last-4", "--lr", "1e-4"],
     dict(grad_accum=2, layers="sum-last-4", lr=1e-4)),
]


@pytest.mark.parametrize("argv,changes", OLD_SIMCSE)
def test_old_simcse_command_lines_give_the_same_config(argv, changes):
    from bertkit.cli.flags import config_from_args
    args, extra = build_parser().parse_known_args(["simcse", *argv])
    args.overrides = extra
    assert config_from_args(SimCSEConfig, args) == job_config(SimCSEConfig, model="M", train=argv[3], output="O", **changes)


# (argv, DistillConfig fields besides teacher=T, train=t.jsonl, output=O): checked against the hand-written table's code
OLD_DISTILL = [
    (["--teacher", "T", "--train", "t.jsonl", "--output", "O"], dict()),
    (["--teacher", "T", "--student-layers", "2", "--task", "embedding", "--train", "t.txt", "--dev", "d.jsonl",
      "--output", "O", "--temperature", "4", "--alpha", "0.7", "--hidden-weight", "1", "--attention-weight", "0.5",
      "--lr", "1e-4", "--augment-mask-prob", "0.2", "--logit-loss", "mse", "--hidden-loss", "cosine",
      "--pooling", "cls", "--augment-copies", "2", "--transfer", "u.txt", "--epochs", "1", "--batch-size", "8",
      "--max-length", "64", "--max-train-examples", "100", "--max-dev-examples", "10", "--seed", "1",
      "--device", "cpu", "--save-every", "5", "--resume"],
     dict(student_layers=2, task="embedding", train="t.txt", dev="d.jsonl", temperature=4.0, alpha=0.7,
          hidden_weight=1.0, attention_weight=0.5, lr=1e-4, augment_mask_prob=0.2, logit_loss="mse",
          hidden_loss="cosine", pooling="cls", augment_copies=2, transfer="u.txt", epochs=1, batch_size=8,
          max_length=64, max_train_examples=100, max_dev_examples=10, seed=1, device="cpu", save_every=5,
          resume=True)),
    (["--teacher", "T", "--student", "S", "--train", "t.jsonl", "--output", "O", "--warmup_ratio=0", "--grad_accum=2"],
     dict(student="S", warmup_ratio=0.0, grad_accum=2)),
]


@pytest.mark.parametrize("argv,changes", OLD_DISTILL)
def test_old_distill_command_lines_give_the_same_config(argv, changes):
    from bertkit.cli.flags import config_from_args
    args, extra = build_parser().parse_known_args(["distill", *argv])
    args.overrides = extra
    assert config_from_args(DistillConfig, args) == job_config(DistillConfig, **{"teacher": "T", "train": "t.jsonl", "output": "O",
                                                                     **changes})


@pytest.mark.parametrize("old,precision", [("train.bf16=false", "fp32"), ("train.cpu_bf16=true", "bf16"),
                                           ("train.bf16=true", "auto")])
def test_the_loops_old_bf16_switches_become_its_precision(tmp_path, old, precision):
    """TrainConfig's bf16 / cpu_bf16 (pre-training's `--train.bf16=false`, `--train.cpu_bf16=true`, and [train]
    tables) now spell `precision`: the old override and TOML key still work, with one deprecation line."""
    from bertkit.config import load_config
    with pytest.warns(BertkitWarning, match=rf"{old.split('=')[0]}=\w+ is deprecated; use train.precision="):
        assert load_config(DistillConfig, None, [old]).train.precision == precision
    key, value = old.split(".")[1].split("=")
    (tmp_path / "c.toml").write_text(f"[train]\n{key} = {value}\n")
    with pytest.warns(BertkitWarning, match="is deprecated; use train.precision="):
        assert load_config(DistillConfig, tmp_path / "c.toml").train.precision == precision
