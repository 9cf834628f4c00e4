import json

import numpy as np
import pytest
import torch

import bertkit
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main
from bertkit.distill.onnx_export import ExportedGraph, export_onnx, make_session, read_metadata
from bertkit.distill.onnx_model import OnnxModel, onnx_file_of
from bertkit.model.heads import SequenceClassificationHead, TokenClassificationHead
from bertkit.model.sentence import SentenceConfig, SentencePipeline
from bertkit.errors import BertkitError
from bertkit.finetune.predict import evaluate_file
from bertkit.tokenizer import Tokenizer
from distill_fixtures import LABELS, WORDS, make_model_folder, write_examples

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


@pytest.mark.parametrize("pooling,normalized", [("mean", True), ("cls", False), ("max", False), ("pooler", True)])
def test_onnx_matches_pytorch_at_several_shapes(model_dir, tmp_path, pooling, normalized):
    result = export_onnx(model_dir, tmp_path / "out" / "model.onnx", pooling, normalized)
    assert result.max_abs_diff < 1e-4
    assert result.outputs == ("embeddings", "logits")
    checkpoint = load_checkpoint(model_dir)
    graph = ExportedGraph(checkpoint.sentence.build(checkpoint.encoder, pooling, None, normalized),
                          checkpoint.heads["classifier"]).eval()
    session = make_session(result.path)
    for batch, length in [(1, 1), (4, 7), (2, 33), (7, 64)]:
        ids = torch.randint(5, 32, (batch, length))
        mask = torch.ones(batch, length, dtype=torch.long)
        mask[0, max(1, length - 3):] = 0
        with torch.no_grad():
            vectors, logits = graph(ids, mask)
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        np.testing.assert_allclose(got[0], vectors.numpy(), atol=1e-4)
        np.testing.assert_allclose(got[1], logits.numpy(), atol=1e-4)


def test_onnx_model_encode_and_predict_match_bertkit(model_dir, tmp_path):
    path = export_onnx(model_dir, tmp_path / "onnx" / "model.onnx", "mean", True).path
    assert onnx_file_of(tmp_path / "onnx") == path and onnx_file_of(model_dir) is None
    texts = ["sport goal team", "the bank profit market shares", "film", "a"]
    onnx = OnnxModel(path)
    expected = bertkit.load(model_dir).encode(texts, normalize=True)
    np.testing.assert_allclose(onnx.encode(texts, batch_size=2), expected, atol=1e-5)
    _assert_predictions_equal(onnx.predict(texts), bertkit.load(model_dir).predict(texts))
    with pytest.raises(bertkit.errors.BertkitError):
        onnx.encode(texts, pooling="cls")
    with pytest.raises(bertkit.errors.BertkitError, match="text 1 is empty"):   # Model.encode's rule
        onnx.encode(["film", " "])


def _assert_predictions_equal(got: list[dict], expected: list[dict]) -> None:
    """Same keys and labels; every score to 1e-5 (ONNX Runtime and PyTorch sum in different orders)."""
    assert [sorted(p) for p in got] == [sorted(p) for p in expected]
    for key in ("label", "labels"):
        assert [p.get(key) for p in got] == [p.get(key) for p in expected]
    np.testing.assert_allclose([p["score"] for p in got if "score" in p],
                               [p["score"] for p in expected if "score" in p], atol=1e-5)
    np.testing.assert_allclose([list(p["scores"].values()) for p in got if "scores" in p],
                               [list(p["scores"].values()) for p in expected if "scores" in p], atol=1e-5)


@pytest.mark.parametrize("task,labels", [("regression", []), ("multi-label", ["sport", "business", "arts"])])
def test_onnx_predict_follows_the_folders_task(tmp_path, task, labels):
    """A regression or multi-label export answers as Model.predict does ({score}; {labels} by sigmoid > 0.5),
    not as a softmax classifier (which it did: regression came back as label "0" with score 1.0)."""
    folder = make_model_folder(tmp_path / task)
    checkpoint = load_checkpoint(folder)
    torch.manual_seed(3)
    head = SequenceClassificationHead(checkpoint.config, max(len(labels), 1))
    with torch.no_grad():
        head.linear.weight.normal_(0, 2.0)
    save_checkpoint(folder, checkpoint.encoder, checkpoint.tokenizer, {"classifier": head},
                    {"task": task, "labels": labels})
    path = export_onnx(folder, tmp_path / "onnx" / "model.onnx", "mean", True).path
    texts = ["sport goal team", "the bank profit market shares", "film", "music award star star"]
    expected = bertkit.load(folder).predict(texts)
    if task == "multi-label":       # a real decision: some labels on, some off
        decisions = [label in p["labels"] for p in expected for label in labels]
        assert any(decisions) and not all(decisions)
    _assert_predictions_equal(OnnxModel(path).predict(texts), expected)


