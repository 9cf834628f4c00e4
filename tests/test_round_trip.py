"""Deliverable 3 of issue 17: every folder bertkit writes loads back and answers as it should.

The folders come from tests/writers.py (each made by its own CLI command on tiny data, shared with
tests/test_compatibility.py). For each one this checks, against a reference rather than "it loads":
- settings: a folder made from another keeps the source's lowercasing, max length, pooling, normalization,
  dense layers and labels (where the writer does not change them on purpose);
- outputs: a writer that does not train (convert, whiten, quantize, the pruned full-shape copy, linear probe and
  hybrid over a frozen encoder) gives the source's vectors or predictions (tolerances per check below);
- routes: `bertkit.load(DIR).encode` == `bertkit encode` (exact) == POST /encode (1e-6: the server batches by token
  budget); `bertkit.load(DIR).predict` == the `bertkit predict` file (1e-6) == POST /predict (1e-5); an index
  loads back through `Index.open` and finds each document first with cosine 1 (1e-5).
tests/serve/test_one_vector.py runs the encode routes for the sentence-embedding writers (whitened, quantized,
SimCSE, distilled, pruned, pretrained) and tests/serve/test_onnx_serving.py serves an ONNX export; not repeated.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

import bertkit
from bertkit.cli import main
from bertkit import Index
from bertkit.serve.config import ServeConfig
from bertkit.serve.server import build_service
from bertkit.serve.app import create_app
from writers import sentences

TEXTS = sentences(7)[2:] + ["the cat sat on the mat", "hello world"]
PAIRS = [(a, b) for a, b in zip(TEXTS, reversed(TEXTS))]

# folder -> the folder it was written from, for the settings that writer keeps
DERIVED = {
    "converted": "sentence-transformers", "whitened": "sentence-transformers", "SimCSE": "sentence-transformers",
    "distilled embedding": "sentence-transformers", "linear-probe": "sentence-transformers",
    "hybrid": "sentence-transformers", "quantized int8": "fine-tuned classification",
    "distilled": "fine-tuned classification", "pruned (bertkit, smaller layers)": "fine-tuned classification",
    "pruned (transformers/ copy)": "pruned (bertkit, smaller layers)",
}
# folder -> how its predictions are asked for (None: one text each)
PREDICTING = {
    "fine-tuned classification": None, "fine-tuned pair-classification": "pairs", "fine-tuned regression": None,
    "fine-tuned multi-label": None, "fine-tuned ner": None, "fine-tuned rerank": "pairs", "distilled": None,
    "pruned (bertkit, smaller layers)": None, "pruned (transformers/ copy)": None, "quantized int8": None,
    "linear-probe": None, "hybrid": None, "baseline": None, "prompt/PET": None, "P-tuning": None,
}
NOT_SERVED = {"prompt/PET", "P-tuning"}     # prompt classifiers predict offline only (the server answers 409)
# encoder folders whose encode routes no other test runs
ENCODING = ["RoBERTa-style", "ALBERT", "fine-tuned pair-classification", "fine-tuned regression",
            "fine-tuned multi-label", "fine-tuned ner", "fine-tuned qa", "fine-tuned rerank", "linear-probe",
            "hybrid", "prompt/PET", "seq2seq", "converted", "pre-trained ELECTRA", "ELECTRA generator",
            "pre-trained SpanBERT (mlm+sbo)", "SimBERT",
            # found by this walk: the server fed single texts the tokenizer's segments (XLNet: <cls> in segment 2)
            # where Model.encode and transformers' default feed none; /encode differed by ~5e-6
            "pre-trained XLNet (plm)"]


def _settings(model) -> dict:
    return {"lowercase": model.tokenizer.lowercase, "max_length": model.max_length,
            "pooling": model.sentence.config.pooling, "layers": model.sentence.config.layers,
            "normalize": model.sentence.config.normalize, "labels": model.meta.get("labels"),
            "task": model.meta.get("task")}


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_settings_are_kept_from_the_source(name, written_folders):
    folder, source = bertkit.load(written_folders(name)), bertkit.load(written_folders(DERIVED[name]))
    got, want = _settings(folder), _settings(source)
    if want["task"] is None:                      # SimCSE / embedding distillation name their own task
        want["task"] = got["task"]
    if name in ("linear-probe", "hybrid"):        # a classifier over the frozen encoder: task and labels are new
        want["task"], want["labels"] = got["task"], got["labels"]
        assert got["labels"] == ["animal", "other"]
    assert got == want, name
    if name not in ("distilled embedding", "distilled"):
        assert len(folder.sentence.dense) == len(source.sentence.dense), name


def test_writers_that_do_not_train_give_the_sources_outputs(written_folders):
    source = bertkit.load(written_folders("sentence-transformers"))
    vectors = source.encode(TEXTS)
    # convert: the same model in transformers' form (1e-5)
    np.testing.assert_allclose(bertkit.load(written_folders("converted")).encode(TEXTS), vectors, atol=1e-5)
    # whiten: the encoder is unchanged, so the vectors before its whitening are the source's (1e-6)
    np.testing.assert_allclose(bertkit.load(written_folders("whitened")).encode(TEXTS, whiten=False), vectors,
                               atol=1e-6)
    # linear probe, hybrid: vectors of the frozen encoder they were fitted on (1e-6)
    for name in ("linear-probe", "hybrid"):
        np.testing.assert_allclose(bertkit.load(written_folders(name)).encode(TEXTS), vectors, atol=1e-6)
    # the pruned folder's full-shape transformers/ copy predicts as the pruned folder (1e-5)
    pruned = bertkit.load(written_folders("pruned (bertkit, smaller layers)")).predict(TEXTS)
    copy = bertkit.load(written_folders("pruned (transformers/ copy)")).predict(TEXTS)
    assert [p["label"] for p in copy] == [p["label"] for p in pruned]
    np.testing.assert_allclose([p["score"] for p in copy], [p["score"] for p in pruned], atol=1e-5)
    # int8: the fine-tuned source's vectors to int8 rounding (cosine >= 0.99, the quantize gate's mean)
    fp32 = bertkit.load(written_folders("fine-tuned classification")).encode(TEXTS, normalize=True)
    int8 = bertkit.load(written_folders("quantized int8")).encode(TEXTS, normalize=True)
    assert (fp32 * int8).sum(1).mean() >= 0.99


def _served(folder, route: str, body: dict) -> dict:
    service = build_service(ServeConfig(model=str(folder)))
    try:
        with TestClient(create_app(service)) as client:
            answer = client.post(route, json=body)
    finally:
        service.close()
    assert answer.status_code == 200, answer.text
    return answer.json()


def _close(got: dict, want: dict, atol: float) -> None:
    assert set(got) >= set(want) - {"entities"}, (got, want)
    for key, value in want.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, abs=atol), key
        elif isinstance(value, dict):
            assert got[key] == pytest.approx(value, abs=atol), key
        elif key == "scores" and isinstance(value, list):
            assert got[key] == pytest.approx(value, abs=atol), key
        elif key != "entities":
            assert got[key] == value, key


@pytest.mark.parametrize("name", sorted(PREDICTING))
def test_predict_file_and_server_answer_as_the_loaded_folder(name, written_folders, tmp_path):
    folder = written_folders(name)
    pairs = PREDICTING[name] == "pairs"
    inputs = PAIRS if pairs else TEXTS
    expected = bertkit.load(folder).predict(inputs)
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": a, "text_pair": b} if pairs else {"text": a}) + "\n"
                              for a, b in (inputs if pairs else [(t, None) for t in inputs])), encoding="utf-8")
    assert main(["predict", "--model", str(folder), "--input", str(source), "--output", str(tmp_path / "o.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected):
        _close(row, want, 1e-6)
    if name in NOT_SERVED:
        return
    texts = [f"{a} ||| {b}" for a, b in inputs] if pairs else inputs
    served = _served(folder, "/predict", {"texts": texts})["predictions"]
    for got, want in zip(served, expected):
        _close(got, want, 1e-5)


@pytest.mark.parametrize("name", ENCODING)
def test_encode_cli_and_server_give_the_loaded_folders_vectors(name, written_folders, tmp_path):
    folder = written_folders(name)
    local = bertkit.load(folder).encode(TEXTS)
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    assert main(["encode", "--model", str(folder), "--input", str(source), "--output", str(tmp_path / "v.npy")]) == 0
    assert np.array_equal(np.load(tmp_path / "v.npy"), local)
    served = np.asarray(_served(folder, "/encode", {"texts": TEXTS})["results"], dtype=np.float32)
    np.testing.assert_allclose(served, local, rtol=0, atol=1e-6)


def test_index_loads_back_and_finds_each_document(written_folders):
    pytest.importorskip("faiss")
    texts = sentences(24)
    with Index.open(written_folders("index")) as index:
        for position in (0, 5, 17):
            hits = index.search(texts[position], k=3)
            same = [h for h in hits if h.text == texts[position]]
            assert same and hits[0].score == pytest.approx(1.0, abs=1e-5) and same[0].score == pytest.approx(1.0, abs=1e-5)


def test_every_written_file_follows_the_umask(written_folders):
    """Files are created as the user's other programs create theirs (0666 minus the umask), not 0600: issue 17
    found folders of 0600 files that a group or a server user could not read."""
    umask = os.umask(0o022)
    os.umask(umask)
    wanted = 0o666 & ~umask
    names = sorted({*DERIVED, *PREDICTING, *(getattr(e, "values", [e])[0] for e in ENCODING), "index", "ONNX", "whitened", "pre-trained BERT", "GPT-2",
                    "P-tuning", "SimCSE"} - {"sentence-transformers"})
    wrong = []
    for name in names:
        for path in Path(written_folders(name)).rglob("*"):
            if path.is_file() and stat.S_IMODE(path.stat().st_mode) != wanted:
                wrong.append(f"{name}: {path.name} {oct(stat.S_IMODE(path.stat().st_mode))}")
    assert not wrong, f"not {oct(wanted)}: {wrong[:10]}"


def test_question_answering_folder_answers_as_loaded_through_the_server(written_folders):
    folder = written_folders("fine-tuned qa")
    items = [{"question": "what sat", "context": text} for text in TEXTS]
    expected = bertkit.load(folder).predict(items)
    served = _served(folder, "/predict", {"texts": items})["predictions"]
    for got, want in zip(served, expected):
        assert (got["answer"], got["start"], got["end"]) == (want["answer"], want["start"], want["end"])
        assert got["null_score"] == pytest.approx(want["null_score"], abs=1e-5)
