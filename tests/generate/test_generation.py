import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.generate import GREEDY, SamplingConfig, TextStream, generate


def test_cache_gives_the_same_logits_as_recomputation(tiny_model):
    ids = torch.randint(0, 300, (1, 9))
    full = tiny_model(ids).logits
    out = tiny_model(ids[:, :4], use_cache=True)
    steps = [out.logits]
    for t in range(4, 9):
        out = tiny_model(ids[:, t:t + 1], cache=out.cache, use_cache=True)
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("sampling", [GREEDY, SamplingConfig(temperature=1.5, top_k=50, top_p=0.95)])
def test_cached_generation_equals_recomputation_token_for_token(tiny_model, sampling):
    prompt = [5, 17, 42]
    cached = generate(tiny_model, prompt, 20, sampling, seed=3, use_cache=True)
    recomputed = generate(tiny_model, prompt, 20, sampling, seed=3, use_cache=False)
    assert cached == recomputed and len(cached.token_ids) == 20


def test_stops_on_eos_and_at_the_position_limit(tiny_model):
    first = generate(tiny_model, [1, 2], 5).token_ids[0]
    result = generate(tiny_model, [1, 2], 5, eos_id=first)
    assert result.token_ids == [first] and result.stop_reason == "eos"
    result = generate(tiny_model, list(range(60)), 10)
    assert result.stop_reason == "max_length" and len(result.token_ids) == 4   # 64 positions
    with pytest.raises(BertkitError, match="prompt"):
        generate(tiny_model, [], 5)


def test_stream_waits_for_whole_characters(bpe):
    ids = bpe.encode("café 東京")
    shown = []
    stream = TextStream(bpe.decode, shown.append)
    for i in ids:
        stream.add(i)
    assert stream.finish() == "café 東京"
    assert "".join(shown) == "café 東京" and all("\ufffd" not in s for s in shown)
