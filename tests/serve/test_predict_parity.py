"""POST /predict == Model.predict for every task the server answers, on tiny random fine-tuned folders.

Both go through one formatter (bertkit.finetune.predictions), so a predictions file and a server answer for
the same folder agree: the same keys, labels and tags exactly, scores to float32 batching noise (the server
groups texts by token budget, Model.predict by length, which changes the summation order in the matmuls).
Planted cases pin the two drifts this replaced: regression answered {"value"} from the server, and a
multi-label logit of exactly 0 (probability 0.5) was "on" from the server (>= 0.5) but off offline (> 0.5).
/encode == Model.encode for whitened, truncated folders is tests/serve/test_one_vector.py.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import bertkit
from bertkit.checkpoints import save_checkpoint
from bertkit.finetune.ner import NERTask
from bertkit.model.heads import QuestionAnsweringHead, SequenceClassificationHead, TokenClassificationHead
from bertkit.serve.config import ServeConfig
from bertkit.serve.server import build_service
from bertkit.serve.app import create_app

TestClient = pytest.importorskip("fastapi.testclient").TestClient

TEXTS = ["the cat sat on the mat", "hello world", "cats and dogs sat", "你好 世界", "xyzzy hellos, the dogmat!",
         "is the cat on the mat ? hello"]
PAIRS = [("the cat sat", "on the mat"), ("hello world", "the dog"), ("cats", "dogs sat on mats")]
# Sub-word pieces ("cats" = cat ##s, "xyzzy" = x ##y ...): NER tags come from each word's first piece only.
NER_TEXTS = ["hello the cats sat", "xyzzy hellos on the dogmat", "the cat, the dog", "你好 世界 cat"]
QA_ITEMS = [{"question": "where is the cat?", "context": "the cat sat on the mat. hello world."},
            {"question": "hello?", "context": "a dog is on a mat and the cat sat"}]
LABELS = {"classification": ["negative", "neutral", "positive"], "pair-classification": ["entail", "other"],
          "multi-label": ["sport", "money", "tie"], "regression": [], "ner": ["O", "B-PER", "I-PER", "B-LOC"],
          "qa": []}


def _folder(base: Path, folder: Path, task: str) -> Path:
    model = bertkit.load(base)
    config = model.config
    torch.manual_seed(len(task))
    labels = LABELS[task]
    if task == "ner":
        heads = {"token_classifier": TokenClassificationHead(config, len(labels))}
        with torch.no_grad():   # random logits are near-ties; a larger head makes tags differ across tokens
            heads["token_classifier"].linear.weight.normal_(0, 1.0)
    elif task == "qa":
        heads = {"qa": QuestionAnsweringHead(config)}
    else:
        head = SequenceClassificationHead(config, max(len(labels), 1))
        with torch.no_grad():
            head_linear = [m for m in head.modules() if isinstance(m, torch.nn.Linear)][-1]
            head_linear.weight.normal_(0, 0.5)
            if task == "multi-label":   # "tie": logit exactly 0, probability exactly 0.5 -> not predicted
                head_linear.weight[2].zero_()
                head_linear.bias[2] = 0.0
        heads = {"classifier": head}
    meta = {"task": task, "labels": labels}
    if task == "qa":
        meta["task_options"] = {"max_length": 32, "doc_stride": 8, "max_question_length": 12}
    save_checkpoint(folder, model.encoder, model.tokenizer, heads=heads, meta=meta)
    return folder


def _inputs(task: str) -> tuple[list, list]:
    """(what Model.predict takes, what POST /predict takes)."""
    if task == "pair-classification":
        return PAIRS, [f"{a} ||| {b}" for a, b in PAIRS]
    if task == "ner":
        return NER_TEXTS, NER_TEXTS
    if task == "qa":
        return [(item["question"], item["context"]) for item in QA_ITEMS], QA_ITEMS
    return TEXTS, TEXTS


def _assert_same(served, expected, where: str) -> None:
    """Equal structure, keys and strings; floats to 1e-5 (relative) + 1e-6."""
    if isinstance(expected, dict):
        assert isinstance(served, dict) and set(served) == set(expected), f"{where}: {served} != {expected}"
        for key in expected:
            _assert_same(served[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(served, list) and len(served) == len(expected), f"{where}: {served} != {expected}"
        for i, (a, b) in enumerate(zip(served, expected)):
            _assert_same(a, b, f"{where}[{i}]")
    elif isinstance(expected, float):
        assert served == pytest.approx(expected, rel=1e-5, abs=1e-6), where
    else:
        assert served == expected, where


@pytest.mark.parametrize("task", list(LABELS))
def test_served_predictions_equal_model_predict(tiny_model_dir, tmp_path, task):
    folder = _folder(tiny_model_dir, tmp_path / task, task)
    offline_inputs, served_inputs = _inputs(task)
    expected = bertkit.load(folder).predict(offline_inputs)
    if task == "qa":   # the server's items carry no id; everything else is the same answer
        expected = [{k: v for k, v in answer.items() if k != "id"} for answer in expected]
    service = build_service(ServeConfig(model=str(folder)))
    try:
        with TestClient(create_app(service)) as client:
            answer = client.post("/predict", json={"texts": served_inputs})
    finally:
        service.close()
    assert answer.status_code == 200, answer.text
    assert answer.json()["task"] == task
    _assert_same(answer.json()["predictions"], expected, task)
    if task == "multi-label":       # the planted tie is off in both, and the test saw a real decision
        assert all("tie" not in p["labels"] and p["scores"]["tie"] == 0.5 for p in expected)
    if task == "ner":               # a real comparison: some word got an entity, some word did not
        tags = [t for p in expected for t in p["tags"]]
        assert any(t != "O" for t in tags) and "O" in tags
        assert any(len(p["entities"]) for p in expected)


@pytest.mark.parametrize("long_texts", ["head+tail", "truncate"])
def test_long_texts_are_cut_as_the_folder_was_trained(tiny_model_dir, tmp_path, long_texts):
    """A classifier fine-tuned at 16 tokens keeps its head and tail (or its head) there in Model.predict; the
    server cut at the 64-token position table from the start, so long texts got other scores, and the answer
    depended on where the text was served."""
    folder = _folder(tiny_model_dir, tmp_path / "cls", "classification")
    meta_path = folder / "bertkit.json"
    meta = json.loads(meta_path.read_text())
    meta["task_options"] = {"max_length": 16, "long_texts": long_texts}
    meta_path.write_text(json.dumps(meta))
    texts = ["the cat sat on the mat " * 3 + "hello world xyzzy", "the dog " * 5 + "hellos, the dogmat!", "cat"]
    expected = bertkit.load(folder).predict(texts)
    service = build_service(ServeConfig(model=str(folder)))
    try:
        with TestClient(create_app(service)) as client:
            cut = client.post("/predict", json={"texts": texts, "truncate": True})
            refused = client.post("/predict", json={"texts": texts})
    finally:
        service.close()
    assert cut.status_code == 200, cut.text
    assert cut.json()["truncated"] == [0, 1]
    _assert_same(cut.json()["predictions"], expected, long_texts)
    assert refused.status_code == 422
    assert "texts[0] has 27 tokens, more than the model's limit of 16" in refused.json()["detail"]


def test_a_long_ner_text_is_tagged_in_windows_as_the_folder_tags_it(tiny_model_dir, tmp_path):
    """Model.predict reads an NER text longer than the folder's max_length in overlapping windows; the server cut
    it at the position table (or refused it without "truncate"), so the words past the cut were all O."""
    folder = _folder(tiny_model_dir, tmp_path / "ner", "ner")
    meta_path = folder / "bertkit.json"
    meta = json.loads(meta_path.read_text())
    meta["task_options"] = {"max_length": 16, "ner_stride": 4}
    meta_path.write_text(json.dumps(meta))
    texts = [" ".join(NER_TEXTS * 4), NER_TEXTS[0]]            # ~70 word pieces: windows of 14 past the 64 positions
    expected = bertkit.load(folder).predict(texts)
    service = build_service(ServeConfig(model=str(folder)))
    try:
        with TestClient(create_app(service)) as client:
            answer = client.post("/predict", json={"texts": texts})
            empty = client.post("/predict", json={"texts": ["fine", "  "]})
    finally:
        service.close()
    assert answer.status_code == 200, answer.text
    assert answer.json()["truncated"] == []
    _assert_same(answer.json()["predictions"], expected, "ner")
    late = expected[0]["tags"][len(expected[0]["tags"]) * 3 // 4:]
    assert any(tag != "O" for tag in late)                      # the end of the long text was tagged
    assert empty.status_code == 422 and "texts[1]" in empty.json()["detail"]


def test_a_ner_request_of_too_many_windows_is_refused_before_they_are_built(tiny_model_dir, tmp_path, monkeypatch):
    """The windows were built (Python lists per window) before the queue limit was checked: an 8 MB request
    took 17 s and 2 GB to get its 413. Now the count comes from the token lengths alone."""
    folder = _folder(tiny_model_dir, tmp_path / "ner", "ner")
    meta_path = folder / "bertkit.json"
    meta = json.loads(meta_path.read_text())
    meta["task_options"] = {"max_length": 16, "ner_stride": 4}
    meta_path.write_text(json.dumps(meta))
    service = build_service(ServeConfig(model=str(folder), max_queued_texts=50))
    built = []
    real_encode = NERTask.encode
    def encode(self, sentences, max_windows=None):          # records the calls that built windows
        features = real_encode(self, sentences, max_windows)
        built.append(len(features))
        return features

    monkeypatch.setattr(NERTask, "encode", encode)
    try:
        with TestClient(create_app(service)) as client:
            many = client.post("/predict", json={"texts": [" ".join(NER_TEXTS * 40)]})     # ~700 pieces: ~70 windows
            few = client.post("/predict", json={"texts": [" ".join(NER_TEXTS * 4)]})
    finally:
        service.close()
    assert many.status_code == 413 and "windows of up to 16 tokens" in many.json()["detail"], many.text
    assert few.status_code == 200 and len(built) == 1                # only the request that fit built windows


@pytest.mark.parametrize("options, message", [
    ({"max_length": "64"}, "task_options.max_length must be a whole number, got '64'"),
    ({"max_length": 0}, "task_options.max_length must be a number >= 3, got 0"),
    ({"long_texts": "bogus"}, "task_options.long_texts must be one of truncate, head+tail, got 'bogus'"),
    ({"ner_stride": 1.5}, "task_options.ner_stride must be a whole number, got 1.5"),
    ({"null_threshold": "x"}, "task_options.null_threshold must be a number, got 'x'"),
])
def test_hostile_task_options_are_refused_at_start_up_and_by_predict(tiny_model_dir, tmp_path, capsys, options,
                                                                    message):
    """A folder's task_options were read unchecked: max_length "64" was a 500 on every /predict, 0 a 503
    ('retry'), and `bertkit predict` a TypeError traceback or predictions from a 0-token cut (an attack trial)."""
    from bertkit.cli import main
    from bertkit.errors import BertkitError

    folder = _folder(tiny_model_dir, tmp_path / "cls", "classification")
    meta = json.loads((folder / "bertkit.json").read_text())
    meta["task_options"] = options
    (folder / "bertkit.json").write_text(json.dumps(meta))
    with pytest.raises(BertkitError, match=re.escape(f"bertkit.json: {message}")):
        build_service(ServeConfig(model=str(folder)))
    texts = tmp_path / "in.txt"
    texts.write_text("the cat sat\n")
    assert main(["predict", "--model", str(folder), "--input", str(texts), "--output", str(tmp_path / "p.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "p.jsonl").exists()
