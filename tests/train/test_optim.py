
import pytest

from bertkit.errors import BertkitError
from bertkit.train import lr_factor, param_groups, parse_duration
from train_toy import ToyModel


def test_no_weight_decay_on_bias_and_layernorm():
    model = ToyModel()
    groups = param_groups(model, lr=1e-3, weight_decay=0.01)
    no_decay = {n for g in groups if g["weight_decay"] == 0 for n in g["names"]}
    decay = {n for g in groups if g["weight_decay"] > 0 for n in g["names"]}
    assert "encoder.embeddings.norm.weight" in no_decay and "out.bias" in no_decay
    assert "encoder.blocks.0.ffn.up.weight" in decay or any(".weight" in n and "norm" not in n for n in decay)
    assert not any(n.endswith("bias") for n in decay)
    assert len(no_decay) + len(decay) == len(list(model.parameters()))


def test_layerwise_lr_decay_lowers_lower_layers():
    model = ToyModel()
    groups = param_groups(model, lr=1.0, weight_decay=0.0, layerwise_lr_decay=0.5)
    lr_of = {n: g["lr"] for g in groups for n in g["names"]}
    assert lr_of["out.weight"] == 1.0                       # the head is the top
    assert lr_of[[n for n in lr_of if n.startswith("encoder.blocks.1.")][0]] == 0.5
    assert lr_of[[n for n in lr_of if n.startswith("encoder.blocks.0.")][0]] == 0.25
    assert lr_of["encoder.embeddings.token.weight"] == 0.125


def test_schedules():
    assert lr_factor(0.05, "linear", 0.1) == pytest.approx(0.5)
    assert lr_factor(0.55, "linear", 0.1) == pytest.approx(0.5)
    assert lr_factor(1.0, "linear", 0.1) == 0.0
    assert lr_factor(0.55, "cosine", 0.1) == pytest.approx(0.5)
    assert lr_factor(0.9, "constant", 0.1) == 1.0
    assert lr_factor(0.1, "slanted_triangular", 0.1) == pytest.approx(1.0)
    assert lr_factor(1.0, "slanted_triangular", 0.1) == pytest.approx(1 / 32)


def test_parse_duration():
    assert parse_duration("30m") == 1800
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90s") == 90
    with pytest.raises(BertkitError, match="units"):
        parse_duration("30")
