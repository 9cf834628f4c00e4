"""POST /predict for extractive-QA models over real HTTP on 127.0.0.1, and bertkit.Client.predict.

The QA model is built so that its answers are known: every transformer layer is zeroed (each block is then
LayerNorm of its input), position and segment embeddings are zero, and "cat", "mat" and [CLS] get orthogonal,
zero-mean embeddings that every other token is orthogonal to. The head's start logit is then START_LOGIT at
"cat", NULL_LOGIT at [CLS] and 0 elsewhere, its end logit the same at "mat": the answer is the span from
"cat" to "mat" wherever it lies in the context, and a v2.0 model answers "" when either is missing.
"""
from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest
import torch

import bertkit
from bertkit.checkpoints import save_checkpoint
from bertkit.client import Client, ServerError
from bertkit.finetune.predict import predict as predict_in_process
from bertkit.model.heads import QuestionAnsweringHead
from servers import start

START_LOGIT, NULL_LOGIT = 10.0, 6.0   # span 2 x 10 beats [CLS] 2 x 6; "cat" alone (10 + 0) does not
# 32-token windows: short enough that the long context below needs several, advancing by 8 tokens.
TASK_OPTIONS = {"max_length": 32, "doc_stride": 8, "max_question_length": 12, "max_answer_length": 10,
                "n_best": 20, "null_threshold": 0.0}
LONG_CONTEXT = "hello world. " * 20 + "the cat sat on the mat. " + "hello world. " * 5
ANSWER = "cat sat on the mat"


def _answer_model(base: Path, folder: Path, with_negative: bool) -> Path:
    model = bertkit.load(base)
    encoder, tokenizer = model.encoder, model.tokenizer
    width = encoder.config.hidden_size
    generator = torch.Generator().manual_seed(3)
    # Three orthonormal directions orthogonal to all-ones, so LayerNorm (which removes the mean) keeps them.
    basis, _ = torch.linalg.qr(torch.cat([torch.ones(width, 1), torch.randn(width, 3, generator=generator)], 1))
    cat, mat, cls = basis[:, 1], basis[:, 2], basis[:, 3]
    ids = {"cat": tokenizer.token_to_id("cat"), "mat": tokenizer.token_to_id("mat"), "cls": tokenizer.cls_id}
    scale = math.sqrt(width)     # a zero-mean vector of norm sqrt(width) is its own LayerNorm
    with torch.no_grad():
        for block in encoder.blocks:
            for module in block.modules():
                if isinstance(module, torch.nn.Linear):
                    module.weight.zero_()
                    module.bias.zero_()
        embeddings = encoder.embeddings
        embeddings.position.weight.zero_()
        embeddings.segment.weight.zero_()
        table = embeddings.token.weight
        table -= (table @ basis[:, 1:]) @ basis[:, 1:].T
        for key, direction in (("cat", cat), ("mat", mat), ("cls", cls)):
            table[ids[key]] = scale * direction
        head = QuestionAnsweringHead(encoder.config)
        head.linear.weight.copy_(torch.stack([START_LOGIT * cat + NULL_LOGIT * cls,
                                              START_LOGIT * mat + NULL_LOGIT * cls]) / scale)
        head.linear.bias.zero_()
    save_checkpoint(folder, encoder, tokenizer, heads={"qa": head},
                    meta={"task": "qa", "labels": [], "task_options": {**TASK_OPTIONS, "with_negative": with_negative}})
    return folder


@pytest.fixture(scope="module")
def qa_dir(tiny_model_dir, tmp_path_factory) -> Path:
    return _answer_model(tiny_model_dir, tmp_path_factory.mktemp("models") / "qa", with_negative=False)


