"""`--model-process`: the model runs in a child process; answers must equal the in-thread server's."""
from __future__ import annotations

import os

import httpx
import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.serve import ServeConfig, build_service
from bertkit.serve.model_process import ModelProcess
from bertkit.serve.runner import EmbedItem
from bertkit.serve.inputs import TokenSequence

from servers import start
from test_qa_predict import _answer_model

TEXTS = ["the cat sat on the mat", "hello world", "你好 世界", "the dog is on a mat " * 5]


def _encode(server, **options):
    response = httpx.post(server.url + "/encode", json={"texts": TEXTS, **options}, timeout=60)
    assert response.status_code == 200, response.text
    return np.array([r for r in response.json()["results"]], dtype=np.float32)


def test_model_process_serves_the_same_vectors_and_predictions(tiny_model_dir, classifier_model_dir):
    in_thread = start(tiny_model_dir)
    in_child = start(tiny_model_dir, model_process=True)
    try:
        child = in_child.service.model_process
        assert child is not None and child.pid != os.getpid()
        for options in ({}, {"pooling": "cls", "normalize": True}):
            np.testing.assert_allclose(_encode(in_child, **options), _encode(in_thread, **options), atol=1e-5)
        assert httpx.get(in_child.url + "/status").json()["config"]["model_process"] is True
    finally:
        in_thread.stop()
        in_child.stop()
    assert not child._process.is_alive()                       # closing the server ends the child
    plain, child_run = start(classifier_model_dir), start(classifier_model_dir, model_process=True)
    try:
        answers = [httpx.post(s.url + "/predict", json={"texts": TEXTS}, timeout=60).json() for s in (plain, child_run)]
        assert answers[0] == answers[1]
    finally:
        plain.stop()
        child_run.stop()


@pytest.fixture(scope="module")
def qa_dir(tiny_model_dir, tmp_path_factory):
    return _answer_model(tiny_model_dir, tmp_path_factory.mktemp("models") / "qa", with_negative=False)


def test_qa_runs_in_the_child(qa_dir):
    item = {"question": "who sat", "context": "the cat sat on the mat"}
    plain, child_run = start(qa_dir), start(qa_dir, model_process=True)
    try:
        answers = [httpx.post(s.url + "/predict", json={"texts": [item]}, timeout=60).json() for s in (plain, child_run)]
        assert answers[0] == answers[1]
    finally:
        plain.stop()
        child_run.stop()


def test_child_errors_come_back_and_a_dead_child_is_named(tiny_model_dir):
    process = ModelProcess(str(tiny_model_dir), "cpu", 1)
    try:
        with pytest.raises(ValueError, match="unknown batch kind"):
            process.run_batch("nonsense", [])
        item = EmbedItem(TokenSequence([2, 10, 3], [0, 0, 0]), "mean", False)
        assert process.run_batch("embed", [item])[0].shape == (32,)
        process._process.kill()
        process._process.join()
        with pytest.raises(RuntimeError, match="model process exited"):
            process.run_batch("embed", [item])
    finally:
        process.close()


def test_bad_folder_and_missing_model_are_refused(tmp_path, tiny_model_dir):
    with pytest.raises(BertkitError, match="could not load"):
        ModelProcess(str(tmp_path / "missing"), "cpu", 1)
    with pytest.raises(BertkitError, match="needs --model"):
        import bertkit
        build_service(ServeConfig(model_process=True), model=bertkit.load(tiny_model_dir))