def test_export_command_reports_difference(model_dir, tmp_path, capsys):
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(tmp_path / "m.onnx")]) == 0
    assert "max_abs_diff_vs_pytorch" in capsys.readouterr().out
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(tmp_path / "m.bin")]) == 2


def test_predict_and_evaluate_commands_run_an_onnx_export_as_its_source_folder(model_dir, tmp_path, capsys):
    """Issue 17: `bertkit predict` on an export-onnx folder failed (no config.json); bertkit.load read it. The
    export answers as its source folder: same labels, scores to 1e-5, same metrics."""
    data = write_examples(tmp_path / "dev.jsonl")
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(tmp_path / "onnx" / "model.onnx")]) == 0
    assert main(["predict", "--model", str(model_dir), "--input", str(data), "--output", str(tmp_path / "ref.jsonl")]) == 0
    assert main(["evaluate", "--model", str(model_dir), "--input", str(data)]) == 0
    capsys.readouterr()
    expected = [json.loads(line) for line in (tmp_path / "ref.jsonl").read_text().splitlines()]
    for target in (tmp_path / "onnx", tmp_path / "onnx" / "model.onnx"):
        assert main(["predict", "--model", str(target), "--input", str(data), "--output", str(tmp_path / "o.jsonl")]) == 0
        got = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
        assert [(r["line"], r["text"]) for r in got] == [(r["line"], r["text"]) for r in expected]
        _assert_predictions_equal(got, expected)
        capsys.readouterr()
        assert main(["evaluate", "--model", str(target), "--input", str(data)]) == 0
    ref_metrics = evaluate_file(model_dir, data)
    onnx_metrics = json.loads(capsys.readouterr().out)
    assert onnx_metrics.keys() == ref_metrics.keys()
    np.testing.assert_allclose(list(onnx_metrics.values()), list(ref_metrics.values()), atol=1e-6)


def test_an_onnx_export_cuts_long_texts_for_its_head_as_its_source_folder(tmp_path, capsys):
    """User trial: a folder fine-tuned with max_length 128 and long_texts head+tail was exported with the encoder's
    length and plain truncation, so `evaluate` on the export gave another accuracy, silently. The export keeps the
    folder's task options: texts longer than its max_length are cut as the folder cuts them."""
    folder = make_model_folder(tmp_path / "model")
    checkpoint = load_checkpoint(folder)
    torch.manual_seed(3)
    head = SequenceClassificationHead(checkpoint.config, len(LABELS))
    with torch.no_grad():                         # a head whose scores move with the tokens kept
        head.linear.weight.normal_(0, 2.0)
    options = {"max_length": 16, "long_texts": "head+tail", "n_best": 7}
    save_checkpoint(folder, checkpoint.encoder, checkpoint.tokenizer, {"classifier": head},
                    {**checkpoint.meta, "task_options": options})
    onnx_dir = tmp_path / "onnx"
    assert main(["export-onnx", "--model", str(folder), "--output", str(onnx_dir / "model.onnx")]) == 0
    assert read_metadata(onnx_dir / "model.onnx")["task_options"] == load_checkpoint(folder).meta["task_options"]
    texts = [" ".join(WORDS[(5 * i + j) % len(WORDS)] for j in range(20 + 3 * i)) for i in range(6)]  # > 16 tokens
    _assert_predictions_equal(bertkit.load(onnx_dir).predict(texts), bertkit.load(folder).predict(texts))
    data = tmp_path / "long.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": LABELS[i % 3]}) + "\n" for i, t in enumerate(texts)))
    for model, out in ((folder, "ref.jsonl"), (onnx_dir, "onnx.jsonl")):
        assert main(["predict", "--model", str(model), "--input", str(data), "--output", str(tmp_path / out)]) == 0
    got, expected = ([json.loads(line) for line in (tmp_path / out).read_text().splitlines()]
                     for out in ("onnx.jsonl", "ref.jsonl"))
    _assert_predictions_equal(got, expected)
    capsys.readouterr()
    assert main(["evaluate", "--model", str(onnx_dir), "--input", str(data)]) == 0
    onnx_metrics, ref_metrics = json.loads(capsys.readouterr().out), evaluate_file(folder, data)
    assert onnx_metrics.keys() == ref_metrics.keys()
    np.testing.assert_allclose(list(onnx_metrics.values()), list(ref_metrics.values()), atol=1e-6)


