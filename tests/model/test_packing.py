"""The packed encoder forward (model/packing.py): the same numbers as the padded forward, without the padding."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import bertkit
from bertkit.features import embed_batch
from bertkit.model.config import EncoderConfig, preset
from bertkit.model.encoder import Encoder
from bertkit.model.packing import Packing, choose_grids, grid_width
from bertkit.model.precision import apply_precision
from bertkit.model.sentence import SentenceConfig, SentenceEncoder
from bertkit.runtime import PrecisionChoice

SMALL = dict(hidden_size=64, num_heads=4, intermediate_size=128, vocab_size=120)
FAMILIES = {
    "bert": EncoderConfig(num_layers=2, **SMALL),
    "roberta": preset("roberta-base", num_layers=2, **SMALL),
    "albert": preset("albert-base", num_layers=3, embedding_size=32, **SMALL),
    "pre-ln": EncoderConfig(num_layers=2, norm_position="pre", **SMALL),
}
LENGTHS = [11, 7, 2, 11, 4]


def _batch(config, side):
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, config.vocab_size, (len(LENGTHS), max(LENGTHS)), generator=generator)
    mask = (torch.arange(max(LENGTHS)) < torch.tensor(LENGTHS)[:, None]).long()        # right padding
    if side == "left":
        mask = mask.flip(1)
    ids = ids.masked_fill(mask == 0, config.pad_token_id)
    types = torch.randint(0, config.type_vocab_size, ids.shape, generator=generator) * mask
    return ids, mask, types


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("family", FAMILIES)
def test_packed_forward_gives_the_padded_forwards_numbers(family, side):
    torch.manual_seed(0)
    encoder = Encoder(FAMILIES[family]).eval()
    ids, mask, types = _batch(encoder.config, side)
    with torch.no_grad():
        padded = encoder(ids, mask, types, output_hidden_states=True)
        packed = encoder(ids, mask, types, output_hidden_states=True, packed=True)
    real = mask.bool()
    assert len(packed.hidden_states) == len(padded.hidden_states) == encoder.config.num_layers + 1
    for ours, reference in zip(packed.hidden_states, padded.hidden_states):     # every layer, --layers reads them
        assert (ours - reference)[real].abs().max() < 1e-6
        assert not ours[~real].any()                                              # zeros at the padding
    assert (packed.last_hidden_state - padded.last_hidden_state)[real].abs().max() < 1e-6
    if side == "right":           # the pooler reads position 0, a real token only under right padding
        assert (packed.pooled_output - padded.pooled_output).abs().max() < 1e-6
    if encoder.config.type_vocab_size < 2:      # RoBERTa: one segment
        return
    # token_type_ids matter here (a planted difference): without them the numbers move
    with torch.no_grad():
        untyped = encoder(ids, mask, None, packed=True).last_hidden_state
    assert (untyped - packed.last_hidden_state)[real].abs().max() > 1e-3


def test_packed_sentence_vectors_every_pooling_and_layers():
    torch.manual_seed(0)
    encoder = Encoder(FAMILIES["bert"]).eval()
    ids, mask, types = _batch(encoder.config, "right")
    for pooling, layers in [("mean", "last"), ("cls", "last"), ("max", "sum-last-4"), ("pooler", "last"),
                            ("first-last-avg", "last"), ("last-token", "concat-last-4"), ("mean", "1,2")]:
        sentence = SentenceEncoder(encoder, SentenceConfig(pooling=pooling, layers=layers))
        padded = embed_batch(sentence, ids, mask, types, packed=False)
        packed = embed_batch(sentence, ids, mask, types, packed=True)
        np.testing.assert_allclose(packed, padded, atol=1e-6, err_msg=f"{pooling} {layers}")


def test_packing_round_trip_and_no_padding_shortcut():
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 1, 1]])
    packing = Packing.from_mask(mask, (3, 3), torch.device("cpu"))
    grid = torch.arange(9.0).view(3, 3, 1)
    rows = packing.pack(grid)
    assert rows.squeeze(1).tolist() == [0, 1, 2, 3, 7, 8]
    assert packing.positions.tolist() == [0, 1, 2, 0, 1, 2]            # the padded grid's columns (left padding)
    assert torch.equal(packing.unpack(rows), grid * mask[..., None])
    # attention: one grid of 3 texts, 16 wide (ATTENTION_WIDTH_STEP), shortest first; each real token once
    assert [(c.rows, c.width) for c in packing.chunks] == [(3, 16)]
    assert packing.attention_index.tolist() == [32, 33, 34, 0, 16, 17] and packing.grid_rows == 48
    assert torch.equal(packing.from_attention(packing.to_attention(rows)), rows)
    assert packing.chunks[0].key_mask.squeeze().sum(1).tolist() == [1, 2, 3]
    # padding slots copy row 0 (finite, masked as keys); the real slots hold their own rows
    assert packing.to_attention(rows).squeeze(1).tolist()[:3] == [3, 0, 0] and \
        packing.to_attention(rows).squeeze(1).tolist()[32:35] == [0, 1, 2]
    full = Packing.from_mask(torch.ones(2, 16, dtype=torch.long), (2, 16), torch.device("cpu"))
    assert full.index is None and full.grid_source is None and [c.key_mask for c in full.chunks] == [None]
    wide = torch.arange(32.0).view(2, 16, 1)
    assert full.pack(wide).shape == (32, 1) and torch.equal(full.unpack(full.pack(wide)), wide)
    rows = full.pack(wide)
    assert full.to_attention(rows) is rows and full.from_attention(rows) is rows     # the grid is the rows: no copy


def test_packed_refuses_what_it_cannot_compute():
    causal = Encoder(preset("gpt2-small", num_layers=1, **SMALL)).eval()
    assert not causal.can_pack
    ids = torch.ones(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="packed"):
        causal(ids, packed=True)
    bert = Encoder(FAMILIES["bert"]).eval()
    with pytest.raises(ValueError, match="packed"):
        bert(ids, output_attentions=True, packed=True)


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return bertkit.load(minilm_dir, device="cpu")


TEXTS = ["The quick brown fox jumps over the lazy dog.", "Hello!",
         "A man is playing a guitar on the stage while the crowd sings along with every word of the song.",
         "北京是中国的首都。", "short one", "BERT reads text in both directions at once."]


def test_packed_minilm_matches_transformers(minilm, minilm_dir):
    from transformers import AutoModel

    ref = AutoModel.from_pretrained(str(minilm_dir), attn_implementation="sdpa").eval()
    batch = minilm.tokenizer.pad_to_tensors(minilm.tokenizer.encode_batch(TEXTS, max_length=256).input_ids)
    with torch.no_grad():
        expected = ref(**batch).last_hidden_state
        got = minilm.encoder(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], packed=True)
    real = batch["attention_mask"].bool()
    assert (got.last_hidden_state - expected)[real].abs().max() < 1e-4      # test_hf_parity's bound


@pytest.mark.parametrize("precision, tolerance", [("fp32", 1e-6), ("bf16", 2 ** -7)])
def test_packed_minilm_vectors_equal_padded(minilm_dir, precision, tolerance):
    model = bertkit.load(minilm_dir, device="cpu", precision=precision)
    sentence = model.sentence_encoder("mean", "last", True)
    batch = model.tokenizer.pad_to_tensors(model.tokenizer.encode_batch(TEXTS, max_length=256).input_ids)
    padded = embed_batch(sentence, batch["input_ids"], batch["attention_mask"], packed=False)
    packed = embed_batch(sentence, batch["input_ids"], batch["attention_mask"], packed=True)
    assert np.abs(packed - padded).max() < tolerance
    # Model.encode (one text at a time: no padding at all) is the same path
    one = model.encode(TEXTS[:1], pooling="mean", normalize=True)
    assert np.abs(one[0] - packed[0]).max() < tolerance


def test_bf16_fused_linears_run_packed():
    torch.manual_seed(0)
    encoder = Encoder(FAMILIES["bert"]).eval()
    ids, mask, types = _batch(encoder.config, "right")
    with torch.no_grad():
        reference = encoder(ids, mask, types).last_hidden_state
    apply_precision(encoder, {}, PrecisionChoice("bf16", torch.bfloat16, "test"))
    with torch.no_grad():
        padded = encoder(ids, mask, types).last_hidden_state.float()
        packed = encoder(ids, mask, types, packed=True).last_hidden_state.float()
    real = mask.bool()
    assert (packed - reference)[real].abs().max() < 0.1                      # bf16 against fp32
    assert (packed - padded)[real].abs().max() < 0.05                        # one rounding step apart at most


def test_row_buckets_are_few_and_waste_at_most_a_sixteenth():
    from bertkit.model.packing import bucket_rows
    assert [bucket_rows(n) for n in (1, 16, 17, 255, 256, 257, 350, 1000, 5000)] == \
        [16, 16, 32, 256, 256, 272, 352, 1024, 5120]
    sizes = [bucket_rows(n) for n in range(1, 8193)]
    assert all(b >= n for n, b in zip(range(1, 8193), sizes))
    assert all((b - n) / n <= 1 / 16 for n, b in zip(range(256, 8193), sizes[255:]))
    assert len(set(sizes)) <= 16 + 5 * 16         # 16 up to 256, then 16 per doubling up to 8192


def test_bucketed_rows_run_every_layer_at_the_bucket_and_leave_the_numbers_alone():
    torch.manual_seed(0)
    encoder = Encoder(FAMILIES["bert"]).eval()
    ids, mask, types = _batch(encoder.config, "left")          # 35 real tokens -> 48 rows
    seen = []
    hook = encoder.blocks[0].ffn.up.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    with torch.no_grad():
        plain = encoder(ids, mask, types, output_hidden_states=True, packed=True)
        encoder.bucket_packed_rows = True
        bucketed = encoder(ids, mask, types, output_hidden_states=True, packed=True)
    hook.remove()
    assert seen == [sum(LENGTHS), 48]
    for ours, reference in zip(bucketed.hidden_states, plain.hidden_states):
        assert torch.equal(ours, reference)                  # the extra rows never reach a real token
    # no padding at all: the bucket's extra rows still come and go (the attention grid is 16 wide, 5 of them real:
    # the padded forward's width-5 attention sums in another order, hence 1e-6 there)
    full = torch.ones(2, 5, dtype=torch.long)
    with torch.no_grad():
        bucketed_full = encoder(ids[:2, :5], full, packed=True).last_hidden_state
        encoder.bucket_packed_rows = False
        assert torch.equal(bucketed_full, encoder(ids[:2, :5], full, packed=True).last_hidden_state)
        assert (bucketed_full - encoder(ids[:2, :5], full).last_hidden_state).abs().max() < 1e-6
    packing = Packing.from_mask(full, (2, 5), torch.device("cpu"), bucket=True)
    assert packing.tokens == 10 and packing.positions.shape[0] == 16


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN")
def test_bf16_on_cpu_buckets_packed_rows_and_gives_the_same_bits():
    """oneDNN compiles a kernel per row count (~5 ms each on an AMX core): bf16 packed passes run bucketed row
    counts, with the unbucketed pass's exact vectors."""
    torch.manual_seed(0)
    encoder = Encoder(FAMILIES["bert"]).eval()
    apply_precision(encoder, {}, PrecisionChoice("bf16", torch.bfloat16, "test"))
    assert encoder.bucket_packed_rows
    sentence = SentenceEncoder(encoder, SentenceConfig(pooling="mean"))
    ids, mask, types = _batch(encoder.config, "right")
    bucketed = embed_batch(sentence, ids, mask, types, packed=True)
    encoder.bucket_packed_rows = False
    assert np.array_equal(bucketed, embed_batch(sentence, ids, mask, types, packed=True))
    apply_precision(encoder, {}, PrecisionChoice("fp32", torch.float32, "test"))
    assert not encoder.bucket_packed_rows


