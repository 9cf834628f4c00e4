"""Fine-tuning resume continues from the last evaluation, and no run replaces a better saved model."""
from __future__ import annotations

import json

import pytest
import torch

from bertkit.job_config import job_config
from bertkit.checkpoints import load_checkpoint
from bertkit.finetune import FinetuneConfig, run_finetune
from bertkit.finetune import job as job_module
from test_finetune import FAST, sentiment_rows, write_jsonl


@pytest.fixture
def data(tmp_path):
    return (write_jsonl(tmp_path / "train.jsonl", sentiment_rows(64, 0)),
            write_jsonl(tmp_path / "dev.jsonl", sentiment_rows(24, 1)))


def config(model_dir, data, output, **changes) -> FinetuneConfig:
    train, dev = data
    settings = {**FAST, "dev": str(dev), **changes}
    return job_config(FinetuneConfig, task="classification", model=str(model_dir), train=str(train), output=str(output),
                          **settings)


def test_a_restarted_run_never_replaces_a_better_model(finetune_model_dir, data, tmp_path, capsys):
    out = tmp_path / "model"
    good = run_finetune(config(finetune_model_dir, data, out))
    assert good.metrics["accuracy"] >= 0.9
    weights = (out / "model.safetensors").read_bytes()
    capsys.readouterr()
    worse = run_finetune(config(finetune_model_dir, data, out, epochs=1, lr=1e-6))   # learns nothing
    err = capsys.readouterr().err
    assert "holds a model with accuracy" in err and "kept the model already in" in err
    assert worse.kept_earlier_model and worse.metrics == good.metrics
    assert (out / "model.safetensors").read_bytes() == weights
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["dev"] == good.metrics
    assert saved["last_run_not_saved"]["dev"]["accuracy"] < good.metrics["accuracy"]
    # Measured on another dev set the scores cannot be compared: the new run replaces the model, as asked.
    other_dev = write_jsonl(tmp_path / "dev2.jsonl", sentiment_rows(24, 2))
    replaced = run_finetune(config(finetune_model_dir, data, out, dev=str(other_dev), epochs=1, lr=1e-6))
    assert not replaced.kept_earlier_model
    assert (out / "model.safetensors").read_bytes() != weights


def test_resume_continues_from_the_last_evaluation(finetune_model_dir, data, tmp_path, monkeypatch, capsys):
    full = run_finetune(config(finetune_model_dir, data, tmp_path / "full", epochs=4))
    assert full.steps == 16                                  # 64 examples, batch 16: 4 steps per epoch

    real_build, calls = job_module.build_task, [0]

    def build_dying_task(*args, **kwargs):
        task = real_build(*args, **kwargs)
        real_loss = task.loss

        def loss(*loss_args):
            calls[0] += 1
            if calls[0] == 11:
                raise KeyboardInterrupt                      # killed in step 11; the last evaluation was step 8
            return real_loss(*loss_args)
        task.loss = loss
        return task

    monkeypatch.setattr(job_module, "build_task", build_dying_task)
    with pytest.raises(KeyboardInterrupt):
        run_finetune(config(finetune_model_dir, data, tmp_path / "cut", epochs=4))
    monkeypatch.undo()
    capsys.readouterr()
    resumed = run_finetune(config(finetune_model_dir, data, tmp_path / "cut", epochs=4, resume=True))
    assert "at step 8" in capsys.readouterr().err
    assert (resumed.steps, resumed.epochs, resumed.metrics) == (full.steps, full.epochs, full.metrics)
    a, b = load_checkpoint(tmp_path / "full"), load_checkpoint(tmp_path / "cut")
    for (name, x), y in zip(a.encoder.state_dict().items(), b.encoder.state_dict().values()):
        assert torch.equal(x, y), name
    assert not (tmp_path / "cut" / "run" / "checkpoint").exists()    # a finished run keeps no resume state


def test_cli_resume_without_a_saved_state_is_one_line(finetune_model_dir, data, tmp_path, capsys):
    from bertkit.cli import main

    train, dev = data
    assert main(["finetune", "--task", "classification", "--model", str(finetune_model_dir), "--train", str(train),
                 "--dev", str(dev), "--output", str(tmp_path / "never"), "--max-length", "24", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no training state" in err[-1], err
