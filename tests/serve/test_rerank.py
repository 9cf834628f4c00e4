"""/rerank over a planted cross-encoder: `bertkit finetune --task rerank` teaches a tiny random BERT that texts
with "cat" answer the query and the same texts with "dog" do not; the server must rank by that."""
from __future__ import annotations

import json
import random
import shutil

import httpx
import numpy as np
import pytest

import bertkit
from bertkit.cli import main
from bertkit.serve.app import create_app
from bertkit.serve.config import ServeConfig
from bertkit.serve.server import build_service
from servers import API_KEY, start

TestClient = pytest.importorskip("fastapi.testclient").TestClient

WORDS = ["the", "is", "sat", "on", "mat", "hello", "world"]


def planted_rows(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        filler = [rng.choice(WORDS) for _ in range(rng.randint(2, 5))]
        k = rng.randint(0, len(filler))
        rows.append({"query": "cat", "positive": " ".join(filler[:k] + ["cat"] + filler[k:]),
                     "negative": " ".join(filler[:k] + ["dog"] + filler[k:])})
    return rows


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("rerank")
    train = root / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in planted_rows(32, 0)), encoding="utf-8")
    code = main(["finetune", "--task", "rerank", "--model", str(tiny_model_dir), "--train", str(train),
                 "--output", str(root / "reranker"), "--epochs", "12", "--lr", "1e-2", "--batch-size", "16",
                 "--warmup-ratio", "0", "--schedule", "constant", "--in_batch_negatives=0", "--progress_bar=false"])
    assert code == 0
    return root / "reranker"


@pytest.fixture(scope="module")
def rerank_server(cross_encoder_dir):
    running = start(cross_encoder_dir, api_key=API_KEY)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(rerank_server):
    with httpx.Client(base_url=rerank_server.url, timeout=30, headers={"X-API-Key": API_KEY}) as http:
        yield http


# Held-out texts (none of them in the training rows): the cat ones must come first.
TEXTS = ["the dog sat on the mat", "hello world the cat", "dog is on the mat", "the mat is on the cat",
         "hello dog world"]


def test_rerank_puts_the_planted_keyword_first(client):
    answer = client.post("/rerank", json={"query": "cat", "texts": TEXTS, "return_text": True})
    assert answer.status_code == 200, answer.text
    results = answer.json()
    assert sorted(r["index"] for r in results) == list(range(len(TEXTS)))
    assert {r["index"] for r in results[:2]} == {1, 3}                       # the two cat texts first
    assert [r["text"] for r in results] == [TEXTS[r["index"]] for r in results]
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert min(scores[:2]) > 0.9 > 0.1 > max(scores[2:])                     # a clear margin, not a coin flip


def test_rerank_scores_equal_predict_probabilities(client, cross_encoder_dir):
    """The folder is a pair-classification folder: /rerank's score is /predict's P(relevant), raw is the logit gap."""
    model = bertkit.load(cross_encoder_dir)
    assert model.meta["task"] == "pair-classification" and model.meta["labels"] == ["irrelevant", "relevant"]
    ranked = client.post("/rerank", json={"query": "cat", "texts": TEXTS}).json()
    raw = client.post("/rerank", json={"query": "cat", "texts": TEXTS, "raw_scores": True}).json()
    predicted = client.post("/predict", json={"texts": [f"cat ||| {t}" for t in TEXTS]}).json()["predictions"]
    by_index = {r["index"]: r["score"] for r in ranked}
    for i, prediction in enumerate(predicted):
        assert by_index[i] == pytest.approx(prediction["scores"]["relevant"], abs=1e-5)
    assert [r["index"] for r in raw] == [r["index"] for r in ranked]
    raw_by_index = {r["index"]: r["score"] for r in raw}
    np.testing.assert_allclose([1 / (1 + np.exp(-raw_by_index[i])) for i in range(len(TEXTS))],
                               [by_index[i] for i in range(len(TEXTS))], atol=1e-6)
    assert "text" not in ranked[0]


def test_rerank_errors(client, rerank_server, server):
    assert httpx.post(rerank_server.url + "/rerank", json={"query": "cat", "texts": ["x"]}).status_code == 401
    empty = client.post("/rerank", json={"query": "cat", "texts": ["the cat", "  "]})
    assert empty.status_code == 422 and "texts[1]" in empty.json()["detail"]
    assert client.post("/rerank", json={"query": " ", "texts": ["the cat"]}).status_code == 422
    too_long = client.post("/rerank", json={"query": "cat", "texts": [" ".join(["mat"] * 80)]})
    assert too_long.status_code == 422 and "truncate" in too_long.json()["detail"]
    cut = client.post("/rerank", json={"query": "cat", "texts": [" ".join(["mat"] * 80)], "truncate": True})
    assert cut.status_code == 200
    limit = client.get("/status").json()["config"]["max_request_texts"]
    too_many = client.post("/rerank", json={"query": "cat", "texts": ["the cat"] * (limit + 1)})
    assert too_many.status_code == 413 and f"at most {limit}" in too_many.json()["detail"]
    not_cross = httpx.post(server.url + "/rerank", json={"query": "cat", "texts": ["the cat"]})
    assert not_cross.status_code == 409 and "--task rerank" in not_cross.json()["detail"]


def test_rerank_training_file_errors_name_the_line(tmp_path, tiny_model_dir, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "cat", "positive": "the cat", "negative": "the dog"}\n'
                   '{"query": "cat", "negative": "the dog"}\n', encoding="utf-8")
    code = main(["finetune", "--task", "rerank", "--model", str(tiny_model_dir), "--train", str(bad),
                 "--output", str(tmp_path / "out")])
    assert code == 2
    error = capsys.readouterr().err
    assert "bad.jsonl" in error and ":2" in error and "'positive'" in error
    assert not (tmp_path / "out").exists()


def test_rerank_cuts_pairs_at_the_length_the_folder_was_fine_tuned_with(cross_encoder_dir, tmp_path):
    """/rerank cut at the 64-token position table where the folder's predict cuts at its own max_length, so a
    long pair scored otherwise than `bertkit predict` scores it."""
    folder = tmp_path / "reranker16"
    shutil.copytree(cross_encoder_dir, folder)
    meta = json.loads((folder / "bertkit.json").read_text())
    meta["task_options"]["max_length"] = 16
    (folder / "bertkit.json").write_text(json.dumps(meta))
    text = "hello world the cat " + "sat on the mat " * 6         # ~30 tokens with the query: over 16
    expected = bertkit.load(folder).predict([("cat", text)])[0]["scores"]["relevant"]
    service = build_service(ServeConfig(model=str(folder)))
    try:
        with TestClient(create_app(service)) as http:
            answer = http.post("/rerank", json={"query": "cat", "texts": [text], "truncate": True})
            refused = http.post("/rerank", json={"query": "cat", "texts": [text]})
    finally:
        service.close()
    assert answer.status_code == 200, answer.text
    assert answer.json()[0]["score"] == pytest.approx(expected, abs=1e-5)
    assert refused.status_code == 422 and "more than the model's limit of 16" in refused.json()["detail"]