def test_attention_grids_are_a_step_wide_one_per_width():
    assert [grid_width(n) for n in (0, 1, 15, 16, 17, 31, 32, 33, 500)] == [16, 16, 16, 16, 32, 32, 32, 48, 512]
    assert choose_grids([3, 5, 9, 14, 16, 20, 30, 200, 201, 209, 215]) == [(0, 5), (5, 7), (7, 9), (9, 11)]
    assert choose_grids([7]) == [(0, 1)]
    lengths = [3, 40, 20, 17, 33, 9]
    mask = (torch.arange(40) < torch.tensor(lengths)[:, None]).long()
    packing = Packing.from_mask(mask, (6, 40), torch.device("cpu"))
    assert [(c.rows, c.width) for c in packing.chunks] == [(2, 16), (2, 32), (2, 48)]
    assert [c.key_mask.squeeze(1).squeeze(1).sum(1).tolist() for c in packing.chunks] == [[3, 9], [17, 20], [33, 40]]
    rows = torch.arange(float(sum(lengths)))[:, None]
    grid = packing.to_attention(rows)
    for chunk, texts in zip(packing.chunks, ([0, 5], [3, 2], [4, 1])):     # each text's tokens in its grid row
        for local, b in enumerate(texts):
            first = sum(lengths[:b])
            at = chunk.start + local * chunk.width
            assert grid[at:at + lengths[b], 0].tolist() == list(range(first, first + lengths[b]))
    assert torch.equal(packing.from_attention(grid), rows)


