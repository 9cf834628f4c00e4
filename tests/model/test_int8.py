"""int8 modules against the fp32 layers they replace: exact where the math is exact, stated tolerances elsewhere."""
import pytest
import torch
from torch import nn

from bertkit.model.int8 import Int8Embedding, Int8Linear, quantize_rows


def test_quantize_rows_is_symmetric_per_row():
    weight = torch.tensor([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [100.0, 1.0, -50.0]])
    values, scale = quantize_rows(weight)
    assert values.dtype == torch.int8 and scale.dtype == torch.float32
    torch.testing.assert_close(scale, torch.tensor([1.0 / 127, 1.0, 100.0 / 127]))
    assert values[0].tolist() == [64, -127, 32] and values[1].tolist() == [0, 0, 0]
    assert values[2, 0] == 127 and values[2, 2] == -64                  # each row reaches 127 at its own peak
    # dequantization error at most half a step per row
    assert ((values.float() * scale[:, None] - weight).abs() <= scale[:, None] / 2 + 1e-7).all()


def test_int_mm_kernel_equals_the_integer_math():
    torch.manual_seed(0)
    linear = nn.Linear(48, 24)
    module = Int8Linear.from_linear(linear)
    x = torch.randn(2, 5, 48)
    rows = x.reshape(-1, 48)
    x_scale = rows.abs().amax(1, keepdim=True) / 127
    x_int = torch.round(rows / x_scale)
    reference = (x_int @ module.weight.float().t()) * x_scale * module.weight_scale + linear.bias
    torch.testing.assert_close(module(x), reference.view(2, 5, 24).detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel, dtype, min_cosine", [("int_mm", torch.float32, 0.999),
                                                       ("dequant", torch.float32, 0.9999),
                                                       ("dequant", torch.bfloat16, 0.999)])
def test_kernels_stay_close_to_fp32(kernel, dtype, min_cosine):
    torch.manual_seed(0)
    linear = nn.Linear(64, 96)
    module = Int8Linear.from_linear(linear)
    module.set_kernel(kernel)
    x = torch.randn(7, 64)
    with torch.no_grad():
        out = module(x.to(dtype))
        reference = linear(x)
    assert out.dtype == dtype and out.shape == (7, 96)
    assert torch.nn.functional.cosine_similarity(out.float(), reference, dim=-1).min() >= min_cosine


def test_dequant_cache_follows_the_input_dtype():
    module = Int8Linear.from_linear(nn.Linear(8, 4))
    module.set_kernel("dequant")
    assert module(torch.randn(2, 8)).dtype == torch.float32
    assert module(torch.randn(2, 8).bfloat16()).dtype == torch.bfloat16


def test_int8_embedding_rows():
    torch.manual_seed(0)
    embedding = nn.Embedding(20, 16, padding_idx=0)
    module = Int8Embedding.from_embedding(embedding)
    ids = torch.tensor([[0, 3, 19], [5, 5, 1]])
    out = module(ids)
    assert out.dtype == torch.float32 and out.shape == (2, 3, 16)
    assert out[0, 0].abs().max() == 0                                   # the padding row stays zero
    step = embedding.weight.abs().amax(1)[ids] / 127
    assert ((out - embedding(ids)).abs() <= step.unsqueeze(-1) / 2 + 1e-7).all()
    module.dtype = torch.bfloat16
    assert module(ids).dtype == torch.bfloat16
