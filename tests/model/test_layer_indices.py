"""--layers as layer indices (sentence-transformers / bert-as-service style): -1 is the last layer, -2 the one
before, 4 the 4th layer's output (0 the embeddings), a comma list the mean of those layers; parsed in one place
(bertkit/options.py), checked against the model, kept by a saved folder."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import bertkit
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.model.pooling import masked_mean
from bertkit.model.sentence import SentenceConfig, SentencePipeline
from bertkit.options import parse_layers

TEXTS = ["the cat sat on the mat", "a dog", "hello world again and again"]


def test_single_indices_equal_the_named_strategies_bitwise(tiny_model_dir):
    model = bertkit.load(tiny_model_dir)
    assert np.array_equal(model.encode(TEXTS, layers="-1"), model.encode(TEXTS, layers="last"))
    assert np.array_equal(model.encode(TEXTS, layers=-2), model.encode(TEXTS, layers="second-to-last"))
    assert np.array_equal(model.encode(TEXTS, layers="1"), model.encode(TEXTS, layers="first"))
    assert np.array_equal(model.encode(TEXTS, layers="2"), model.encode(TEXTS, layers="last"))   # 2 layers


def test_a_comma_list_is_the_mean_of_those_hidden_states(tiny_model_dir):
    model = bertkit.load(tiny_model_dir)
    got = model.encode(TEXTS, layers="-2, -1", pooling="mean")
    tokenizer = model.tokenizer
    for text, vector in zip(TEXTS, got):
        ids = torch.tensor(tokenizer.encode_batch([text]).input_ids)
        mask = torch.ones_like(ids)
        with torch.no_grad():
            hidden = model.encoder(ids, mask, None, output_hidden_states=True).hidden_states   # embeddings + 2
        expected = masked_mean((hidden[1].float() + hidden[2].float()) / 2, mask)[0].numpy()
        np.testing.assert_allclose(vector, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, model.encode(TEXTS, layers="-1", pooling="mean"), atol=1e-4)   # a real change


def test_out_of_range_and_bad_values_are_one_line_errors(tiny_model_dir, capsys, tmp_path):
    model = bertkit.load(tiny_model_dir)
    with pytest.raises(BertkitError, match=r"--layers 3: layer 3 is out of range for this 2-layer model"):
        model.encode(TEXTS, layers="3")
    with pytest.raises(BertkitError, match="--layers -3: layer -3 is out of range"):
        model.encode(TEXTS, layers=[-3])
    with pytest.raises(ValueError, match="names a layer twice"):
        parse_layers("-1,-1")
    texts = tmp_path / "t.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        main(["encode", "--model", str(tiny_model_dir), "--input", str(texts), "--output", str(tmp_path / "v.npy"),
              "--layers", "top"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--layers" in err and "top" in err and "Traceback" not in err


def test_encode_command_accepts_indices(tiny_model_dir, tmp_path):
    texts = tmp_path / "t.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    for flag in (["--layers", "-1"], ["--layers=-2,-1"]):
        assert main(["encode", "--model", str(tiny_model_dir), "--input", str(texts), "--output",
                     str(tmp_path / "v.npy"), *flag]) == 0
        expected = bertkit.load(tiny_model_dir).encode(TEXTS, layers=flag[-1].split("=")[-1])
        np.testing.assert_array_equal(np.load(tmp_path / "v.npy"), expected)


def test_a_saved_folder_keeps_index_layers(tiny_model_dir, tmp_path):
    checkpoint = load_checkpoint(tiny_model_dir)
    folder = save_checkpoint(tmp_path / "m", checkpoint.encoder, checkpoint.tokenizer,
                             sentence=SentencePipeline(SentenceConfig(pooling="mean", layers="-2,-1")))
    reloaded = bertkit.load(folder)
    assert reloaded.sentence.config.layers == "-2,-1"
    np.testing.assert_array_equal(reloaded.encode(TEXTS), bertkit.load(tiny_model_dir).encode(TEXTS, layers="-2,-1"))
