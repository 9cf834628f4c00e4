import pytest
import torch

from bertkit.model.pooling import check_options, masked_max, masked_mean, normalize, pool, select_layers


def test_padding_is_excluded_from_every_pooling():
    tokens = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, -100.0]]])   # (1, 3, 2); the last is padding
    mask = torch.tensor([[1, 1, 0]])
    torch.testing.assert_close(pool(tokens, mask, "mean"), torch.tensor([[2.0, 3.0]]))
    torch.testing.assert_close(pool(tokens, mask, "max"), torch.tensor([[3.0, 4.0]]))
    torch.testing.assert_close(pool(tokens, mask, "cls"), torch.tensor([[1.0, 2.0]]))
    torch.testing.assert_close(pool(tokens, mask, "first-last-avg", first_layer=tokens * 3), torch.tensor([[4.0, 6.0]]))


def test_empty_rows_and_zero_vectors_stay_finite():
    tokens = torch.randn(2, 3, 4)
    mask = torch.tensor([[0, 0, 0], [1, 0, 0]])
    assert torch.isfinite(masked_mean(tokens, mask)).all()
    assert torch.isfinite(normalize(torch.zeros(1, 4))).all()
    assert masked_max(tokens, mask)[1].equal(tokens[1, 0])


def test_layer_strategies():
    layers = tuple(torch.full((1, 2, 3), float(i)) for i in range(7))   # embeddings + 6 layers
    expected = {"last": 6.0, "second-to-last": 5.0, "first": 1.0, "sum-all": 21.0, "sum-last-4": 18.0}
    for strategy, value in expected.items():
        assert select_layers(layers, strategy).unique().item() == value
    assert select_layers(layers, "concat-last-4").shape == (1, 2, 12)


def test_option_errors():
    with pytest.raises(ValueError, match="pooling"):
        check_options("avg", "last")
    with pytest.raises(ValueError, match="layers"):
        check_options("mean", "top")
    with pytest.raises(ValueError, match="pooler"):
        check_options("pooler", "sum-all")
