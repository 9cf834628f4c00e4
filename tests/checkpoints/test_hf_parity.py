"""Parity with real weights: all-MiniLM-L6-v2 loaded by bertkit against transformers and sentence-transformers."""
import numpy as np
import pytest
import torch

import bertkit

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the stage while the crowd sings along with every word.",
    "Hello!",
    "BERT reads text in both directions at once, which is what makes its representations so useful "
    "for classification, tagging and question answering, and why it became the default encoder.",
    "北京是中国的首都。",
    "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e \U0001F600 costs \u20ac4.50",
    "",
    "   ",
    "[MASK] is a special token",
]


def real_sentences(n=64):
    from bertkit.quickstart import builtin_sentences
    texts = builtin_sentences()[: n - len(SENTENCES)] + SENTENCES
    return [t * (1 + i % 4) if i % 5 == 0 else t for i, t in enumerate(texts)]   # mixed lengths


@pytest.fixture(scope="module")
def loaded(minilm_dir):
    return bertkit.load(minilm_dir, device="cpu")


def test_last_hidden_state_matches_transformers(loaded, minilm_dir):
    from transformers import AutoModel, AutoTokenizer

    texts = real_sentences()
    hf_tok = AutoTokenizer.from_pretrained(str(minilm_dir))
    ref = AutoModel.from_pretrained(str(minilm_dir), attn_implementation="sdpa").eval()
    batch = hf_tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    ours = loaded.tokenizer.pad_to_tensors(loaded.tokenizer.encode_batch(texts, max_length=256).input_ids)
    assert torch.equal(ours["input_ids"], batch["input_ids"])
    with torch.no_grad():
        expected = ref(**batch)
        got = loaded.encoder(ours["input_ids"], ours["attention_mask"], ours["token_type_ids"])
    real = ours["attention_mask"].bool()
    assert (got.last_hidden_state - expected.last_hidden_state)[real].abs().max() < 1e-4
    # Values at padding positions feed no output; transformers' own sdpa and eager paths differ there by
    # ~1e-4, so they are compared more loosely.
    assert (got.last_hidden_state - expected.last_hidden_state)[~real].abs().max() < 1e-3
    assert (got.pooled_output - expected.pooler_output).abs().max() < 1e-4


def test_sentence_vectors_match_sentence_transformers(loaded, minilm_dir):
    from sentence_transformers import SentenceTransformer

    texts = [t for t in real_sentences() if t.strip()]   # empty texts are refused (test below)
    reference = SentenceTransformer(str(minilm_dir), device="cpu").encode(texts, batch_size=16,
                                                                          normalize_embeddings=True)
    ours = loaded.encode(texts, batch_size=16, pooling="mean", normalize=True)
    cosine = (ours * reference).sum(1)
    assert ours.shape == reference.shape
    assert cosine.min() >= 0.9999


def test_input_order_batch_size_and_empty_texts(loaded):
    texts = ["short", "a", "a somewhat longer sentence than the first", "an even longer sentence than the first two"]
    one_by_one = np.stack([loaded.encode([t])[0] for t in texts])
    batched = loaded.encode(texts, batch_size=3)
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)
    assert np.isfinite(batched).all()
    with pytest.raises(bertkit.errors.BertkitError, match="text 1 is empty"):   # the server's rule (its 422)
        loaded.encode(["short", "   "])


def test_folder_defaults_from_sentence_transformers_config(loaded):
    assert loaded.encode_defaults == {"normalize": True, "pooling": "mean", "max_length": 256}