def test_encode_command_runs_an_onnx_export_as_its_source_folder(model_dir, tmp_path):
    """`bertkit encode --model <export folder>` crashed ('OnnxModel' object has no attribute 'config')."""
    data = write_examples(tmp_path / "texts.jsonl")
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(tmp_path / "onnx" / "model.onnx")]) == 0
    for model, out in ((model_dir, "ref.npy"), (tmp_path / "onnx", "onnx.npy")):
        assert main(["encode", "--model", str(model), "--input", str(data), "--output", str(tmp_path / out)]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "onnx.npy"), np.load(tmp_path / "ref.npy"), atol=1e-5)
    assert main(["encode", "--model", str(tmp_path / "onnx"), "--input", str(data), "--layers", "sum-last-4",
                 "--output", str(tmp_path / "x.npy")]) == 2


def _set_metadata(path, raw: str) -> None:
    import onnx

    model = onnx.load(str(path))
    for entry in model.metadata_props:
        if entry.key == "bertkit":
            entry.value = raw
    onnx.save(model, str(path))


@pytest.mark.parametrize("raw, message", [
    ("{not json", "its bertkit metadata is not JSON"),
    ("[1, 2]", "its bertkit metadata must be a JSON object, got list"),
    ('{"max_length": "64"}', "metadata max_length must be a whole number >= 3, got '64'"),
    ('{"position_limit": -5}', "metadata position_limit must be a whole number >= 3, got -5"),
    ('{"labels": "abc"}', "metadata labels must be a list of strings"),
])
def test_a_tampered_export_is_one_line_naming_it(model_dir, tmp_path, raw, message):
    """An edited model.onnx gave JSONDecodeError / AttributeError / TypeError tracebacks, or ran with
    max_length -1 and predicted from nothing (an attack trial)."""
    path = export_onnx(model_dir, tmp_path / "onnx" / "model.onnx", "mean", True).path
    _set_metadata(path, raw)
    with pytest.raises(bertkit.api.BertkitError, match=f"model.onnx: {message}"):
        read_metadata(path)


def test_an_export_beside_another_models_tokenizer_is_refused_and_the_first_export_kept(model_dir, tmp_path, capsys):
    """The export is read with the tokenizer in its folder: a second model with another vocabulary exported into
    the folder of a first one would have run with the first model's token ids. Exporting the same model again
    is fine."""
    other = load_checkpoint(model_dir)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *reversed(WORDS), "the", "a"]
    save_checkpoint(tmp_path / "other", other.encoder, Tokenizer.from_vocab({t: i for i, t in enumerate(vocab)}),
                    other.heads, other.meta)
    out = tmp_path / "onnx" / "model.onnx"
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(out)]) == 0
    before = OnnxModel(out).predict(["sport goal team", "bank profit"])
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(out)]) == 0
    capsys.readouterr()
    assert main(["export-onnx", "--model", str(tmp_path / "other"), "--output", str(out)]) == 2
    assert "another model's tokenizer" in capsys.readouterr().err
    assert OnnxModel(out).predict(["sport goal team", "bank profit"]) == before
    assert bertkit.load(model_dir).predict(["sport goal team"])[0]["label"] == before[0]["label"]


@pytest.mark.parametrize("module", ["onnx", "onnxruntime"])
def test_export_without_onnx_or_onnxruntime_is_one_line_and_writes_nothing(model_dir, tmp_path, capsys, monkeypatch,
                                                                           module):
    monkeypatch.setitem(__import__("sys").modules, module, None)        # what `import onnxruntime` fails on
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(tmp_path / "out" / "model.onnx")]) == 2
    assert f"needs {module}: pip install 'bertkit[onnx]'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task, heads, note", [
    ("ner", lambda c: {"token_classifier": TokenClassificationHead(c, 3)}, "holds a 'ner' head, which the ONNX graph "
                                                                          "leaves out"),
    ("pair-classification", lambda c: {"classifier": SequenceClassificationHead(c, 2)}, "takes one text per row"),
    ("classification", lambda c: {"classifier": SequenceClassificationHead(c, 3)}, None)])
