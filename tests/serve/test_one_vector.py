"""One vector everywhere: for every kind of folder bertkit writes, POST /encode == Model.encode == `bertkit encode`.

The folders are built the way a user builds them (the CLI commands) from a sentence-transformers folder with a
Dense layer, Normalize and max_seq_length 16 (the tiny model's positions hold 64), so each writer has to carry
the length, pooling, dense layers, normalization and whitening over. One text at a time the three routes run the
same batch of one and must agree exactly; a whole list is batched differently (the server groups requests by
token budget, encode by 32 sorted by length), which changes matrix shapes and so float32 summation order:
those agree to 1e-6.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

import bertkit
from bertkit.cli import main
from bertkit.serve.config import ServeConfig
from bertkit.serve.server import build_service
from bertkit.serve.app import create_app

LONG = "the cat sat on the mat and the dog is on the mat " * 3          # ~40 tokens: over the 16 kept
TEXTS = ["the cat sat on the mat", "hello world", LONG, "dog", "你好 世界", "is the cat on the mat ? hello"]
WORDS = "the cat sat on mat dog is hello world".split()
PRETRAIN_CONFIG = "tiny"   # a preset shipped with bertkit


def _sentences(n: int) -> list[str]:
    return [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(3 + i % 5)) for i in range(n)]


def _labeled(path, n: int):
    path.write_text("".join(json.dumps({"text": text, "label": "animal" if "cat" in text or "dog" in text else
                                        "other"}) + "\n" for text in _sentences(n)), encoding="utf-8")
    return path


def _run(*args: str) -> None:
    assert main([*args]) == 0, args


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_model_dir, make_sentence_transformers_folder):
    """name -> folder, built on first use (each writer from the folder a user would start from)."""
    root = tmp_path_factory.mktemp("one-vector")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(_sentences(60)) + "\n", encoding="utf-8")
    data = _labeled(root / "labeled.jsonl", 24)
    fast = ["--progress_bar=false", "--device=cpu"]
    recipes = {
        "plain": lambda out: tiny_model_dir,
        "sentence-transformers": lambda out: make_sentence_transformers_folder(
            tiny_model_dir, out, "mean", [(32, 16, "Tanh")], normalize=True, max_seq_length=16),
        "converted": lambda out: _run("convert", str(built("sentence-transformers")), str(out)),
        "whitened": lambda out: _run("whiten", "--model", str(built("sentence-transformers")), "--corpus",
                                     str(corpus), "--output", str(out), "--dim", "8"),
        "quantized": lambda out: _run("quantize", "--model", str(built("whitened")), "--output", str(out)),
        "simcse": lambda out: _run("simcse", "--model", str(built("sentence-transformers")), "--train", str(corpus),
                                   "--output", str(out), "--batch-size", "8", "--max-steps", "2", *fast),
        "distilled-embedding": lambda out: _run(
            "distill", "--teacher", str(built("sentence-transformers")), "--student-layers", "1", "--task",
            "embedding", "--train", str(corpus), "--output", str(out), "--epochs", "1", "--batch-size", "16", *fast),
        "finetuned": lambda out: _run("finetune", "--task", "classification", "--model",
                                      str(built("sentence-transformers")), "--train", str(data), "--dev", str(data),
                                      "--output", str(out), "--epochs", "1", "--batch-size", "8", "--max-length",
                                      "32", *fast),
        "distilled": lambda out: _run("distill", "--teacher", str(built("finetuned")), "--student-layers", "1",
                                      "--train", str(data), "--dev", str(data), "--output", str(out),
                                      "--epochs", "1", "--batch-size", "8", "--max-length", "32", *fast),
        "pruned": lambda out: _run("prune-heads", "--model", str(built("finetuned")), "--output", str(out),
                                   "--dev", str(data), "--per-layer", "1"),
        "pretrained": lambda out: _run("pretrain", "--config", PRETRAIN_CONFIG, "--corpus", str(corpus),
                                       "--output", str(out), "--model", str(built("sentence-transformers")),
                                       "--max-steps", "2", "--data.max_length=16", "--data.batch_size=8",
                                       "--data.heldout_fraction=0", "--train.progress_bar=false"),
    }
    cache: dict = {}

    def built(name: str):
        if name not in cache:
            out = root / name
            cache[name] = recipes[name](out) or out
        return cache[name]

    return built


def _three_routes(folder, requests, tmp_path, precision=None):
    """Per list of texts in `requests`: (model, library vectors, CLI vectors, served vectors, /encode body,
    /v1/embeddings vectors); one server (and its model process) answers them all."""
    model = bertkit.load(folder, precision=precision)
    service = build_service(ServeConfig(model=str(folder), precision=precision))
    routes = []
    try:
        with TestClient(create_app(service)) as client:
            for texts in requests:
                local = model.encode(texts)
                source = tmp_path / "texts.txt"
                source.write_text("\n".join(texts) + "\n", encoding="utf-8")
                _run("encode", "--model", str(folder), "--input", str(source), "--output", str(tmp_path / "v.npy"),
                     *(["--precision", precision] if precision else []))
                cli = np.load(tmp_path / "v.npy")
                answer = client.post("/encode", json={"texts": texts, "truncate": True})
                assert answer.status_code == 200, answer.text
                body = answer.json()
                openai = client.post("/v1/embeddings", json={"input": texts, "truncate": True}).json()
                routes.append((model, local, cli, np.asarray(body["results"], dtype=np.float32), body,
                               np.asarray([d["embedding"] for d in openai["data"]], dtype=np.float32)))
    finally:
        service.close()
    return routes


FOLDERS = ["plain", "sentence-transformers", "converted", "whitened", "quantized", "simcse", "distilled-embedding",
           "finetuned", "distilled", "pruned", "pretrained"]


@pytest.mark.parametrize("name", FOLDERS)
def test_server_library_and_cli_give_the_same_vectors(name, folders, tmp_path):
    folder = folders(name)
    *alone, listed = _three_routes(folder, [[text] for text in TEXTS] + [TEXTS], tmp_path)
    for text, (_, local, cli, served, _, _) in zip(TEXTS, alone):   # one text: the same batch of one on every
        assert np.array_equal(local, cli) and np.array_equal(local, served), (name, text)    # route, exactly equal
    model, local, cli, served, body, openai = listed
    assert np.array_equal(local, cli)            # the CLI is Model.encode on the same list
    np.testing.assert_allclose(served, local, rtol=0, atol=1e-6)
    assert body["dimension"] == local.shape[1] == model.sentence_encoder().dim
    # /v1/embeddings is the same path with normalization (OpenAI's vectors have length 1)
    np.testing.assert_allclose(openai, model.encode(TEXTS, normalize=True), rtol=0, atol=1e-6)
    if model.max_length < 40:                    # the long text was cut to the folder's max_seq_length
        assert body["truncated"] == [TEXTS.index(LONG)] and model.last_report.truncated == 1


@pytest.mark.parametrize("name,precision", [("whitened", "bf16"), ("quantized", None), ("quantized", "bf16")])
def test_other_precisions_take_the_same_path(name, precision, folders, tmp_path):
    """A model loaded in bf16 and an int8 folder (bertkit quantize of the whitened one): library, CLI and server
    make the same vector through the folder's whole sentence path (16 tokens, dense, whitening, normalization),
    and that vector is the fp32 one to bf16 / int8 rounding (cosine >= 0.99, the quantize gate's mean)."""
    folder = folders(name)
    *alone, listed = _three_routes(folder, [[text] for text in TEXTS] + [TEXTS], tmp_path, precision)
    for text, (_, local, cli, served, _, _) in zip(TEXTS, alone):
        assert np.array_equal(local, cli) and np.array_equal(local, served), (name, precision, text)
    model, local, cli, served, body, _ = listed
    assert model.precision == (precision or "int8")
    assert np.array_equal(local, cli)
    assert body["dimension"] == local.shape[1] == 8 and body["truncated"] == [TEXTS.index(LONG)]
    reference = bertkit.load(folders("whitened"), precision="fp32").encode(TEXTS)
    for vectors in (local, served):
        assert (vectors * reference).sum(1).min() >= 0.99             # unit vectors: the folder normalizes


def test_writers_carry_length_dense_normalization_and_whitening(folders):
    """The issue's case: a whitened folder made from a max_seq_length-16 folder gives 8-dim vectors cut at 16."""
    expectations = {   # name: (max_length, dense layers, normalize, whitened)
        "sentence-transformers": (16, 1, True, False), "converted": (16, 1, True, False),
        "whitened": (16, 1, True, True), "quantized": (16, 1, True, True), "simcse": (16, 1, True, False),
        "distilled-embedding": (16, 0, True, False), "finetuned": (16, 1, True, False),
        "distilled": (16, 0, True, False), "pruned": (16, 1, True, False), "pretrained": (16, 1, True, False)}
    for name, (max_length, dense, normalize, whitened) in expectations.items():
        model = bertkit.load(folders(name))
        got = (model.max_length, len(model.sentence.dense), model.sentence.config.normalize,
               model.sentence.whitening is not None)
        assert got == (max_length, dense, normalize, whitened), name
    white = bertkit.load(folders("whitened"))
    assert white.encode(TEXTS).shape == (len(TEXTS), 8)
    np.testing.assert_allclose(np.linalg.norm(white.encode(TEXTS), axis=1), 1.0, rtol=1e-5)


def test_index_over_the_whitened_folder_matches_served_search(folders, tmp_path):
    """An index built offline and queried through the server: the query vector is the index's own."""
    pytest.importorskip("faiss")
    from bertkit import Index
    from bertkit.search import EncoderSpec, ModelTextEncoder

    folder = folders("whitened")
    documents = _sentences(12)
    index = Index.create(tmp_path / "index", encoder=ModelTextEncoder(EncoderSpec(str(folder))))
    index.add([str(i) for i in range(12)], documents)
    assert index.save().dim == 8
    index.close()
    offline = Index.open(tmp_path / "index").search(documents[5], k=3)
    service = build_service(ServeConfig(model=str(folder), index=str(tmp_path / "index")))
    try:
        with TestClient(create_app(service)) as client:
            served = client.post("/search", json={"query": documents[5], "k": 3}).json()["results"]
    finally:
        service.close()
    assert [h["id"] for h in served] == [h.id for h in offline] and served[0]["id"] == "5"
    np.testing.assert_allclose([h["score"] for h in served], [h.score for h in offline], atol=1e-6)


def test_onnx_export_carries_the_whole_sentence_path(folders, tmp_path):
    """export-onnx of the whitened folder: its pooling, dense layer, whitening, normalization and 16-token
    length, without flags. onnxruntime's kernels differ from torch's in float rounding: 1e-5."""
    pytest.importorskip("onnxruntime")
    from bertkit.distill.onnx_model import OnnxModel

    folder = folders("whitened")
    _run("export-onnx", "--model", str(folder), "--output", str(tmp_path / "onnx" / "model.onnx"))
    onnx = OnnxModel(tmp_path / "onnx" / "model.onnx")
    assert (onnx.meta["max_length"], onnx.meta["dimension"], onnx.meta["normalize"]) == (16, 8, True)
    np.testing.assert_allclose(onnx.encode(TEXTS), bertkit.load(folder).encode(TEXTS), rtol=0, atol=1e-5)
    # an int8 folder exports the fp32 model its int8 weights describe, with the same sentence path
    quantized = folders("quantized")
    _run("export-onnx", "--model", str(quantized), "--output", str(tmp_path / "onnx8" / "model.onnx"))
    onnx = OnnxModel(tmp_path / "onnx8" / "model.onnx")
    np.testing.assert_allclose(onnx.encode(TEXTS), bertkit.load(quantized, precision="fp32").encode(TEXTS),
                               rtol=0, atol=1e-5)
