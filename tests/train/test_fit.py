"""train/fit.py's own steps, on the toy regression job: seeding from config.train.seed before the job is built, and
output/metrics.json written by fit alone (beside each best model and at the close), with the record's keys."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch

from bertkit.job_config import TrainConfig
from bertkit.train.fit import Job, fit
from train_toy import ToyModel, toy_batches, toy_loss


@dataclass
class ToyConfig:
    output: str = ""
    train: TrainConfig = field(default_factory=lambda: TrainConfig(lr=3e-3, epochs=3, seed=5, progress_bar=False))


def _dev_loss(model) -> dict:
    batch = next(iter(toy_batches(batch_size=64)))
    with torch.no_grad():
        return {"loss": float(toy_loss(model, batch)[0])}


def _job(saved: list, seen: list, output) -> Job:
    def save(model, metrics):
        saved.append(metrics)
        (output / "model.txt").write_text("weights")

    def evaluate(model):
        # the file beside the model saved so far: the last best evaluation, written by fit
        path = output / "metrics.json"
        seen.append(json.loads(path.read_text()) if path.exists() else None)
        return _dev_loss(model)

    return Job(ToyModel(), toy_loss, toy_batches(), save, evaluate, "loss", record={"train_examples": 64})


def test_fit_seeds_before_it_builds_the_job(tmp_path):
    runs = []
    for outer_seed, name in ((1, "a"), (2, "b")):
        torch.manual_seed(outer_seed)        # what the caller seeded does not matter: fit seeds from train.seed
        config = ToyConfig(output=str(tmp_path / name))
        (tmp_path / name).mkdir()
        runs.append(fit(config, lambda: _job([], [], tmp_path / name)))
    assert runs[0].loop.losses == runs[1].loop.losses
    other = ToyConfig(output=str(tmp_path / "c"), train=TrainConfig(lr=3e-3, epochs=3, seed=6, progress_bar=False))
    (tmp_path / "c").mkdir()
    assert fit(other, lambda: _job([], [], tmp_path / "c")).loop.losses != runs[0].loop.losses


def test_fit_alone_writes_metrics_json_beside_each_best_model_and_at_the_close(tmp_path):
    saved, seen = [], []
    result = fit(ToyConfig(output=str(tmp_path)), lambda: _job(saved, seen, tmp_path))
    assert seen[0] is None and len(seen) == 3 and saved
    # before the 2nd evaluation the file holds the 1st (the first best), as the model beside it does
    assert seen[1] == {"dev": saved[0], "metric_for_best": "loss", "train_examples": 64}
    final = json.loads((tmp_path / "metrics.json").read_text())
    assert list(final) == ["dev", "metric_for_best", "train_seconds", "wall_seconds", "epochs", "steps",
                           "stop_reason", "train_examples"]
    assert final["dev"] == result.metrics == saved[-1] and final["metric_for_best"] == "loss"
    assert (final["epochs"], final["steps"], final["stop_reason"]) == (3, result.steps, "epochs")
    assert final["train_seconds"] == result.train_seconds and final["train_examples"] == 64
    assert not (tmp_path / "run" / "checkpoint").exists()
    effective = json.loads((tmp_path / "run" / "config.effective.json").read_text())
    assert effective["train"]["seed"] == 5 and effective["output"] == str(tmp_path)