def test_export_says_when_the_folders_predictions_are_not_all_in_the_graph(tmp_path, capsys, task, heads, note):
    """An NER folder's export silently held sentence vectors only (its head left out), and a pair classifier's
    graph has no token types; each says so in one line. The outputs are the graph's either way."""
    folder = make_model_folder(tmp_path / task)
    checkpoint = load_checkpoint(folder)
    labels = ["O", "B-X", "I-X"] if task == "ner" else (["no", "yes"] if task.startswith("pair") else LABELS)
    save_checkpoint(folder, checkpoint.encoder, checkpoint.tokenizer, heads(checkpoint.config),
                    {"task": task, "labels": labels})
    assert main(["export-onnx", "--model", str(folder), "--output", str(tmp_path / "onnx" / "model.onnx")]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["outputs"] == (["embeddings"] if task == "ner" else ["embeddings", "logits"])
    assert (note in captured.err) if note else "bertkit:" not in captured.err


@pytest.mark.parametrize("opset, reason", [("9", "scaled_dot_product_attention"), ("99", "99")])
def test_an_opset_the_exporter_cannot_write_is_one_line(model_dir, tmp_path, capsys, opset, reason):
    """--opset 9 was an UnsupportedOperatorError traceback, --opset 99 a RuntimeError one; nothing is left behind."""
    out = tmp_path / "onnx" / "model.onnx"
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(out), "--opset", opset]) == 2
    err = capsys.readouterr().err
    assert f"--opset {opset}: the exporter cannot write this model" in err and reason in err
    assert len(err.strip().splitlines()) == 1 and not list(out.parent.iterdir())


def test_a_normalizing_folder_exports_unnormalized_vectors_with_no_normalize(model_dir, tmp_path, capsys):
    """A folder that normalizes exported normalizing graphs whatever was asked (--normalize could only turn it on),
    while the error for encode(normalize=False) said to export 'without --normalize'."""
    checkpoint = load_checkpoint(model_dir)
    save_checkpoint(model_dir, checkpoint.encoder, checkpoint.tokenizer, checkpoint.heads, checkpoint.meta,
                    sentence=SentencePipeline(SentenceConfig(pooling="mean", normalize=True)))
    texts = ["sport goal team", "bank profit"]
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(tmp_path / "on" / "model.onnx")]) == 0
    with pytest.raises(BertkitError, match="export again with --no-normalize"):
        bertkit.load(tmp_path / "on").encode(texts, normalize=False)
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(tmp_path / "off" / "model.onnx"),
                 "--no-normalize"]) == 0
    np.testing.assert_allclose(bertkit.load(tmp_path / "off").encode(texts, normalize=False),
                               bertkit.load(model_dir).encode(texts, normalize=False), atol=1e-5)


def test_exporting_an_int8_folder_says_the_graph_is_fp32(model_dir, tmp_path, capsys):
    """The export of an int8 folder holds the fp32 weights its int8 weights describe; it said nothing, so a user
    expected int8 speed and size from it."""
    data = write_examples(tmp_path / "dev.jsonl", 6)
    assert main(["quantize", "--model", str(model_dir), "--output", str(tmp_path / "q"), "--dev", str(data),
                 "--max-accuracy-drop", "100", "--min-mean-cosine", "0", "--min-cosine", "0"]) == 0
    capsys.readouterr()
    assert main(["export-onnx", "--model", str(tmp_path / "q"), "--output", str(tmp_path / "onnx" / "model.onnx")]) == 0
    assert "is an int8 folder; the ONNX graph holds the fp32 weights" in capsys.readouterr().err
    texts = ["sport goal team", "the bank profit market shares"]
    assert [p["label"] for p in OnnxModel(tmp_path / "onnx" / "model.onnx").predict(texts)] == \
        [p["label"] for p in bertkit.load(tmp_path / "q").predict(texts)]
