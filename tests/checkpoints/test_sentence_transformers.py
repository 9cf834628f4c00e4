"""sentence-transformers folders are read exactly (against the library itself) or refused by name."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.errors import CheckpointError

TEXTS = ["the cat sat on the mat", "hello world", "dog", "the dog is on the mat and the cat sat on the mat " * 4,
         "你好 世界", "is the cat on the mat ?"]


def reference(folder) -> np.ndarray:
    sentence_transformers = pytest.importorskip("sentence_transformers")
    model = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    return model.encode(TEXTS, batch_size=4, convert_to_numpy=True)


@pytest.mark.parametrize("mode", ["cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"])
def test_every_pooling_mode_with_dense_and_normalize(mode, tiny_model_dir, tmp_path, make_sentence_transformers_folder):
    folder = make_sentence_transformers_folder(tiny_model_dir, tmp_path / mode, mode, [(32, 24, "Tanh")],
                                               normalize=True, max_seq_length=16)
    ours = bertkit.load(folder).encode(TEXTS, batch_size=4)
    expected = reference(folder)
    assert ours.shape == expected.shape == (len(TEXTS), 24)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-5)


def test_two_dense_layers_no_normalize_and_the_tokenizer_length(tiny_model_dir, tmp_path,
                                                                 make_sentence_transformers_folder):
    """Without max_seq_length the tokenizer's model_max_length (capped at the positions) is the limit."""
    folder = make_sentence_transformers_folder(tiny_model_dir, tmp_path / "st", "weightedmean",
                                               [(32, 20, "Identity"), (20, 12, "Tanh")], normalize=False,
                                               max_seq_length=None)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 12}))
    model = bertkit.load(folder)
    assert model.max_length == 12 and len(model.sentence.dense) == 2 and not model.sentence.config.normalize
    np.testing.assert_allclose(model.encode(TEXTS, batch_size=4), reference(folder), rtol=0, atol=1e-5)


def test_convert_keeps_the_sentence_steps(tiny_model_dir, tmp_path, make_sentence_transformers_folder):
    folder = make_sentence_transformers_folder(tiny_model_dir, tmp_path / "st", "lasttoken", [(32, 16, "Tanh")])
    assert main(["convert", str(folder), str(tmp_path / "converted")]) == 0
    converted = bertkit.load(tmp_path / "converted")
    assert converted.sentence.config.pooling == "last-token" and converted.max_length == 16
    np.testing.assert_allclose(converted.encode(TEXTS), reference(folder), rtol=0, atol=1e-5)
    # the converted folder carries sentence-transformers' modules again: the library computes the same vectors
    np.testing.assert_allclose(reference(tmp_path / "converted"), reference(folder), rtol=0, atol=1e-5)


def _module(folder, index: int) -> dict:
    return json.loads((folder / "modules.json").read_text())[index]


@pytest.mark.parametrize("change,message", [
    (lambda f: (f / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": ["cls", "mean"]})),
     "pooling concatenates cls \\+ mean"),
    (lambda f: (f / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "median"})),
     "pooling mode 'median' is not supported"),
    (lambda f: (f / "modules.json").write_text(json.dumps([_module(f, 0), _module(f, 1), {
        "idx": 2, "name": "2", "path": "2_LayerNorm", "type": "sentence_transformers.models.LayerNorm"}])),
     "module sentence_transformers.models.LayerNorm \\(2_LayerNorm\\) is not supported"),
    (lambda f: (f / "2_Dense" / "config.json").write_text(json.dumps({
        "in_features": 32, "out_features": 16, "activation_function": "mypackage.Swish"})),
     "activation_function 'mypackage.Swish' is not supported"),
    (lambda f: (f / "2_Dense" / "config.json").write_text(json.dumps({
        "in_features": 32, "out_features": 99, "activation_function": "torch.nn.modules.activation.Tanh"})),
     "Dense weights .* do not match its config.json"),
    (lambda f: (f / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 1000})),
     "max_seq_length 1000 must be an integer between 2 and the model's position limit 64"),
    (lambda f: (f / "config_sentence_transformers.json").write_text(json.dumps({"default_prompt_name": "query"})),
     "default_prompt_name 'query'"),
])
def test_unsupported_modules_are_refused_by_name(change, message, tiny_model_dir, tmp_path,
                                                 make_sentence_transformers_folder):
    folder = make_sentence_transformers_folder(tiny_model_dir, tmp_path / "st", "mean", [(32, 16, "Tanh")])
    change(folder)
    with pytest.raises(CheckpointError, match=message):
        bertkit.load(folder)


def test_minilm_folder_settings(minilm_dir):
    model = bertkit.load(minilm_dir)
    assert (model.sentence.config.pooling, model.sentence.config.normalize, model.max_length) == ("mean", True, 256)
    assert model.sentence.dense == [] and model.sentence.whitening is None


def test_pooling_modes_match_on_padded_rows():
    """weighted-mean, last-token and mean-sqrt-len ignore padding (right-padded rows)."""
    from bertkit.model.pooling import pool

    tokens = torch.tensor([[[1.0], [2.0], [3.0]], [[4.0], [6.0], [100.0]]])     # row 2: last position is padding
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    torch.testing.assert_close(pool(tokens, mask, "weighted-mean"), torch.tensor([[14 / 6], [16 / 3]]))
    torch.testing.assert_close(pool(tokens, mask, "last-token"), torch.tensor([[3.0], [6.0]]))
    torch.testing.assert_close(pool(tokens, mask, "mean-sqrt-len"), torch.tensor([[6 / 3 ** 0.5], [10 / 2 ** 0.5]]))
