"""Untrusted model folders and texts: every bad payload is one error naming the file and field (exit 2 from the
CLI, nothing written), never a traceback, a giant allocation or a NaN vector."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import bertkit
from bertkit.checkpoints import io as checkpoint_io
from bertkit.cli import main
from bertkit.errors import BertkitError, CheckpointError
from bertkit.tokenizer.tokenizer import InvalidTextError


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def _edit_weight(folder, name, value):
    state = load_file(str(folder / "model.safetensors"))
    state[name] = state[name].clone()
    state[name].view(-1)[3] = value
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


BAD_FOLDERS = {
    "nan weight": (lambda f: _edit_weight(f, "encoder.layer.1.output.dense.weight", float("nan")),
                   "model.safetensors: tensor encoder.layer.1.output.dense.weight holds NaN or infinite values"),
    "inf weight": (lambda f: _edit_weight(f, "embeddings.word_embeddings.weight", float("inf")),
                   "tensor embeddings.word_embeddings.weight holds NaN or infinite values"),
    "nan layer_norm_eps": (lambda f: _edit_config(f, layer_norm_eps=float("nan")),
                           "config.json: layer_norm_eps must be a finite number > 0"),
    "zero layer_norm_eps": (lambda f: _edit_config(f, layer_norm_eps=0), "layer_norm_eps must be a finite number > 0"),
    "config is a list": (lambda f: (f / "config.json").write_text("[1, 2, 3]"),
                         "config.json: expected a JSON object, got a list"),
    "string size": (lambda f: _edit_config(f, hidden_size="32"), "config.json: hidden_size must be an integer, got '32'"),
    "float size": (lambda f: _edit_config(f, num_hidden_layers=2.5), "num_hidden_layers must be an integer, got 2.5"),
    "zero heads": (lambda f: _edit_config(f, num_attention_heads=0), "num_attention_heads must be at least 1, got 0"),
    "indivisible heads": (lambda f: _edit_config(f, num_attention_heads=5),
                          "hidden_size 32 is not divisible by num_attention_heads 5"),
    "huge hidden": (lambda f: _edit_config(f, hidden_size=10**9, num_attention_heads=1),
                    "hidden_size is 1000000000 but the weights hold 32"),
    "huge vocab": (lambda f: _edit_config(f, vocab_size=2 * 10**9), "vocab_size is 2000000000 but the weights hold"),
    "huge layers": (lambda f: _edit_config(f, num_hidden_layers=10**9),
                    "num_hidden_layers is 1000000000 but the weights hold 2 layers"),
    "huge positions": (lambda f: _edit_config(f, max_position_embeddings=10**12),
                       "max_position_embeddings is 1000000000000 but the weights hold 64"),
    "huge intermediate, no weights to show it": (
        lambda f: (_edit_config(f, intermediate_size=10**10), _drop_layer_weights(f)),
        "its sizes imply .* parameters but the weight file holds"),
    "binary vocab": (lambda f: ((f / "tokenizer.json").unlink(), (f / "vocab.txt").write_bytes(bytes(range(256)) * 4)),
                     "vocab.txt: not UTF-8 text \\(byte 0x80 at offset 128\\)"),
    "vocab with NUL bytes": (lambda f: ((f / "tokenizer.json").unlink(),
                                        (f / "vocab.txt").write_bytes(b"[PAD]\n\x00\x00\n[UNK]\n")),
                             "vocab.txt: holds NUL bytes"),
    "bad pruned_heads": (lambda f: _edit_config(f, pruned_heads={"7": [0]}),
                         "pruned_heads 7: \\[0\\] does not fit 2 layers"),
    "bertkit.json a string": (lambda f: (f / "bertkit.json").write_text('"hello"'), "bertkit.json: expected a JSON object"),
    "bad encode length": (lambda f: _edit_meta(f, encode={"max_length": "16"}),
                          "bertkit.json: encode.max_length '16' must be an integer between 2"),
    "bad encode pooling": (lambda f: _edit_meta(f, encode={"pooling": "median"}),
                           "bertkit.json: encode.pooling 'median' is not one of"),
    "whitening file missing": (lambda f: _edit_meta(f, whitening={"dim_in": 32, "dim_out": 8}),
                               "whitening.safetensors: missing"),
    "bad variant field": (lambda f: _edit_meta(f, encoder={"share_layers": "sometimes"}),
                          "bertkit.json: encoder.share_layers 'sometimes' is not one of"),
    "labels not strings": (lambda f: _edit_meta(f, labels=[1, 2]),
                           'bertkit.json: "labels" must be a list of label names \\(strings\\), got \\[1, 2\\]'),
    # names a file in the folder records: inside the folder only (a folder from elsewhere chooses them)
    "module path outside": (lambda f: (f / "modules.json").write_text(json.dumps(
        [{"type": "sentence_transformers.models.Transformer", "path": ""},
         {"type": "sentence_transformers.models.Pooling", "path": "../../elsewhere/1_Pooling"}])),
        "modules.json: module 1's path '../../elsewhere/1_Pooling' must name a file inside"),
    "module path absolute": (lambda f: (f / "modules.json").write_text(json.dumps(
        [{"type": "sentence_transformers.models.Transformer", "path": "/tmp"}])),
        "modules.json: module 0's path '/tmp' must name a file inside"),
    "shard outside": (lambda f: ((f / "model.safetensors").rename(f.parent / "outside.safetensors"),
                                 (f / "model.safetensors.index.json").write_text(
                                     json.dumps({"weight_map": {"w": "../outside.safetensors"}}))),
                      "model.safetensors.index.json: weight_map's shard '../outside.safetensors' must name a file "
                      "inside"),
    "whitening file outside": (lambda f: _edit_meta(f, whitening={"dim_in": 32, "dim_out": 8,
                                                                  "file": "../w.safetensors"}),
                               "bertkit.json: whitening.file '../w.safetensors' must name a file inside"),
    "shard absolute": (lambda f: ((f / "model.safetensors").unlink(), (f / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "/etc/passwd"}}))), "weight_map's shard '/etc/passwd' must name a file inside"),
}


def _drop_layer_weights(folder):
    state = {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if ".intermediate." not in k}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _edit_meta(folder, **changes):
    meta = json.loads((folder / "bertkit.json").read_text())
    (folder / "bertkit.json").write_text(json.dumps({**meta, **changes}))


@pytest.mark.parametrize("payload", list(BAD_FOLDERS))
def test_bad_folder_is_one_line_error_before_anything_is_built(payload, tiny_model_dir, tmp_path, monkeypatch, capsys):
    folder = shutil.copytree(tiny_model_dir, tmp_path / "model")
    change, message = BAD_FOLDERS[payload]
    change(folder)
    original_encoder = checkpoint_io.Encoder

    def guarded_encoder(config):   # a config that slipped through would allocate its sizes here
        assert config.hidden_size * config.intermediate_size < 10**8 and config.num_layers < 100, config
        return original_encoder(config)

    monkeypatch.setattr(checkpoint_io, "Encoder", guarded_encoder)
    with pytest.raises(CheckpointError, match=message):
        bertkit.load(folder)
    (tmp_path / "in.txt").write_text("the cat\n", encoding="utf-8")
    code = main(["encode", "--model", str(folder), "--input", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "out.npy")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("bertkit: error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "out.npy").exists()


def test_non_finite_outputs_are_never_returned(tiny_model_dir):
    """Weights that pass the load check but are broken in memory: encode refuses instead of returning NaN."""
    model = bertkit.load(tiny_model_dir)
    with torch.no_grad():
        model.encoder.blocks[0].ffn.up.weight[0, 0] = float("nan")
    with pytest.raises(BertkitError, match="NaN or infinite vectors for 2 of 2 texts"):
        model.encode(["the cat", "hello world"])


TEXTS_WITH_SURROGATE = ["the cat", "hello \ud800 world", "dog"]


def test_lone_surrogate_in_the_python_api(tiny_model_dir):
    model = bertkit.load(tiny_model_dir)
    with pytest.raises(InvalidTextError, match="text 1 holds a lone UTF-16 surrogate U\\+D800 at character 6"):
        model.encode(TEXTS_WITH_SURROGATE)
    with pytest.raises(BertkitError, match="text 0 holds a lone UTF-16 surrogate U\\+DFFF"):
        model.tokenizer.encode_batch(["a", "b"], pairs=["\udfff", "c"])
    assert np.isfinite(model.encode(["the cat"])).all()           # and nothing else is affected


def test_lone_surrogate_on_the_command_line(tiny_model_dir, tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text("\n" + "".join(json.dumps({"text": t}) + "\n" for t in TEXTS_WITH_SURROGATE), encoding="utf-8")
    assert main(["encode", "--model", str(tiny_model_dir), "--input", str(source), "--output",
                 str(tmp_path / "o.npy")]) == 2
    assert "in.jsonl: line 3 holds a lone UTF-16 surrogate" in capsys.readouterr().err    # text 2, after a blank line
    assert not (tmp_path / "o.npy").exists()


def test_lone_surrogate_over_http_is_a_422_naming_the_text(tiny_model_dir):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bertkit.serve.config import ServeConfig

    from bertkit.serve.server import build_service
    from bertkit.serve.app import create_app

    body = '{"texts": ["the cat", "hello \\ud800 world"]}'          # a JSON escape: valid JSON, invalid text
    service = build_service(ServeConfig(model=str(tiny_model_dir)))
    try:
        with TestClient(create_app(service), raise_server_exceptions=False) as client:
            for route, payload, field in (("/encode", body, "texts[1]"), ("/tokenize", body, "texts[1]"),
                                          ("/v1/embeddings", '{"input": ["ok", "\\udc00"]}', "input[1]"),
                                          ("/encode", '{"texts": ["a ||| \\ud83d"]}', "texts[0]")):
                answer = client.post(route, content=payload, headers={"content-type": "application/json"})
                assert answer.status_code == 422, (route, answer.text)
                assert answer.json()["detail"].startswith(f"{field} holds a lone UTF-16 surrogate"), answer.text
            tokens = client.post("/encode", content='{"texts": [["the", "\\ud800"]], "is_tokenized": true}',
                                 headers={"content-type": "application/json"})
            assert tokens.status_code == 422 and tokens.json()["detail"].startswith("texts[0] holds a lone")
    finally:
        service.close()
