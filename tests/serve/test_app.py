"""Every endpoint over real HTTP on 127.0.0.1, checked against the model run in-process."""
from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest
import torch

import bertkit
from bertkit.features import embed_batch
from bertkit.serve.inputs import TokenSequence
from bertkit.serve.runner import SELF_TEST_TEXT, EmbedItem, ModelRunner
from servers import DOCUMENTS, start

TEXTS = ["the cat sat on the mat", "hello world", "a dog is on the mat ||| the cat sat", "你好 世界"]


@pytest.fixture(scope="module")
def local_model(tiny_model_dir):
    return bertkit.load(tiny_model_dir)


def test_encode_matches_in_process_model(http, local_model):
    answer = http.post("/encode", json={"id": 7, "texts": TEXTS[:2] + TEXTS[3:], "pooling": "mean",
                                        "normalize": False})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["id"] == 7 and body["status"] == 200 and body["truncated"] == []
    served = np.asarray(body["results"], dtype=np.float32)
    expected = local_model.encode(TEXTS[:2] + TEXTS[3:], pooling="mean", normalize=False)
    assert served.shape == (3, body["dimension"]) and np.isfinite(served).all()
    np.testing.assert_allclose(served, expected, atol=1e-4)


def test_encode_pair_uses_segment_ids(http):
    pair, swapped = http.post("/encode", json={"texts": ["hello world ||| the cat", "the cat ||| hello world"]}).json()["results"]
    single = http.post("/encode", json={"texts": ["hello world the cat"]}).json()["results"][0]
    assert not np.allclose(pair, swapped) and not np.allclose(pair, single)


def test_a_pair_is_embedded_with_its_segments_and_a_single_text_without(local_model):
    """The runner feeds a pair's token_type_ids to the model and a single text none, as Model.encode and
    transformers' default do (an XLNet tokenizer puts <cls> in segment 2 of a single text)."""
    runner = ModelRunner(local_model)
    batch = local_model.tokenizer.encode_batch(["hello world"], pairs=["the cat"])
    ids, types = batch.input_ids[0], batch.token_type_ids[0]
    assert 1 in types
    sentence = runner.sentence_encoder("mean", False)
    tensors = torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long)
    with_segments = embed_batch(sentence, *tensors, torch.tensor([types]))[0]
    without = embed_batch(sentence, *tensors, None)[0]
    assert not np.allclose(with_segments, without)
    pair = runner.embed([EmbedItem(TokenSequence(ids, types, True), "mean", False)])[0]
    single = runner.embed([EmbedItem(TokenSequence(ids, types, False), "mean", False)])[0]
    np.testing.assert_array_equal(pair, with_segments)
    np.testing.assert_array_equal(single, without)


def test_encode_options_pooling_normalize_base64(http):
    floats = http.post("/encode", json={"texts": TEXTS, "pooling": "cls", "normalize": True}).json()["results"]
    packed = http.post("/encode", json={"texts": TEXTS, "pooling": "cls", "normalize": True,
                                        "encoding_format": "base64"}).json()["results"]
    decoded = np.stack([np.frombuffer(base64.b64decode(v), dtype="<f4") for v in packed])
    np.testing.assert_allclose(decoded, np.asarray(floats, dtype=np.float32), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(decoded, axis=1), 1.0, atol=1e-5)
    mean = http.post("/encode", json={"texts": TEXTS, "pooling": "mean", "normalize": True}).json()["results"]
    assert not np.allclose(mean, floats)


def test_encode_pretokenized_equals_text(http):
    tokens = http.post("/tokenize", json={"texts": ["the cat sat"]}).json()["tokens"][0][1:-1]
    from_tokens = http.post("/encode", json={"texts": [tokens], "is_tokenized": True}).json()["results"]
    from_text = http.post("/encode", json={"texts": ["the cat sat"]}).json()["results"]
    np.testing.assert_allclose(from_tokens, from_text, atol=1e-5)


