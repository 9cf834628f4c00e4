import pytest
import torch

from bertkit.model import Encoder, EncoderConfig, preset


def tiny(**changes) -> EncoderConfig:
    return EncoderConfig(vocab_size=50, hidden_size=32, num_layers=3, num_heads=4, intermediate_size=64,
                         max_position_embeddings=40, **changes)


def batch(B=3, T=9, vocab=50):
    torch.manual_seed(1)
    ids = torch.randint(5, vocab, (B, T))
    mask = torch.ones(B, T, dtype=torch.long)
    if B == 3:
        mask[1, 6:] = 0
        mask[2, 3:] = 0
    return ids, mask


@pytest.mark.parametrize("changes", [{}, {"norm_position": "pre"}, {"embedding_size": 16},
                                     {"share_layers": "all"}, {"share_layers": "attention"},
                                     {"share_layers": "ffn"}, {"position_offset": 2, "pad_token_id": 1},
                                     {"use_pooler": False}, {"activation": "gelu_tanh"}])
def test_variants_shapes_and_outputs(changes):
    config = tiny(**changes)
    encoder = Encoder(config).eval()
    ids, mask = batch()
    out = encoder(ids, mask, output_hidden_states=True, output_attentions=True)
    assert out.last_hidden_state.shape == (3, 9, 32)
    assert len(out.hidden_states) == config.num_layers + 1 and len(out.attentions) == config.num_layers
    assert out.attentions[0].shape == (3, 4, 9, 9)
    assert (out.pooled_output is None) == (not config.use_pooler)
    assert torch.isfinite(out.last_hidden_state).all()


def test_sdpa_path_equals_explicit_attention():
    encoder = Encoder(tiny()).eval()
    ids, mask = batch()
    fast = encoder(ids, mask).last_hidden_state
    explicit = encoder(ids, mask, output_attentions=True).last_hidden_state
    torch.testing.assert_close(fast, explicit, atol=1e-5, rtol=1e-5)


def test_padding_does_not_change_real_tokens():
    encoder = Encoder(tiny()).eval()
    ids, _ = batch(B=1, T=6)
    alone = encoder(ids).last_hidden_state
    padded_ids = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    padded_mask = torch.tensor([[1] * 6 + [0] * 4])
    padded = encoder(padded_ids, padded_mask).last_hidden_state[:, :6]
    torch.testing.assert_close(alone, padded, atol=1e-5, rtol=1e-5)


def test_attention_maps_ignore_padding():
    encoder = Encoder(tiny()).eval()
    ids, mask = batch()
    weights = encoder(ids, mask, output_attentions=True).attentions[0]
    assert weights[2, :, :, 3:].abs().max() == 0          # keys past the mask get no weight
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 9))


def test_layer_sharing_reduces_parameters():
    def count(config):
        return sum(p.numel() for p in Encoder(config).parameters())
    assert count(tiny(share_layers="all")) < count(tiny(share_layers="attention")) < count(tiny())
    assert count(tiny(embedding_size=8)) < count(tiny())


def test_causal_mask_blocks_future_tokens():
    encoder = Encoder(tiny(causal=True)).eval()
    ids, _ = batch(B=1, T=8)
    full = encoder(ids).last_hidden_state
    prefix = encoder(ids[:, :5]).last_hidden_state
    torch.testing.assert_close(full[:, :5], prefix, atol=1e-5, rtol=1e-5)


def test_config_errors_and_presets():
    with pytest.raises(ValueError, match="divisible"):
        EncoderConfig(hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="unknown preset"):
        preset("bert-huge")
    assert preset("bert-tiny").hidden_size == 128
    assert preset("roberta-base").max_length == 512


def test_dropout_is_active_in_training_only():
    encoder = Encoder(tiny())
    ids, mask = batch()
    encoder.train()
    a, b = encoder(ids, mask).last_hidden_state, encoder(ids, mask).last_hidden_state
    assert not torch.allclose(a, b)
    encoder.eval()
    torch.testing.assert_close(encoder(ids, mask).last_hidden_state, encoder(ids, mask).last_hidden_state)


def test_cache_equals_recomputation():
    config = tiny(causal=True, norm_position="pre", embedding_norm=False, type_vocab_size=0, use_pooler=False,
                  scaled_residual_init=True)
    encoder = Encoder(config).eval()
    ids, _ = batch(B=2, T=7)
    full = encoder(ids).last_hidden_state
    out = encoder(ids[:, :4], use_cache=True)
    steps = [out.last_hidden_state]
    for t in range(4, 7):
        out = encoder(ids[:, t:t + 1], cache=out.cache, use_cache=True)
        steps.append(out.last_hidden_state)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert out.cache.length == 7


@pytest.mark.parametrize("changes", [{}, {"norm_position": "pre"}, {"use_pooler": False}, {"share_layers": "all"}])
def test_cls_only_last_layer_equals_the_full_pass(changes):
    encoder = Encoder(tiny(**changes)).eval()
    ids, mask = batch()
    full = encoder(ids, mask)
    short = encoder(ids, mask, cls_only=True)
    assert short.last_hidden_state.shape == (3, 1, 32)
    torch.testing.assert_close(short.last_hidden_state[:, 0], full.last_hidden_state[:, 0], atol=1e-6, rtol=1e-5)
    if full.pooled_output is not None:
        torch.testing.assert_close(short.pooled_output, full.pooled_output, atol=1e-6, rtol=1e-5)
    # gradients reach every layer, as in the full pass
    encoder.train()
    encoder(ids, mask, cls_only=True).last_hidden_state.sum().backward()
    assert all(p.grad is not None for n, p in encoder.named_parameters() if "pooler" not in n)
    with pytest.raises(ValueError, match="cls_only"):
        encoder(ids, mask, cls_only=True, output_hidden_states=True)


def test_cls_only_with_int8_quantized_linears():
    from bertkit.model.precision import quantize_encoder
    quantized = Encoder(tiny()).eval()
    quantize_encoder(quantized)
    ids, mask = batch()
    torch.testing.assert_close(quantized(ids, mask, cls_only=True).pooled_output, quantized(ids, mask).pooled_output)
