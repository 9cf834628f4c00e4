import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.generate import SamplingConfig, filter_logits, next_token


def test_top_k_and_top_p_keep_the_right_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isfinite(filter_logits(logits, 2, None)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(filter_logits(logits, None, 0.8)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(filter_logits(logits, None, 0.81)).tolist() == [[True, True, True, False]]
    assert torch.isfinite(filter_logits(logits, None, 0.1)).tolist() == [[True, False, False, False]]
    shuffled = logits[:, [2, 0, 3, 1]]
    assert torch.isfinite(filter_logits(shuffled, None, 0.8)).tolist() == [[False, True, False, True]]


def test_greedy_and_seeded_sampling():
    logits = torch.tensor([[0.0, 3.0, 1.0]])
    assert int(next_token(logits, SamplingConfig(temperature=0))) == 1
    draws = lambda seed: [int(next_token(logits, SamplingConfig(), torch.Generator().manual_seed(seed + i)))
                          for i in range(20)]
    assert draws(1) == draws(1) and len(set(draws(1))) > 1


def test_invalid_settings_are_user_errors():
    with pytest.raises(BertkitError, match="top_p"):
        SamplingConfig(top_p=1.5)
    with pytest.raises(BertkitError, match="temperature"):
        SamplingConfig(temperature=-1)
