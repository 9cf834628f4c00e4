"""model/attention_dropout.py against the explicit path it replaces in CPU training (encoder._attention_with_weights
with model/dropout.py's dropout): at the same torch seed both draw the same dropout mask, so forward and input
gradients must agree; plus the dropout's statistics and the masking rules on planted inputs."""

import pytest
import torch

import bertkit.model.attention_dropout as attention_dropout
import bertkit.model.encoder as encoder_module
from bertkit.model import Encoder, EncoderConfig
from bertkit.model.attention_dropout import attention_with_dropout
from bertkit.model.encoder import _attention_with_weights


def explicit(q, k, v, mask, causal, p):
    return _attention_with_weights(q, k, v, mask, causal, p)[0]


def key_mask(B, T):
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, T // 2:] = False                                    # row 0 padded after half its length
    return mask[:, None, None, :]                               # (B, 1, 1, T) as encoder._padding_mask makes it


def run(fn, mask, causal, dtype, B=2, H=3, T=13, D=8, autocast=False, p=0.1, seed=5):
    """-> (output, d qkv) of fn on a fixed (B, T, 3, H, D) projection and a fixed output gradient."""
    rng = torch.Generator().manual_seed(1)
    qkv = torch.randn(B, T, 3, H, D, generator=rng, dtype=dtype).requires_grad_()
    q, k, v = qkv.permute(2, 0, 3, 1, 4)                        # (B, H, T, D) strided views, as SelfAttention's
    torch.manual_seed(seed)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = fn(q, k, v, mask, causal, p)
    y.backward(torch.randn(y.shape, generator=rng, dtype=y.dtype))
    return y.detach(), qkv.grad


@pytest.fixture(params=[1 << 20, 97], ids=["one chunk", "many odd chunks"])
def chunk_elements(request, monkeypatch):
    # 97 scores per chunk: one head of one row per chunk at T=13 (169 scores, not a multiple of the 4 slices a
    # 64-bit draw gives): the mask stream must run on across chunk boundaries
    monkeypatch.setattr(attention_dropout, "CHUNK_ELEMENTS", request.param)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
@pytest.mark.parametrize("masking", ["none", "keys", "causal", "keys+causal"])
def test_equals_the_explicit_path_with_the_same_mask(chunk_elements, dtype, tolerance, masking):
    mask = key_mask(2, 13) if "keys" in masking else None
    causal = "causal" in masking
    if mask is not None and causal:                             # as encoder._padding_mask combines them
        mask = mask & torch.ones(13, 13, dtype=torch.bool).tril()
    y_old, grad_old = run(explicit, mask, causal, dtype)
    y_new, grad_new = run(attention_with_dropout, mask, causal, dtype)
    torch.testing.assert_close(y_new, y_old, rtol=0, atol=tolerance)
    torch.testing.assert_close(grad_new, grad_old, rtol=0, atol=tolerance)
    assert not torch.equal(y_new, run(attention_with_dropout, mask, causal, dtype, seed=6)[0])   # p does drop


def test_bf16_autocast_within_rounding_of_the_explicit_path(chunk_elements):
    """Same dtypes as the explicit path (bf16 matmuls and softmax output, the dropout's multiply in fp32): equal
    bit for bit on this machine; the bound, one bf16 rounding (2**-8) of the largest magnitude, leaves room for
    oneDNN picking another bf16 kernel for the chunks' contiguous operands than for the strided whole elsewhere."""
    y_old, grad_old = run(explicit, key_mask(2, 40), False, torch.bfloat16, T=40, D=16, autocast=True)
    y_new, grad_new = run(attention_with_dropout, key_mask(2, 40), False, torch.bfloat16, T=40, D=16, autocast=True)
    assert y_new.dtype == grad_new.dtype == torch.bfloat16
    for new, old in ((y_new, y_old), (grad_new, grad_old)):
        assert (new.float() - old.float()).abs().max() <= 2 ** -8 * old.float().abs().max()


def planted(B, H, T, mask=None, causal=False, p=0.1):
    """q = k = 0 (uniform weights over the allowed keys) and V = the identity (D = T): output[..., i, j] is
    the dropped-out weight of key j for query i."""
    zeros = torch.zeros(B, H, T, T, dtype=torch.float64, requires_grad=True)
    v = torch.eye(T, dtype=torch.float64).expand(B, H, T, T).clone().requires_grad_()
    y = attention_with_dropout(zeros, zeros.detach().clone().requires_grad_(), v, mask, causal, p)
    return y, v


def test_keep_rate_and_unbiased():
    torch.manual_seed(0)
    T = 64
    weights, _ = planted(4, 4, T, p=0.1)                        # 65,536 weights, each 1/T before dropout
    kept = weights != 0
    assert abs(kept.double().mean().item() - 0.9) < 0.005      # sd of the rate: 0.0012
    assert abs((weights * T).mean().item() - 1.0) < 0.006     # unbiased; sd of the mean: 0.0013
    assert torch.allclose(weights[kept] * T, torch.tensor(65536 / (65536 - 6554), dtype=torch.float64))