@pytest.fixture(scope="module")
def qa_server(qa_dir):
    running = start(qa_dir, max_request_texts=8, max_batch_tokens=256)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def qa_http(qa_server):
    with httpx.Client(base_url=qa_server.url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def v2_server(tiny_model_dir, tmp_path_factory):
    running = start(_answer_model(tiny_model_dir, tmp_path_factory.mktemp("models") / "qa2", with_negative=True))
    yield running
    running.stop()


def _predict(http, texts, **options):
    return http.post("/predict", json={"texts": texts, **options})


def test_answers_with_character_offsets(qa_http):
    context = "Yesterday the cat sat on the mat, purring."
    answer = _predict(qa_http, [{"question": "where is it?", "context": context}])
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["task"] == "qa" and body["truncated"] == []
    found = body["predictions"][0]
    assert found["answer"] == ANSWER and context[found["start"]:found["end"]] == ANSWER
    assert found["score"] == pytest.approx(2 * START_LOGIT, abs=0.1)
    assert found["null_score"] == pytest.approx(2 * NULL_LOGIT, abs=0.1)


def test_long_context_is_read_in_windows_and_matches_bertkit_predict(qa_http, qa_dir, qa_server):
    items = [{"question": "what sat?", "context": LONG_CONTEXT},
             {"question": "hello?", "context": "the mat. hello world, the cat sat on the mat"},
             {"question": "who", "context": "the cat sat on the mat"}]
    before = qa_http.get("/status").json()["queue"]["batches"]
    served = _predict(qa_http, items).json()["predictions"]
    assert qa_http.get("/status").json()["queue"]["batches"] > before
    first = served[0]
    assert first["answer"] == ANSWER and LONG_CONTEXT[first["start"]:first["end"]] == ANSWER
    assert first["start"] == LONG_CONTEXT.index("cat")      # found past the first window
    expected = predict_in_process(str(qa_dir), items)
    for got, want in zip(served, expected):
        assert (got["answer"], got["start"], got["end"]) == (want["answer"], want["start"], want["end"])
        assert got["score"] == pytest.approx(want["score"], abs=1e-3)


def test_pair_string_form(qa_http):
    context = "a dog, and the cat sat on the mat"
    found = _predict(qa_http, [f"where? ||| {context}"]).json()["predictions"][0]
    assert found["answer"] == ANSWER and context[found["start"]:found["end"]] == ANSWER


def test_bad_items_get_422_naming_the_index(qa_http):
    cases = [([{"question": "q", "context": "the cat"}, {"question": "  ", "context": "the cat"}], "texts[1]"),
             ([{"question": "q", "context": ""}], "texts[0]"),
             (["q ||| the cat", "q |||  "], "texts[1]"),
             (["no separator here"], "texts[0]"),
             ([{"question": "q"}], "context")]
    for texts, named in cases:
        answer = _predict(qa_http, texts)
        assert answer.status_code == 422, (texts, answer.text)
        assert named in answer.json()["detail"], answer.text


def test_long_question_refused_unless_truncate(qa_http):
    item = {"question": "hello world " * 10, "context": "the cat sat on the mat"}
    refused = _predict(qa_http, [item])
    assert refused.status_code == 422 and "texts[0]" in refused.json()["detail"]
    cut = _predict(qa_http, [item], truncate=True).json()
    assert cut["truncated"] == [0] and cut["predictions"][0]["answer"] == ANSWER


def test_v2_model_says_no_answer(v2_server):
    with httpx.Client(base_url=v2_server.url, timeout=30) as http:
        found, missing = _predict(http, [{"question": "q", "context": "the cat sat on the mat"},
                                         {"question": "q", "context": "the cat sat on the rug"}]).json()["predictions"]
    assert found["answer"] == ANSWER
    assert missing == {"answer": "", "start": None, "end": None, "score": pytest.approx(START_LOGIT, abs=0.1),
                       "null_score": pytest.approx(2 * NULL_LOGIT, abs=0.1)}


def test_status_and_openapi_describe_qa(qa_http):
    assert qa_http.get("/status").json()["model"]["predict"] is True
    components = qa_http.get("/openapi.json").json()["components"]["schemas"]
    assert set(components["QuestionInput"]["properties"]) == {"question", "context"}
    assert {"answer", "start", "end", "score", "null_score"} <= set(components["Answer"]["properties"])


def test_classifier_refuses_question_objects(classifier_model_dir):
    running = start(classifier_model_dir)
    try:
        answer = httpx.post(f"{running.url}/predict", json={"texts": ["fine", {"question": "q", "context": "c"}]},
                            timeout=30)
    finally:
        running.stop()
    assert answer.status_code == 422 and "texts[1]" in answer.json()["detail"]


def test_client_predict_takes_pairs_and_dicts(qa_server):
    with Client(qa_server.url, timeout=30) as client:
        answers = client.predict([("where?", "the cat sat on the mat"),
                                  {"question": "where?", "context": LONG_CONTEXT}] * 5)   # 10 items, 8 a request
        assert len(answers) == 10 and all(a["answer"] == ANSWER for a in answers)
        with pytest.raises(ServerError) as refused:
            client.predict([("where?", " ")])
        assert refused.value.status == 422


def test_context_over_the_queue_limit_gets_413(qa_dir):
    running = start(qa_dir, max_queued_texts=4)
    try:
        answer = httpx.post(f"{running.url}/predict", timeout=30,
                            json={"texts": [{"question": "q", "context": LONG_CONTEXT}]})
    finally:
        running.stop()
    assert answer.status_code == 413 and "max_queued_texts" in answer.json()["detail"]
