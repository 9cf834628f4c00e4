"""The CPU dropout fast path: right rate, unbiased, same mask forward and backward, seeded, dtype kept."""
import torch
import torch.nn.functional as F

from bertkit.model.dropout import Dropout, dropout, keep_mask


def test_keep_rate_and_scale_match_p():
    mask = keep_mask(torch.Size([2_000_003]), 0.1)
    kept = mask > 0
    assert abs(kept.float().mean().item() - 0.9) < 0.002
    assert torch.allclose(mask[kept], torch.tensor(65536 / (65536 - 6554)))
    assert abs(mask.mean().item() - 1.0) < 0.003                      # unbiased: E[mask] = 1


def test_slices_of_one_draw_are_independent():
    mask = keep_mask(torch.Size([400_000]), 0.5).view(-1, 4) > 0       # the four 16-bit slices of each word
    rates = mask.float().mean(0)
    assert torch.allclose(rates, torch.full((4,), 0.5), atol=0.01)
    both = (mask[:, 0] & mask[:, 1]).float().mean().item()
    assert abs(both - 0.25) < 0.01


def test_backward_uses_the_forward_mask():
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, 0.3)
    y.backward(torch.ones_like(y))
    dropped = y == 0
    assert dropped.any() and (~dropped).any()
    assert torch.equal(x.grad == 0, dropped)
    assert torch.allclose(y[~dropped], x[~dropped] * x.grad[~dropped])


def test_seeded_runs_repeat_and_differ_between_calls():
    torch.manual_seed(7)
    a, b = dropout(torch.ones(1000), 0.1), dropout(torch.ones(1000), 0.1)
    torch.manual_seed(7)
    assert torch.equal(dropout(torch.ones(1000), 0.1), a)
    assert not torch.equal(a, b)


def test_dtype_eval_and_edge_rates():
    x = torch.randn(8, 16, dtype=torch.bfloat16)
    assert dropout(x, 0.1).dtype == torch.bfloat16
    layer = Dropout(0.1).eval()
    assert layer(x) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), F.dropout(x, 1.0))            # everything dropped
    assert Dropout(0.2).state_dict() == {}
