"""FusedLinear's prepacked bf16 weight: the same bits as the plain weight, rebuilt when the weight changes.

The packed copy (oneDNN's blocked layout, made once instead of on every call) is an inference-only cache, so
the tests compare it against the unpacked kernel call on the same operands (it must be bit-identical at any
row count: batch-of-one and batched serving must not drift apart) and against the weight after an update.
"""
import pytest
import torch
from torch import nn

from bertkit.model.onednn import FusedLinear, linear, onednn_available

pytestmark = pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN fused linear")


def fused(activation=None) -> FusedLinear:
    torch.manual_seed(0)
    return FusedLinear.wrap(nn.Linear(48, 96).to(torch.bfloat16), activation)


@pytest.mark.parametrize("activation", [None, "gelu"])
@pytest.mark.parametrize("rows", [1, 5, 16, 33])
def test_packed_weight_gives_the_same_bits_as_the_plain_weight(activation, rows):
    layer = fused(activation)
    x = torch.randn(rows, 7, 48).to(torch.bfloat16)
    with torch.inference_mode():
        served = layer(x)
        assert layer._packed is not None                     # it did take the packed path
        plain = linear(x, layer.weight, layer.bias, activation)
    assert torch.equal(served, plain)


def test_packed_weight_follows_an_in_place_update_and_a_state_dict_load():
    layer = fused("gelu")
    x = torch.randn(4, 48).to(torch.bfloat16)
    with torch.inference_mode():
        before = layer(x)
    with torch.no_grad():
        layer.weight.mul_(-1)                                # a training step or a user's edit
    with torch.inference_mode():
        after = layer(x)
        assert torch.equal(after, linear(x, layer.weight, layer.bias, "gelu"))
    assert not torch.equal(after, before)
    other = fused("gelu")
    with torch.no_grad():
        other.weight.add_(0.5)
    layer.load_state_dict(other.state_dict())
    with torch.inference_mode():
        assert torch.equal(layer(x), linear(x, other.weight, other.bias, "gelu"))


def test_a_pass_that_records_gradients_uses_the_weight_itself():
    layer = fused()
    x = torch.randn(4, 48).to(torch.bfloat16)
    out = layer(x)
    assert out.requires_grad and torch.equal(out, linear(x, layer.weight, layer.bias))
    assert layer._packed is None                             # no packed copy for a pass autograd records