def test_attention_padding_slots_do_not_touch_the_numbers():
    """The grids' padding slots hold a copy of row 0, not zeros: masked keys weigh exactly 0, so any finite
    content there gives the same bits (here: another real row)."""
    torch.manual_seed(0)
    encoder = Encoder(FAMILIES["bert"]).eval()
    ids, mask, types = _batch(encoder.config, "right")
    with torch.no_grad():
        reference = encoder(ids, mask, types, packed=True).last_hidden_state
        real_from_mask = Packing._real

        def elsewhere(*args):
            packing = real_from_mask(*args)
            padding = torch.ones_like(packing.grid_source, dtype=torch.bool)
            padding[packing.attention_index] = False
            packing.grid_source = packing.grid_source.masked_fill(padding, 7)
            return packing
        Packing._real = staticmethod(elsewhere)
        try:
            moved = encoder(ids, mask, types, packed=True).last_hidden_state
        finally:
            Packing._real = real_from_mask
    assert torch.equal(moved, reference)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 1e-6)])
@pytest.mark.parametrize("pooling", ["mean", "mean-sqrt-len"])
def test_pooling_the_packed_rows_equals_the_masked_grid(pooling, dtype, tolerance):
    """pool_rows over the real tokens' rows (a segment sum, no (B, T, C) grid) against `pool` over the padded grid,
    on planted lengths (one of them the full width, one a single token) with NaN planted in the padding: the padding
    is never read, and the sums differ by float32 roundoff only (both sum in fp32, bf16 inputs included)."""
    from bertkit.model.pooling import pool, pool_rows
    lengths = [5, 1, 9, 3, 9, 2]
    mask = (torch.arange(9) < torch.tensor(lengths)[:, None]).long()                 # (B, T)
    grid = torch.randn(len(lengths), 9, 24, generator=torch.Generator().manual_seed(3)).to(dtype)
    packing = Packing.from_mask(mask, mask.shape, torch.device("cpu"), bucket=True)
    rows = packing.pack(grid)[:packing.tokens]                                       # (N, C)
    expected = pool(grid, mask, pooling)
    got = pool_rows(rows, packing.texts(), len(lengths), pooling)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert (got - expected).abs().max() <= tolerance * expected.abs().max()
    poisoned = grid.masked_fill(~mask.bool()[:, :, None], float("nan"))                # padding is never read
    assert torch.isfinite(pool_rows(packing.pack(poisoned)[:packing.tokens], packing.texts(), len(lengths),
                                    pooling)).all()


