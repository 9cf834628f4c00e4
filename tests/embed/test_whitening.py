from __future__ import annotations

import json

import numpy as np
import pytest

from bertkit.embed.whitening import (WhiteningStats, encode_composed, fit_whitening, load_whitening,
                                     save_whitening, whiten_model)
from bertkit.errors import BertkitError


def _correlated(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, dim)) @ rng.standard_normal((dim, dim)) + 3.0).astype(np.float32)


def test_streaming_statistics_match_the_whole_batch():
    vectors = _correlated(500, 8)
    stats = WhiteningStats(8)
    for start, stop in [(0, 1), (1, 77), (77, 300), (300, 500)]:
        stats.update(vectors[start:stop])
    assert stats.count == 500
    np.testing.assert_allclose(stats.mean, vectors.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats.comoment / 499, np.cov(vectors.T.astype(np.float64)), rtol=1e-4, atol=1e-4)


def test_whitened_vectors_have_zero_mean_and_identity_covariance():
    vectors = _correlated(2000, 8)
    whitening = fit_whitening(np.array_split(vectors, 7))
    out = whitening.apply(vectors)
    np.testing.assert_allclose(out.mean(0), 0, atol=1e-3)
    np.testing.assert_allclose(np.cov(out.T), np.eye(8), atol=1e-2)
    reduced = fit_whitening([vectors], dim=3)
    assert reduced.apply(vectors).shape == (2000, 3)


def test_refuses_fewer_vectors_than_dimensions():
    with pytest.raises(BertkitError, match="at least as many texts as vector dimensions: got 5 texts for 8"):
        fit_whitening([_correlated(5, 8)])
    with pytest.raises(BertkitError, match="between 1 and"):
        fit_whitening([_correlated(50, 8)], dim=9)


def test_save_and_load_keep_other_metadata(tmp_path):
    (tmp_path / "bertkit.json").write_text(json.dumps({"task": "embed", "encode": {"normalize": True}}))
    whitening = fit_whitening([_correlated(100, 8)], dim=4)
    save_whitening(tmp_path, whitening, pooling="mean")
    meta = json.loads((tmp_path / "bertkit.json").read_text())
    assert meta["task"] == "embed" and meta["encode"] == {"normalize": True, "pooling": "mean"}
    assert meta["whitening"]["dim_out"] == 4 and meta["whitening"]["fitted_on"] == 100
    loaded = load_whitening(tmp_path)
    np.testing.assert_allclose(loaded.kernel, whitening.kernel)
    assert load_whitening(tmp_path / "missing") is None


def test_whiten_model_saves_a_folder_whose_vectors_are_whitened(tmp_path, tiny_model_dir, make_sentences):
    import bertkit

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(make_sentences(200)) + "\n", encoding="utf-8")
    whiten_model(bertkit.load(tiny_model_dir), corpus, tmp_path / "white", dim=16, chunk_size=64)
    model = bertkit.load(tmp_path / "white")
    vectors = encode_composed(model, make_sentences(200), normalize=False)
    assert vectors.shape == (200, 16)
    np.testing.assert_allclose(vectors.mean(0), 0, atol=1e-2)
    with pytest.raises(BertkitError, match="at least as many texts"):
        small = tmp_path / "small.txt"
        small.write_text("\n".join(make_sentences(10)), encoding="utf-8")
        whiten_model(bertkit.load(tiny_model_dir), small, tmp_path / "nope")


def test_an_index_over_a_whitened_model_encodes_queries_the_same_way(tmp_path, tiny_model_dir, make_sentences):
    import bertkit
    from bertkit import Index
    from bertkit.search import EncoderSpec, ModelTextEncoder

    corpus = tmp_path / "corpus.txt"
    texts = make_sentences(64, seed=5)
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    whiten_model(bertkit.load(tiny_model_dir), corpus, tmp_path / "white", dim=12)
    index = Index.create(tmp_path / "idx", encoder=ModelTextEncoder(EncoderSpec(str(tmp_path / "white"))))
    index.add([str(i) for i in range(20)], texts[:20])
    assert index.save().dim == 12
    index.close()
    with Index.open(tmp_path / "idx") as reopened:
        assert reopened.search(texts[7], k=1)[0].id == "7"


@pytest.mark.parametrize("dim", [0, 33])
def test_a_dim_outside_the_vector_size_is_refused_before_the_corpus_is_encoded(tmp_path, tiny_model_dir,
                                                                                make_sentences, dim):
    import bertkit

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(make_sentences(40)) + "\n", encoding="utf-8")
    model = bertkit.load(tiny_model_dir)
    encoded = []
    real_encode = model.encode
    model.encode = lambda texts, **options: encoded.append(len(texts)) or real_encode(texts, **options)
    with pytest.raises(BertkitError, match=f"--dim {dim}: must be between 1 and the model's vector size 32"):
        whiten_model(model, corpus, tmp_path / "white", dim=dim)
    assert encoded == [] and not (tmp_path / "white").exists()     # it encoded the whole corpus first
