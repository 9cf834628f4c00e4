"""bertkit.load(folder).predict / evaluate_file / predict_file on folders saved by the bertkit.generate jobs
(prompt-based classification, UniLM seq2seq): routed to those jobs' loaders instead of failing."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import bertkit
from bertkit.checkpoints import save_checkpoint
from bertkit.errors import CheckpointError
from bertkit.finetune.classification import examples_from_inputs
from bertkit.finetune.predict import evaluate_file, finetuned_model, predict_file
from bertkit.finetune.prompt.job import label_scores, load_prompt_classifier
from bertkit.finetune.seq2seq.job import Seq2SeqGenerator
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead, SequenceClassificationHead
from bertkit.tokenizer import Tokenizer

WORDS = "it was great terrible good bad movie film the a very not thou art you are".split()


def _save_mlm_folder(folder, meta):
    torch.manual_seed(0)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", ".", *WORDS]
    tokenizer = Tokenizer.from_vocab({t: i for i, t in enumerate(tokens)}, lowercase=True)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=1, num_heads=2,
                           intermediate_size=64, max_position_embeddings=32)
    encoder, head = Encoder(config), MaskedLMHead(config)
    head.apply(encoder._init_weights)
    return save_checkpoint(folder, encoder, tokenizer, {"mlm": head}, meta)


@pytest.fixture(scope="module")
def prompt_folder(tmp_path_factory):
    meta = {"task": "prompt-classification", "labels": ["pos", "neg"], "template": "{text} it was [MASK].",
            "verbalizer": "pos=great,neg=terrible", "ptuning": False, "prompt_token_ids": [], "max_length": 32}
    return _save_mlm_folder(tmp_path_factory.mktemp("prompt") / "model", meta)


@pytest.fixture(scope="module")
def seq2seq_folder(tmp_path_factory):
    return _save_mlm_folder(tmp_path_factory.mktemp("s2s") / "model", {"task": "seq2seq", "max_length": 32})


TEXTS = ["a very good movie", "not a good film", "bad"]


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def test_prompt_classifier_folder_predicts_like_its_loader(prompt_folder):
    predictions = bertkit.load(prompt_folder).predict(TEXTS)
    probabilities = _softmax(label_scores(load_prompt_classifier(prompt_folder), TEXTS))   # (3, 2), pos / neg
    assert [p["label"] for p in predictions] == [["pos", "neg"][i] for i in probabilities.argmax(-1)]
    np.testing.assert_allclose([[p["scores"]["pos"], p["scores"]["neg"]] for p in predictions], probabilities,
                               atol=1e-6)
    np.testing.assert_allclose([p["score"] for p in predictions], probabilities.max(-1), atol=1e-6)


def test_seq2seq_folder_predicts_generated_text(seq2seq_folder):
    predictions = bertkit.load(seq2seq_folder).predict(["thou art good", "you are bad"])
    assert predictions == [{"generated": text} for text in
                           Seq2SeqGenerator(seq2seq_folder).decode(["thou art good", "you are bad"])]


def test_evaluate_and_predict_file_route_to_the_generate_jobs(prompt_folder, seq2seq_folder, tmp_path):
    data = tmp_path / "labeled.jsonl"
    gold = ["pos", "neg", "neg"]
    data.write_text("".join(json.dumps({"text": t, "label": l}) + "\n" for t, l in zip(TEXTS, gold)), encoding="utf-8")
    predicted = label_scores(load_prompt_classifier(prompt_folder), TEXTS).argmax(-1)
    metrics = evaluate_file(prompt_folder, data)
    assert metrics["examples"] == 3
    assert metrics["accuracy"] == pytest.approx(np.mean([["pos", "neg"][i] == g for i, g in zip(predicted, gold)]))
    assert predict_file(prompt_folder, data, tmp_path / "out.jsonl", task="classification") == 3
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    expected = bertkit.load(prompt_folder).predict(TEXTS)
    assert [r["text"] for r in rows] == TEXTS and [r["label"] for r in rows] == [p["label"] for p in expected]
    assert [r["scores"] for r in rows] == [pytest.approx(p["scores"], abs=1e-6) for p in expected]

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"source": "thou art good", "target": "you are good"}) + "\n", encoding="utf-8")
    assert evaluate_file(seq2seq_folder, pairs)["pairs"] == 1
    assert predict_file(seq2seq_folder, pairs, tmp_path / "gen.jsonl") == 1
    row = json.loads((tmp_path / "gen.jsonl").read_text(encoding="utf-8"))
    assert row["generated"] == Seq2SeqGenerator(seq2seq_folder).decode(["thou art good"])[0]
    assert (row["source"], row["target"]) == ("thou art good", "you are good")
    with pytest.raises(CheckpointError, match="seq2seq"):
        evaluate_file(seq2seq_folder, pairs, task="classification")


def test_a_single_text_predicts_the_same_beside_pairs(finetune_model_dir, tmp_path):
    """A text is [CLS] text [SEP] whether or not other inputs of the same call (or file) are pairs; it used to
    gain an empty second segment ([CLS] text [SEP] [SEP]) as soon as one input was a pair, so its prediction
    depended on its neighbours (and differed from the server's)."""
    model = bertkit.load(finetune_model_dir)
    torch.manual_seed(2)
    head = SequenceClassificationHead(model.config, 2)
    with torch.no_grad():
        head.linear.weight.normal_(0, 1.0)
    folder = save_checkpoint(tmp_path / "pair", model.encoder, model.tokenizer, {"classifier": head},
                             {"task": "pair-classification", "labels": ["same", "other"]})
    classifier = bertkit.load(folder)
    together = classifier.predict(["the good movie", ("a film", "is nice")])
    one_by_one = classifier.predict(["the good movie"]) + classifier.predict([("a film", "is nice")])
    for got, expected in zip(together, one_by_one, strict=True):
        assert got["label"] == expected["label"]
        assert got["scores"] == pytest.approx(expected["scores"], abs=1e-6)
    _, task = finetuned_model(folder)
    features = task.encode(examples_from_inputs(["the good movie", ("a film", "is nice")]), quiet=True)
    assert features[0].input_ids == task.encode(examples_from_inputs(["the good movie"]))[0].input_ids
    assert features[0].token_type_ids == [0] * len(features[0].input_ids)


def test_errors_name_the_generate_tasks(prompt_folder, tmp_path):
    with pytest.raises(CheckpointError, match="prompt-classification model"):
        finetuned_model(prompt_folder)
    plain = _save_mlm_folder(tmp_path / "pretrained", {"task": "pretraining"})
    with pytest.raises(CheckpointError, match="seq2seq"):
        bertkit.load(plain).predict(["a good movie"])


def test_predict_refuses_empty_texts_as_the_server_does(finetune_model_dir, tmp_path, capsys):
    """Model.predict([""]) returned a label while serve /predict refused the text (issue 17): empty or
    whitespace-only texts, and pairs with an empty side, are refused naming the text; `bertkit predict` names
    the line."""
    from bertkit.cli import main
    from bertkit.tokenizer.tokenizer import EMPTY_TEXT, InvalidTextError

    model = bertkit.load(finetune_model_dir)
    head = SequenceClassificationHead(model.config, 2)
    folder = save_checkpoint(tmp_path / "cls", model.encoder, model.tokenizer, {"classifier": head},
                             {"task": "pair-classification", "labels": ["a", "b"]})
    classifier = bertkit.load(folder)
    for inputs, index in ([["good", " \t"], 1], [[""], 0], [["good", ("a film", " ")], 1]):
        with pytest.raises(InvalidTextError, match=f"^text {index} .*{EMPTY_TEXT}") as caught:
            classifier.predict(inputs)
        assert caught.value.index == index
    with pytest.raises(InvalidTextError, match=f"text 0 {EMPTY_TEXT}"):
        classifier.predict([""])
    rows = [{"text": "a good film", "text_pair": "a film"}, {"text": "a film", "text_pair": " "}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    code = main(["predict", "--model", str(folder), "--input", str(tmp_path / "in.jsonl"),
                 "--output", str(tmp_path / "out.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "in.jsonl:2: " in err and "empty or whitespace-only text" in err, err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_loaded_model_predicts_where_it_was_loaded(finetune_model_dir, tmp_path, monkeypatch):
    """bertkit.load(dir, device="cpu").predict ran on the GPU when there was one (seen on an H100: the CPU and CUDA
    scores were bit-equal because both ran on CUDA): the head was moved to the automatic device. A loaded model
    stays on its device; a folder path still goes to the automatic one. Here the automatic device is made 'meta',
    where nothing can be computed, so a model moved there fails."""
    from bertkit.finetune import loaded

    model = bertkit.load(finetune_model_dir)
    head = SequenceClassificationHead(model.config, 2)
    folder = save_checkpoint(tmp_path / "cls", model.encoder, model.tokenizer, {"classifier": head},
                             {"task": "classification", "labels": ["a", "b"]})
    expected = bertkit.load(folder, device="cpu").predict(["the good movie", "a film"])
    real = loaded.pick_device
    monkeypatch.setattr(loaded, "pick_device", lambda name=None: real("meta" if name in (None, "auto") else name))
    classifier = bertkit.load(folder, device="cpu")
    assert classifier.predict(["the good movie", "a film"]) == expected
    assert str(next(finetuned_model(classifier)[0].parameters()).device) == "cpu"
    assert str(next(finetuned_model(str(folder))[0].parameters()).device) == "meta"     # a path: the automatic one


def test_predict_reads_a_file_whose_labels_the_model_does_not_know(finetune_model_dir, tmp_path):
    """`bertkit predict --input test.jsonl` on a labelled file holding a label the model never saw (a new class, a
    relabelled set) was a KeyError traceback: the rows were encoded with training targets. predict reads no gold
    label: it predicts every row as it predicts the same file without its labels."""
    from bertkit.cli import main

    model = bertkit.load(finetune_model_dir)
    torch.manual_seed(3)
    head = SequenceClassificationHead(model.config, 2)
    folder = save_checkpoint(tmp_path / "cls", model.encoder, model.tokenizer, {"classifier": head},
                             {"task": "classification", "labels": ["pos", "neg"]})
    texts = ["a very good movie", "not a good film", "bad"]
    labelled, bare = tmp_path / "labelled.jsonl", tmp_path / "bare.jsonl"
    labelled.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n"
                                for t, lab in zip(texts, ["pos", "brand-new", "neg"])), encoding="utf-8")
    bare.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    for name in ("labelled", "bare"):
        assert main(["predict", "--model", str(folder), "--input", str(tmp_path / f"{name}.jsonl"),
                     "--output", str(tmp_path / f"{name}.out.jsonl")]) == 0
    read = [[json.loads(line) for line in (tmp_path / f"{name}.out.jsonl").read_text().splitlines()]
            for name in ("labelled", "bare")]
    expected = [p["label"] for p in bertkit.load(folder).predict(texts)]
    assert read[0] == read[1] and [row["label"] for row in read[0]] == expected