def test_mean_vectors_pool_the_packed_rows_without_unpacking(monkeypatch):
    """Sentence vectors with mean pooling over the last layer (the server's and bf16 Model.encode's path) never
    build the (B, T, C) grid, and equal the padded forward's vectors."""
    torch.manual_seed(0)
    encoder = Encoder(FAMILIES["bert"]).eval()
    ids, mask, types = _batch(encoder.config, "right")
    for normalize in (False, True):
        sentence = SentenceEncoder(encoder, SentenceConfig(pooling="mean", normalize=normalize))
        padded = embed_batch(sentence, ids, mask, types, packed=False)
        with monkeypatch.context() as patched:
            patched.setattr(Packing, "unpack", lambda self, rows: pytest.fail("unpacked the rows"))
            packed = embed_batch(sentence, ids, mask, types, packed=True)
        np.testing.assert_allclose(packed, padded, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_key_biases_are_what_sdpa_makes_of_the_bool_masks(dtype):
    """The packed forward hands SDPA each grid's mask as a 0 / -inf bias made once per pass (Packing.key_biases),
    not the bool mask SDPA would convert in every layer: the same bits out."""
    lengths = [3, 16, 9, 20]
    mask = (torch.arange(20) < torch.tensor(lengths)[:, None]).long()
    packing = Packing.from_mask(mask, mask.shape, torch.device("cpu"))
    biases = packing.key_biases(dtype)
    assert packing.key_biases(dtype) is biases                                    # made once per pass
    generator = torch.Generator().manual_seed(2)
    for chunk, bias in zip(packing.chunks, biases):
        assert (bias is None) == (chunk.key_mask is None)
        if bias is None:
            continue
        q, k, v = (torch.randn(chunk.rows, 4, chunk.width, 8, generator=generator).to(dtype) for _ in range(3))
        with torch.no_grad():
            assert torch.equal(F.scaled_dot_product_attention(q, k, v, attn_mask=chunk.key_mask),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=bias))
