"""An encoder put into bf16 or int8 against the same weights in fp32, on a tiny random model.

Tolerances: bf16 keeps every token vector within cosine 0.999 of fp32 (bf16 has 8 significant bits); int8
within 0.99 (per-channel weights, per-token activations, 127 levels each).
"""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.model import Encoder, EncoderConfig
from bertkit.model.heads import SequenceClassificationHead
from bertkit.model.int8 import Int8Embedding, Int8Linear
from bertkit.model.pooling import pool
from bertkit.model.onednn import FusedLinear
from bertkit.model.precision import (apply_precision, cast_floats, dequantize_encoder, has_int8,
                                     quantizable_linears, quantize_encoder)
from bertkit.runtime import PrecisionChoice


def tiny(**changes) -> EncoderConfig:
    return EncoderConfig(**{**dict(vocab_size=60, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128,
                                   max_position_embeddings=40), **changes})


def inputs():
    torch.manual_seed(1)
    ids = torch.randint(5, 60, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    return ids, mask


def model(**changes):
    torch.manual_seed(0)
    encoder = Encoder(tiny(**changes)).eval()
    return encoder, {"classifier": SequenceClassificationHead(encoder.config, 3).eval()}


def token_cosines(a, b, mask):
    return F.cosine_similarity(a.float(), b.float(), dim=-1)[mask.bool()]


BF16 = PrecisionChoice("bf16", torch.bfloat16, "precision bf16")
INT8_FP32 = PrecisionChoice("int8", torch.float32, "int8")
INT8_BF16 = PrecisionChoice("int8", torch.bfloat16, "int8")


def test_bf16_stores_weights_in_bf16_and_stays_close():
    encoder, heads = model()
    ids, mask = inputs()
    with torch.no_grad():
        reference = encoder(ids, mask)
        apply_precision(encoder, heads, BF16)
        assert {p.dtype for p in encoder.parameters()} == {torch.bfloat16}           # no autocast: the weights
        assert {p.dtype for p in heads["classifier"].parameters()} == {torch.bfloat16}
        out = encoder(ids, mask)
        logits = heads["classifier"](out.pooled_output)
    assert out.last_hidden_state.dtype == torch.bfloat16
    assert token_cosines(out.last_hidden_state, reference.last_hidden_state, mask).min() >= 0.999
    vectors = pool(out.last_hidden_state, mask, "mean")
    assert vectors.dtype == torch.float32                                             # pooling sums in fp32
    assert F.cosine_similarity(vectors, pool(reference.last_hidden_state, mask, "mean")).min() >= 0.999
    assert logits.shape == (3, 3)


@pytest.mark.parametrize("choice, kernel", [(INT8_FP32, "int_mm"), (INT8_BF16, "dequant")])
def test_int8_stays_close_with_both_kernels(choice, kernel):
    encoder, heads = model()
    ids, mask = inputs()
    with torch.no_grad():
        reference = encoder(ids, mask).last_hidden_state
        quantize_encoder(encoder)
        apply_precision(encoder, heads, choice)
        out = encoder(ids, mask).last_hidden_state
    linears = [m for m in encoder.modules() if isinstance(m, Int8Linear)]
    assert len(linears) == 2 * 4 + 1 and {m.kernel for m in linears} == {kernel}      # 4 per block + pooler
    assert isinstance(encoder.embeddings.token, Int8Embedding)
    assert {m.weight_scale.dtype for m in linears} == {torch.float32}                 # scales never in bf16
    assert out.dtype == choice.dtype
    assert token_cosines(out, reference, mask).min() >= 0.99


def test_keep_leaves_named_layers_in_float_and_sharing_survives():
    encoder, _ = model(share_layers="all")
    names = quantizable_linears(encoder)
    assert names[0] == "blocks.0.attention.qkv"
    quantize_encoder(encoder, keep=["blocks.0.ffn.down"], embeddings=False)
    assert encoder.blocks[0] is encoder.blocks[1]                                    # ALBERT: still one block
    assert type(encoder.blocks[1].ffn.down) is nn.Linear
    assert isinstance(encoder.blocks[1].attention.qkv, Int8Linear)
    assert type(encoder.embeddings.token) is nn.Embedding
    assert has_int8(encoder) and not has_int8(encoder.blocks[0].ffn.down)


def test_dequantize_gives_back_float_modules_with_the_same_outputs():
    encoder, heads = model()
    ids, mask = inputs()
    quantize_encoder(encoder)
    apply_precision(encoder, heads, PrecisionChoice("fp32", torch.float32, "fp32"))   # dequant kernel, fp32
    with torch.no_grad():
        before = encoder(ids, mask).last_hidden_state
        plain = copy.deepcopy(encoder)
        dequantize_encoder(plain)
        after = plain(ids, mask).last_hidden_state
    assert not has_int8(plain)
    torch.testing.assert_close(after, before, atol=1e-6, rtol=1e-6)


def test_fused_onednn_linears_match_plain_bf16():
    """On CPU in bf16 the Linear layers run oneDNN's fused kernel (bias and GELU inside the matmul)."""
    encoder, heads = model()
    ids, mask = inputs()
    plain = copy.deepcopy(encoder)
    cast_floats(plain, torch.bfloat16)                       # bf16 weights, F.linear + separate GELU
    apply_precision(encoder, heads, BF16)
    assert isinstance(encoder.blocks[0].ffn.up, FusedLinear) and encoder.blocks[0].ffn.up.activation == "gelu"
    assert set(encoder.state_dict()) == set(plain.state_dict())                      # same weights, same names
    with torch.no_grad():
        fused, reference = encoder(ids, mask).last_hidden_state, plain(ids, mask).last_hidden_state
    assert token_cosines(fused, reference, mask).min() >= 0.9999
