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
from bertkit.finetune.predict import evaluate_file, finetuned_model, predict_file
from bertkit.generate.prompt_job import label_scores, load_prompt_classifier
from bertkit.generate.seq2seq_job import Seq2SeqGenerator
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead
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


def test_prompt_classifier_folder_predicts_like_its_loader(prompt_folder):
    predictions = bertkit.load(prompt_folder).predict(TEXTS)
    expected = label_scores(load_prompt_classifier(prompt_folder), TEXTS).argmax(axis=-1)
    assert [p["label"] for p in predictions] == [["pos", "neg"][i] for i in expected]
    for p in predictions:
        assert set(p["scores"]) == {"pos", "neg"}
        assert np.isclose(sum(p["scores"].values()), 1.0) and p["score"] == max(p["scores"].values())


def test_seq2seq_folder_predicts_generated_text(seq2seq_folder):
    predictions = bertkit.load(seq2seq_folder).predict(["thou art good", "you are bad"])
    assert predictions == [{"generated": text} for text in
                           Seq2SeqGenerator(seq2seq_folder).decode(["thou art good", "you are bad"])]


def test_evaluate_and_predict_file_route_to_the_generate_jobs(prompt_folder, seq2seq_folder, tmp_path):
    data = tmp_path / "labeled.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": l}) + "\n"
                            for t, l in zip(TEXTS, ["pos", "neg", "neg"])), encoding="utf-8")
    metrics = evaluate_file(prompt_folder, data)
    assert metrics["examples"] == 3 and 0.0 <= metrics["accuracy"] <= 1.0
    assert predict_file(prompt_folder, data, tmp_path / "out.jsonl", task="classification") == 3
    assert json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])["label"] in ("pos", "neg")

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"source": "thou art good", "target": "you are good"}) + "\n", encoding="utf-8")
    assert evaluate_file(seq2seq_folder, pairs)["pairs"] == 1
    assert predict_file(seq2seq_folder, pairs, tmp_path / "gen.jsonl") == 1
    assert "generated" in json.loads((tmp_path / "gen.jsonl").read_text())
    with pytest.raises(CheckpointError, match="seq2seq"):
        evaluate_file(seq2seq_folder, pairs, task="classification")


def test_errors_name_the_generate_tasks(prompt_folder, tmp_path):
    with pytest.raises(CheckpointError, match="prompt-classification model"):
        finetuned_model(prompt_folder)
    plain = _save_mlm_folder(tmp_path / "pretrained", {"task": "pretraining"})
    with pytest.raises(CheckpointError, match="seq2seq"):
        bertkit.load(plain).predict(["a good movie"])
