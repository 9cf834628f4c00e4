"""The training state file: every value back bit for bit, without pickle; crafted files run nothing."""
from __future__ import annotations

import pathlib
import random

import numpy as np
import pytest
import torch

from bertkit.errors import CheckpointError
from bertkit.runtime import rng_state, set_rng_state
from bertkit.train import TrainConfig, train
from bertkit.train.checkpointing import load_state, save_state, state_path
from bertkit.train.optim import build_optimizer
from train_toy import ToyModel, toy_batches, toy_loss


def assert_identical(a, b, where="state"):
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            assert_identical(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and a != a:
        assert b != b, where
    else:
        assert a == b, where


def test_every_part_of_the_state_comes_back_bit_for_bit(tmp_path):
    torch.manual_seed(0)
    model = ToyModel()
    optimizer = build_optimizer(model, 1e-3, 0.01, (0.9, 0.999), 1e-6, None)
    for _ in range(3):
        loss, _ = toy_loss(model, next(iter(toy_batches())))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    state = {"model": {**model.state_dict(), "tied": model.state_dict()["out.weight"]},   # two names, one storage
             "optimizer": optimizer.state_dict(),
             "schedule": {"step": 3, "elapsed_s": 1.25, "lr_scale": 0.5},
             "data": {"epoch": 1, "position": 7},
             "rng": [rng_state(), rng_state()],
             "run": {"epoch": 1, "best": None, "best_eval": {"loss": float("nan"), "$odd": 1}, "bad_evals": 0},
             "bf16": torch.randn(3, dtype=torch.bfloat16), "empty": torch.zeros(0, 4), "world_size": 2}
    path = state_path(tmp_path)
    save_state(path, state)
    loaded = load_state(path)
    assert_identical(state, loaded)
    # The RNG states restore: the same random numbers follow.
    set_rng_state(loaded["rng"][0])
    after = (random.random(), np.random.rand(), torch.rand(3))
    set_rng_state(state["rng"][0])
    assert_identical(after, (random.random(), np.random.rand(), torch.rand(3)))
    fresh = build_optimizer(ToyModel(), 1e-3, 0.01, (0.9, 0.999), 1e-6, None)
    fresh.load_state_dict(loaded["optimizer"])
    assert_identical(fresh.state_dict(), optimizer.state_dict())


def test_kill_and_resume_ends_with_exactly_the_same_weights(tmp_path):
    config = TrainConfig(lr=3e-3, max_steps=30, warmup_steps=4, save_every=10, progress_bar=False, seed=5)
    torch.manual_seed(0)
    full_model = ToyModel()
    train(full_model, toy_loss, toy_batches(), TrainConfig(**{**config.__dict__, "output_dir": str(tmp_path / "a")}))

    calls = {"n": 0}

    def dying_loss(model, batch):
        calls["n"] += 1
        if calls["n"] == 17:
            raise KeyboardInterrupt    # killed during step 17; the last checkpoint is step 10
        return toy_loss(model, batch)

    cut = TrainConfig(**{**config.__dict__, "output_dir": str(tmp_path / "b")})
    torch.manual_seed(0)
    with pytest.raises(KeyboardInterrupt):
        train(ToyModel(), dying_loss, toy_batches(), cut)
    torch.manual_seed(99)              # another process state: resume must not depend on it
    resumed = ToyModel()
    train(resumed, toy_loss, toy_batches(), TrainConfig(**{**cut.__dict__, "resume": True}))
    for (name, a), b in zip(full_model.state_dict().items(), resumed.state_dict().values()):
        assert (a - b).abs().max().item() == 0.0, name


class _Payload:
    """Unpickling this creates the marker file: proof that loading ran code."""

    def __init__(self, marker: pathlib.Path):
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


@pytest.mark.parametrize("name", ["training_state.pt", "training_state.safetensors"])
def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path, name):
    marker = tmp_path / "pwned"
    (tmp_path / "run" / "checkpoint").mkdir(parents=True)
    torch.save({"model": _Payload(marker)}, tmp_path / "run" / "checkpoint" / name)
    config = TrainConfig(max_steps=2, output_dir=str(tmp_path / "run"), resume=True, progress_bar=False)
    expected = "pickle format of earlier bertkit versions" if name.endswith(".pt") else "cannot read the training"
    with pytest.raises(CheckpointError, match=expected) as error:
        train(ToyModel(), toy_loss, toy_batches(), config)
    assert "\n" not in str(error.value)
    assert not marker.exists()
