"""`bertkit serve` on an ONNX export folder (issue 17): POST /encode, /v1/embeddings and /predict answer what
`bertkit.load(ONNX_DIR).encode / .predict` give. One text per request runs the same padded batch of one through
the same graph, so those agree exactly; a list is batched differently by the server (by token budget) than by
OnnxModel (32 sorted by length), which changes padding and so float rounding: 1e-5."""
from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

import bertkit
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main
from bertkit.model.sentence import SentenceConfig, SentencePipeline
from bertkit.serve.config import ServeConfig
from bertkit.serve.server import build_service
from bertkit.serve.app import create_app

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

TEXTS = ["the cat sat on the mat", "hello world", "a dog ||| a cat", "is the cat on the mat ? hello",
         "the cat sat on the mat and the dog is on the mat " * 8]


@pytest.fixture(scope="module")
def exports(tmp_path_factory, tiny_model_dir, classifier_model_dir):
    root = tmp_path_factory.mktemp("onnx-serve")
    made = {}
    for name, folder in (("encoder", tiny_model_dir), ("classifier", classifier_model_dir)):
        assert main(["export-onnx", "--model", str(folder), "--output", str(root / name / "model.onnx")]) == 0
        made[name] = root / name
    return made


def _served(folder, route: str, body: dict):
    service = build_service(ServeConfig(model=str(folder)))
    try:
        with TestClient(create_app(service)) as client:
            return client.post(route, json=body)
    finally:
        service.close()


@pytest.mark.parametrize("name", ["encoder", "classifier"])
def test_encode_equals_the_loaded_export(name, exports):
    folder = exports[name]
    model = bertkit.load(folder)
    assert type(model).__name__ == "OnnxModel"
    for text in TEXTS:
        answer = _served(folder, "/encode", {"texts": [text], "truncate": True})
        assert answer.status_code == 200, answer.text
        assert np.array_equal(np.asarray(answer.json()["results"], dtype=np.float32), model.encode([text])), text
    body = _served(folder, "/encode", {"texts": TEXTS, "truncate": True}).json()
    np.testing.assert_allclose(np.asarray(body["results"], dtype=np.float32), model.encode(TEXTS), rtol=0, atol=1e-5)
    assert body["truncated"] == [len(TEXTS) - 1] and model.last_report.truncated == 1
    openai = _served(folder, "/v1/embeddings", {"input": TEXTS, "truncate": True}).json()
    np.testing.assert_allclose([d["embedding"] for d in openai["data"]], model.encode(TEXTS, normalize=True),
                               rtol=0, atol=1e-5)


def test_predict_equals_the_loaded_export(exports):
    folder = exports["classifier"]
    model = bertkit.load(folder)
    expected = model.predict(TEXTS)
    answer = _served(folder, "/predict", {"texts": TEXTS, "truncate": True})
    assert answer.status_code == 200, answer.text
    served = answer.json()["predictions"]
    assert [p["label"] for p in served] == [p["label"] for p in expected]
    for got, want in zip(served, expected):
        assert got["score"] == pytest.approx(want["score"], abs=1e-5)
        assert got["scores"] == pytest.approx(want["scores"], abs=1e-5)


def test_what_the_graph_cannot_do_is_refused(exports):
    folder = exports["encoder"]
    pooling = bertkit.load(folder).pooling
    other = "cls" if pooling != "cls" else "mean"
    answer = _served(folder, "/encode", {"texts": ["hello"], "pooling": other})
    assert answer.status_code == 422 and "export again with --pooling" in answer.text
    answer = _served(folder, "/predict", {"texts": ["hello"]})
    assert answer.status_code == 409                  # an encoder export has no classifier output


def test_the_runner_refuses_a_pooling_or_layers_the_graph_does_not_compute(exports):
    """The check lives in OnnxRunner (as ModelRunner takes pooling and layers); build_service only passes them."""
    from bertkit.errors import BertkitError
    from bertkit.serve.onnx_runner import OnnxRunner

    model = bertkit.load(exports["encoder"])
    other = "cls" if model.pooling != "cls" else "mean"
    with pytest.raises(BertkitError, match=f"serve --pooling {other}: .* computes pooling '{model.pooling}'"):
        OnnxRunner(model, pooling=other)
    with pytest.raises(BertkitError, match="serve --layers sum-last-4: .* inside its graph"):
        OnnxRunner(model, layers="sum-last-4")
    assert OnnxRunner(model, model.pooling, "last").default_pooling == model.pooling   # what it computes: served
    with pytest.raises(BertkitError, match="serve --pooling"):
        build_service(ServeConfig(model=str(exports["encoder"]), pooling=other))


def test_predict_cuts_texts_at_the_folders_task_length_not_the_encode_length(tmp_path, classifier_model_dir):
    """A classifier fine-tuned at 48 tokens whose vectors are cut at 16 (its encode max length): /predict on the
    export cuts a long text at 48, as the source folder's server and `bertkit.load(ONNX_DIR).predict` do."""
    source = load_checkpoint(classifier_model_dir)
    save_checkpoint(tmp_path / "cls48", source.encoder, source.tokenizer, source.heads,
                    {**source.meta, "task_options": {"max_length": 48}},
                    sentence=SentencePipeline(SentenceConfig(max_length=16)))
    assert main(["export-onnx", "--model", str(tmp_path / "cls48"), "--output",
                 str(tmp_path / "onnx" / "model.onnx")]) == 0
    text = TEXTS[-1]                                 # 90 words: cut in every case, at 48 tokens by the head's rule
    served = _served(tmp_path / "onnx", "/predict", {"texts": [text], "truncate": True}).json()["predictions"][0]
    source_served = _served(tmp_path / "cls48", "/predict", {"texts": [text], "truncate": True}).json()
    assert served["scores"] == pytest.approx(source_served["predictions"][0]["scores"], abs=1e-5)
    assert served["scores"] == pytest.approx(bertkit.load(tmp_path / "onnx").predict([text])[0]["scores"], abs=1e-5)