def test_masked_keys_get_exactly_zero_weight_and_gradient():
    torch.manual_seed(0)
    mask = key_mask(2, 10)
    weights, v = planted(2, 3, 10, mask=mask)
    weights.sum().backward()
    assert torch.all(weights[0, :, :, 5:] == 0) and torch.all(v.grad[0, :, 5:] == 0)
    assert weights[0, :, :, :5].count_nonzero() > 0 and weights[1, :, :, 5:].count_nonzero() > 0


def test_causal_sees_no_later_key():
    torch.manual_seed(0)
    weights, _ = planted(2, 3, 12, causal=True)
    later = torch.ones(12, 12, dtype=torch.bool).triu(1)
    assert torch.all(weights[..., later] == 0)
    assert weights[..., ~later].count_nonzero() > 0.8 * 2 * 3 * 78      # 78 allowed pairs, ~90% kept


def test_row_with_every_key_masked_stays_finite():
    """Left padding under a causal mask: a query row with no key allowed gets uniform weights, as before."""
    mask = torch.ones(2, 1, 9, 9, dtype=torch.bool).tril()
    mask[0, :, 0] = False                                       # row 0 of batch 0: no key at all
    y_old, grad_old = run(explicit, mask, True, torch.float64, T=9)
    y_new, grad_new = run(attention_with_dropout, mask, True, torch.float64, T=9)
    assert torch.isfinite(y_new).all() and torch.isfinite(grad_new).all()
    torch.testing.assert_close(y_new, y_old, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad_new, grad_old, rtol=0, atol=1e-12)


def train_losses(monkeypatch, path, causal, steps=8):
    monkeypatch.setattr(encoder_module, "CHUNKED_MIN_KEYS", 1)     # these rows are short: take the chunks anyway
    if path == "explicit":
        monkeypatch.setattr(encoder_module, "attention_with_dropout", explicit)
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                           max_position_embeddings=32, causal=causal)
    encoder, head = Encoder(config), torch.nn.Linear(32, 3)
    optimizer = torch.optim.AdamW(list(encoder.parameters()) + list(head.parameters()), lr=1e-3)
    rng = torch.Generator().manual_seed(1)
    ids, labels = torch.randint(5, 50, (8, 20), generator=rng), torch.randint(0, 3, (8,), generator=rng)
    attention_mask = (torch.arange(20) < torch.randint(8, 21, (8, 1), generator=rng)).long()
    encoder.train()
    losses = []
    for _ in range(steps):
        hidden = encoder(ids, attention_mask=attention_mask).last_hidden_state
        loss = torch.nn.functional.cross_entropy(head(hidden[:, 0]), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_training_run_matches_the_explicit_path(monkeypatch, causal):
    new = train_losses(monkeypatch, "chunked", causal)
    old = train_losses(monkeypatch, "explicit", causal)
    assert new[-1] < new[0] - 0.05                              # it learns
    assert max(abs(a - b) for a, b in zip(new, old)) < 1e-5


def test_training_on_cpu_takes_the_chunked_path_and_eval_takes_sdpa(monkeypatch):
    calls = []
    monkeypatch.setattr(encoder_module, "attention_with_dropout", lambda *a: calls.append(1) or explicit(*a))
    monkeypatch.setattr(encoder_module, "CHUNKED_MIN_KEYS", 1)
    encoder = Encoder(EncoderConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                                    max_position_embeddings=32))
    ids = torch.randint(5, 50, (2, 6))
    encoder.train()(ids)
    assert len(calls) == 2
    encoder.eval()(ids)
    encoder.train()(ids, output_attentions=True)               # need_weights keeps the explicit path
    assert len(calls) == 2


def test_short_rows_keep_the_explicit_path_and_long_rows_take_the_chunks(monkeypatch):
    """CPU training switches to the chunks at CHUNKED_MIN_KEYS keys (below, the explicit path is as fast)."""
    chunked, explicit_calls = [], []
    monkeypatch.setattr(encoder_module, "attention_with_dropout", lambda *a: chunked.append(1) or explicit(*a))
    monkeypatch.setattr(encoder_module, "_attention_with_weights",
                        lambda *a: explicit_calls.append(1) or _attention_with_weights(*a))
    monkeypatch.setattr(encoder_module, "CHUNKED_MIN_KEYS", 8)
    encoder = Encoder(EncoderConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                                    max_position_embeddings=32)).train()
    encoder(torch.randint(5, 50, (2, 7)))
    assert (len(chunked), len(explicit_calls)) == (0, 2)
    encoder(torch.randint(5, 50, (2, 8)))
    assert (len(chunked), len(explicit_calls)) == (2, 2)
