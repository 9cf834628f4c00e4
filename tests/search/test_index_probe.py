"""An index records its encoder's vector of a fixed text (index.json "probe"); a model folder changed in place
since the build (whiten or simcse written into it, a fine-tune over it) keeps its name and width, and used to
answer queries silently with vectors of another space. Now `search`, `index add` and `serve --index` refuse it."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

import bertkit
from bertkit.checkpoints import save_checkpoint
from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.model import Encoder
from bertkit.search.encoding import PROBE_TEXT
from bertkit.serve.config import ServeConfig
from bertkit.serve.server import build_service

DOCS = [{"id": "a", "text": "the cat sat on the mat"}, {"id": "b", "text": "a dog in the park"}]


def _build(tmp_path, tiny_model_dir):
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    index = tmp_path / "idx"
    assert main(["index", "build", "--model", str(model), "--input", str(docs), "--index", str(index)]) == 0
    return model, index


def _change_in_place(model):
    """New weights of the same shapes saved over the folder, as a simcse run written into it does."""
    loaded = bertkit.load(model)
    torch.manual_seed(7)
    save_checkpoint(model, Encoder(loaded.config), loaded.tokenizer)


def test_the_recorded_probe_is_the_models_vector_of_the_probe_text(tmp_path, tiny_model_dir):
    model, index = _build(tmp_path, tiny_model_dir)
    recorded = np.asarray(json.loads((index / "index.json").read_text())["probe"])
    assert recorded == pytest.approx(bertkit.load(model).encode([PROBE_TEXT])[0], abs=1e-6)


def test_a_model_changed_in_place_is_refused_by_search_add_and_serve(tmp_path, tiny_model_dir, capsys):
    model, index = _build(tmp_path, tiny_model_dir)
    assert main(["search", "--index", str(index), "--query", "a cat"]) == 0
    capsys.readouterr()
    _change_in_place(model)
    saved = (index / "index.json").read_bytes()
    assert main(["search", "--index", str(index), "--query", "a cat"]) == 2
    err = capsys.readouterr().err
    assert "does not give the vectors the index was built with" in err and err.count("\n") == 1, err
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "c", "text": "a bird"}) + "\n", encoding="utf-8")
    assert main(["index", "add", "--index", str(index), "--input", str(more)]) == 2
    assert "does not give the vectors" in capsys.readouterr().err
    assert (index / "index.json").read_bytes() == saved          # nothing written
    with pytest.raises(BertkitError, match="does not give the vectors"):
        build_service(ServeConfig(model=str(model), index=str(index), backend="thread"))


def test_the_same_model_in_another_folder_or_precision_is_served(tmp_path, tiny_model_dir):
    model, index = _build(tmp_path, tiny_model_dir)
    copy = shutil.copytree(model, tmp_path / "copy")
    service = build_service(ServeConfig(model=str(copy), index=str(index), backend="thread", precision="bf16"))
    service.close()
    with bertkit.Index.open(index, encoder=bertkit.load(copy)) as opened:
        assert opened.search("the cat", k=1)[0].id == "a"


def test_a_tampered_probe_is_one_line_naming_index_json(tmp_path, tiny_model_dir):
    _, index = _build(tmp_path, tiny_model_dir)
    manifest = json.loads((index / "index.json").read_text())
    for bad in ("x", [1.0, "y"], [True]):
        (index / "index.json").write_text(json.dumps({**manifest, "probe": bad}))
        with pytest.raises(BertkitError, match=r"index\.json: probe must be a list of finite numbers"):
            bertkit.Index.open(index)


def test_serve_max_length_keeps_the_indexs_own_length_for_search(tmp_path, tiny_model_dir):
    """serve --max-length is /encode's limit: the probe and /search queries of an index that recorded no length are
    cut at the folder's own, as bertkit search cuts them (cutting the probe at 8 refused a valid index)."""
    model, index = _build(tmp_path, tiny_model_dir)
    service = build_service(ServeConfig(model=str(model), index=str(index), backend="thread", max_length=8))
    try:
        assert service.index.max_length == bertkit.load(model).max_length
    finally:
        service.close()


def test_a_model_used_with_another_pooling_than_the_index_is_told_so(tmp_path, tiny_model_dir):
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    assert main(["index", "build", "--model", str(model), "--input", str(docs), "--index", str(tmp_path / "idx"),
                 "--pooling", "cls"]) == 0
    with bertkit.Index.open(tmp_path / "idx") as opened:          # the recorded encoder: cls, as built
        assert opened.search("the cat", k=1)[0].id == "a"
    with bertkit.Index.open(tmp_path / "idx", encoder=bertkit.load(model)) as opened:   # the folder's mean
        with pytest.raises(BertkitError, match="or is it used with other pooling, layers or max length"):
            opened.search("the cat", k=1)