def test_truncate_lists_cut_texts(http, local_model):
    long_text = " ".join(["cat"] * 100)          # 102 tokens, over the tiny model's 64
    answer = http.post("/encode", json={"texts": ["hello", long_text], "truncate": True}).json()
    assert answer["truncated"] == [1]
    # cut as the library cuts (long_texts="truncate": the first 64 tokens), not dropped or padded differently
    np.testing.assert_allclose(answer["results"], local_model.encode(["hello", long_text]), atol=1e-5)


def test_openai_embeddings(http, local_model):
    answer = http.post("/v1/embeddings", json={"input": ["hello world", "the cat"], "model": "anything"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == [0, 1]
    assert body["data"][0]["object"] == "embedding" and body["usage"]["prompt_tokens"] > 0
    vectors = np.asarray([d["embedding"] for d in body["data"]])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)   # OpenAI vectors are unit length
    one = http.post("/v1/embeddings", json={"input": "hello world", "encoding_format": "base64"}).json()
    np.testing.assert_allclose(np.frombuffer(base64.b64decode(one["data"][0]["embedding"]), dtype="<f4"),
                               vectors[0], atol=1e-6)
    ids = local_model.tokenizer.encode_batch(["hello world"]).input_ids[0][1:-1]
    by_ids = http.post("/v1/embeddings", json={"input": ids}).json()["data"][0]["embedding"]
    np.testing.assert_allclose(by_ids, vectors[0], atol=1e-5)


def test_tokenize(http):
    body = http.post("/tokenize", json={"texts": ["Hello world", "the cat ||| a dog", " ".join(["cat"] * 70)]}).json()
    assert body["tokens"][0] == ["[CLS]", "hello", "world", "[SEP]"]
    assert body["token_type_ids"][1][-1] == 1 and body["offsets"][0][1] == [0, 5]
    assert body["num_tokens"][2] == 72 and body["over_limit"] == [False, False, True]
    assert body["max_length"] == 64


def test_search_ranks_the_matching_document_first(http):
    answer = http.post("/search", json={"query": DOCUMENTS[0][1], "k": 3})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert results[0]["id"] == "d1" and results[0]["score"] == pytest.approx(1.0, abs=1e-4)
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    assert results[0]["metadata"] == {"kind": "animal"}
    filtered = http.post("/search", json={"query": DOCUMENTS[0][1], "k": 5, "filter": {"kind": "greeting"}})
    assert {r["id"] for r in filtered.json()["results"]} == {"d2", "d4"}


def test_predict_without_head_is_409(http):
    answer = http.post("/predict", json={"texts": ["hello"]})
    assert answer.status_code == 409 and "no fine-tuned head" in answer.json()["detail"]


def test_predict_classification_equals_model_predict(classifier_model_dir):
    texts = ["the cat sat", "hello ||| world"]
    expected = bertkit.load(classifier_model_dir).predict(["the cat sat", ("hello", "world")])
    server = start(classifier_model_dir)
    try:
        answer = httpx.post(f"{server.url}/predict", json={"texts": texts}, timeout=30)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["task"] == "classification"
        for prediction, reference in zip(body["predictions"], expected, strict=True):
            assert prediction["label"] == reference["label"] and set(prediction) == set(reference)
            assert prediction["scores"] == pytest.approx(reference["scores"], abs=1e-6)
            assert prediction["score"] == pytest.approx(reference["score"], abs=1e-6)
        search = httpx.post(f"{server.url}/search", json={"query": "cat"}, timeout=30)
        assert search.status_code == 404 and "--index" in search.json()["detail"]
    finally:
        server.stop()


def test_predict_ner_gives_word_entities_with_character_spans(ner_model_dir):
    """Every token says B-PER, so every word is an entity: "cats" (cat ##s) is one word, one entity, tagged from
    its first piece (the server used to tag every piece: "cat" and "s")."""
    server = start(ner_model_dir)
    try:
        text = "hello  the cats"
        body = httpx.post(f"{server.url}/predict", json={"texts": [text]}, timeout=30).json()
        prediction = body["predictions"][0]
        assert prediction["tokens"] == ["hello", "the", "cats"] and prediction["tags"] == ["B-PER"] * 3
        assert [(e["text"], e["start"], e["end"], e["type"]) for e in prediction["entities"]] == \
            [("hello", 0, 5, "PER"), ("the", 7, 10, "PER"), ("cats", 11, 15, "PER")]
        assert prediction == bertkit.load(ner_model_dir).predict([text])[0]
    finally:
        server.stop()


def test_health_status_and_page(http):
    assert http.get("/health").json() == {"status": "ok"}
    assert http.post("/encode", json={"texts": ["counted"]}).status_code == 200   # not left to earlier tests
    status = http.get("/status").json()
    assert status["limits"]["max_request_texts"] == 8 and status["limits"]["max_tokens_per_text"] == 64
    assert status["model"]["dimension"] == 32 and status["self_test"]["passed"]
    assert status["index"]["documents"] == len(DOCUMENTS)
    assert status["counters"]["requests"]["/encode"] >= 1
    assert {"p50_ms", "p99_ms"} <= set(status["latency"]["/encode"])
    assert status["queue"]["batches"] >= 1 and status["config"]["api_key"] is None
    page = http.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"] and 'id="query"' in page.text
    schema = http.get("/openapi.json").json()
    assert {"/encode", "/v1/embeddings", "/tokenize", "/predict", "/search", "/health", "/status"} <= set(schema["paths"])


def test_served_precision_is_the_loaded_one(tiny_model_dir):
    """--precision reaches the model the server loads: /status says bf16 and /encode gives bf16 vectors (those of
    bertkit.load(..., precision="bf16") to bf16 rounding, not the fp32 ones)."""
    running = start(tiny_model_dir, precision="bf16")
    try:
        with httpx.Client(base_url=running.url, timeout=30) as client:
            status = client.get("/status").json()
            served = np.asarray(client.post("/encode", json={"texts": TEXTS[:2], "pooling": "mean",
                                                             "normalize": True}).json()["results"])
    finally:
        running.stop()
    assert status["model"]["precision"] == "bf16" and status["config"]["precision"] == "bf16"
    bf16 = bertkit.load(tiny_model_dir, precision="bf16").encode(TEXTS[:2], pooling="mean", normalize=True)
    fp32 = bertkit.load(tiny_model_dir).encode(TEXTS[:2], pooling="mean", normalize=True)
    np.testing.assert_allclose(served, bf16, atol=1e-3)
    assert np.abs(served - fp32).max() > 1e-5


def test_the_self_test_reports_the_norm_clients_get(tiny_model_dir, make_sentence_transformers_folder, tmp_path):
    """A folder that normalizes its vectors printed 'self-test passed (..., norm 5.253)' at start-up while
    /encode returned unit vectors: the self-test now embeds as /encode does by default."""
    folder = make_sentence_transformers_folder(tiny_model_dir, tmp_path / "st", "mean", [], normalize=True)
    runner = ModelRunner(bertkit.load(folder, device="cpu"))
    assert runner.self_test()["norm"] == pytest.approx(1.0, abs=1e-5)
    plain = ModelRunner(bertkit.load(tiny_model_dir, device="cpu"))
    vector = bertkit.load(tiny_model_dir, device="cpu").encode([SELF_TEST_TEXT])[0]
    assert plain.self_test()["norm"] == pytest.approx(float(np.linalg.norm(vector)), rel=1e-5)


def test_ids_from_tokenize_embed_as_their_text(http):
    text = http.post("/v1/embeddings", json={"input": "hello world"}).json()["data"][0]["embedding"]
    framed = http.post("/tokenize", json={"texts": ["hello world"]}).json()["input_ids"][0]    # [CLS] ... [SEP]
    # the ids were framed a second time: [CLS] [CLS] hello world [SEP] [SEP], another vector
    by_ids = http.post("/v1/embeddings", json={"input": [framed]}).json()["data"][0]["embedding"]
    np.testing.assert_allclose(by_ids, text, atol=1e-5)
    only_frame = http.post("/v1/embeddings", json={"input": [framed[:1] + framed[-1:]]})
    assert only_frame.status_code == 422 and "input[0] is an empty token list" in only_frame.json()["detail"]
