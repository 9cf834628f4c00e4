"""bertkit.load(...).encode on a tiny random model: options, long texts, empty input."""
import numpy as np
import pytest

import bertkit
from bertkit.errors import BertkitWarning


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return bertkit.load(tiny_model_dir, device="cpu")


def test_shapes_for_every_option(model):
    texts = ["the cat sat on the mat", "hello", "a", "dog"]
    for pooling in ("cls", "pooler", "mean", "max", "first-last-avg"):
        vectors = model.encode(texts, pooling=pooling)
        assert vectors.shape == (4, 32) and vectors.dtype == np.float32 and np.isfinite(vectors).all()
    for layers in ("second-to-last", "first", "sum-all", "sum-last-4"):
        assert model.encode(texts, layers=layers).shape == (4, 32)
    assert model.encode(texts, layers="concat-last-4").shape == (4, 64)   # a 2-layer model has 2 to concatenate
    tokens = model.encode(texts, pooling="none")
    assert [t.shape[0] for t in tokens] == [8, 3, 3, 3]      # [CLS] ... [SEP], padding removed
    normalized = model.encode(texts, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1.0, rtol=1e-5)
    assert model.encode([]).shape == (0, 32)


def test_long_texts_truncate_report_or_window(model):
    long_text = "the cat sat " * 30 + "dog is on the mat " * 30   # ~240 tokens, the model holds 64
    with pytest.warns(BertkitWarning, match="truncated"):
        truncated = model.encode([long_text, "cat"])
    assert model.last_report.truncated == 1
    windows = model.encode([long_text, "cat"], long_texts="sliding-window", stride=16)
    assert model.last_report.windows > 2
    assert np.isfinite(windows).all() and not np.allclose(windows[0], truncated[0])
    np.testing.assert_allclose(windows[1], truncated[1], atol=1e-5)   # short texts are one window
    with pytest.raises(bertkit.api.BertkitError, match="tokens"):
        model.encode([long_text], long_texts="error")


def test_the_default_stride_fits_a_short_window(model):
    from bertkit.features import EncodeOptionError, window_stride

    long_text = "the cat sat " * 30 + "dog is on the mat " * 30
    # the model holds 64 tokens: a window of 62, where the default overlap of 128 raised a ValueError
    default = model.encode([long_text], long_texts="sliding-window")
    np.testing.assert_array_equal(default, model.encode([long_text], long_texts="sliding-window", stride=31))
    assert (window_stride(512, None), window_stride(256, None), window_stride(128, None)) == (128, 128, 63)
    with pytest.raises(EncodeOptionError, match="stride 62 must be under the window of 62 tokens"):
        model.encode([long_text], long_texts="sliding-window", stride=62)


def test_max_length_over_limit_and_string_input(model):
    with pytest.raises(ValueError, match="max_length 100"):
        model.encode(["cat"], max_length=100)
    with pytest.raises(TypeError, match="list of texts"):
        model.encode("cat")


def test_saved_whitening_is_applied_by_encode(tiny_model_dir, tmp_path):
    import shutil
    from bertkit.embed.whitening import fit_whitening, save_whitening

    folder = tmp_path / "whitened"
    shutil.copytree(tiny_model_dir, folder)
    texts = [f"the cat sat on the mat {i} " + "dog " * (i % 7) for i in range(60)]
    raw = bertkit.load(folder).encode(texts)
    save_whitening(folder, fit_whitening([raw], dim=8), pooling="mean")
    model = bertkit.load(folder)
    whitened = model.encode(texts)
    assert whitened.shape == (60, 8)
    np.testing.assert_allclose(whitened, model.whitening.apply(raw), atol=1e-4)
    np.testing.assert_allclose(model.encode(texts, whiten=False), raw, atol=1e-5)
    assert model.encode(texts, pooling="cls").shape == (60, 32)        # fitted on mean: not applied to cls
    np.testing.assert_allclose(np.linalg.norm(model.encode(texts, normalize=True), axis=1), 1.0, rtol=1e-5)
    with pytest.raises(bertkit.api.BertkitError, match="fitted on"):
        model.encode(texts, pooling="cls", whiten=True)


def test_empty_texts_are_refused_by_index_as_the_server_does(model):
    """An empty text got a vector through encode but 422 through HTTP (issue 17): one rule, refused everywhere."""
    from bertkit.tokenizer.tokenizer import EMPTY_TEXT, InvalidTextError

    for texts, index in ((["cat", "", "dog"], 1), (["cat", "dog", " \t\n"], 2)):
        with pytest.raises(InvalidTextError, match=f"^text {index} {EMPTY_TEXT}$") as caught:
            model.encode(texts)
        assert caught.value.index == index
        with pytest.raises(InvalidTextError):
            model.encode(texts, pooling="none")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_encode_packs_every_batch_in_bf16_on_cpu_and_sorted_batches_stay_padded_in_fp32(precision, tiny_model_dir,
                                                                                         monkeypatch):
    """Model.encode's length-sorted batches have little padding: fp32 keeps them padded (packing them measured
    0.98x), bf16 on CPU packs them (16-wide attention grids: 1.12x). Either way the vectors are the padded
    forward's within the precision's roundoff."""
    from bertkit.model.sentence import SentenceEncoder
    from bertkit.model.onednn import onednn_available

    if precision == "bf16" and not onednn_available():
        pytest.skip("bf16 Linear layers run oneDNN's kernels only where torch has mkldnn")
    model = bertkit.load(tiny_model_dir, device="cpu", precision=precision)
    texts = ["the cat sat on the mat", "the dog sat on a mat", "hello world cat", "hello the world"]
    seen, forward = [], SentenceEncoder.forward
    monkeypatch.setattr(SentenceEncoder, "forward",
                        lambda self, *args, packed=False, **kw: seen.append(packed) or forward(self, *args,
                                                                                              packed=packed, **kw))
    vectors = model.encode(texts)
    assert seen == [precision == "bf16"]
    padded = bertkit.features.embed_batch(model.sentence_encoder(), *_padded(model, texts), packed=False)
    np.testing.assert_allclose(vectors, padded, rtol=0, atol=1e-6 if precision == "fp32" else 2 ** -6)


def _padded(model, texts):
    from bertkit.tokenizer.padding import pad_to_tensors

    tensors = pad_to_tensors(model.tokenizer.encode_batch(texts).input_ids, model.tokenizer.pad_id)
    return tensors["input_ids"], tensors["attention_mask"]
