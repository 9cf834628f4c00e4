"""SiATL's auxiliary MLM loss in fine-tuning: masking of the copy, training with it, gamma 0 = today's run,
refusal without an MLM head, and a saved folder that is the plain task model."""
from __future__ import annotations

import json
import random

import pytest
import torch

from bertkit.job_config import job_config
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main as cli_main
from bertkit.errors import CheckpointError
from bertkit.finetune import FinetuneConfig, evaluate_file, predict, run_finetune
from bertkit.finetune.aux_mlm import BatchMasker
from bertkit.finetune.batching import collate
from bertkit.model.heads import MaskedLMHead
from bertkit.pretrain.masking import IGNORE_INDEX
from bertkit.tokenizer import Tokenizer

FAST = dict(epochs=2, lr=5e-3, batch_size=8, max_length=16, progress_bar=False, warmup_ratio=0.0)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def sentiment_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    words = {"pos": ["good", "great", "fine", "nice"], "neg": ["bad", "awful", "poor", "sad"]}
    return [{"text": f"the {rng.choice(['movie', 'film', 'book'])} was {rng.choice(words[label])}", "label": label}
            for label in (rng.choice(["pos", "neg"]) for _ in range(n))]


@pytest.fixture(scope="module")
def mlm_model_dir(finetune_model_dir, tmp_path_factory):
    """The tiny encoder of conftest plus a random MLM head: a folder as bertkit pretrain writes it."""
    torch.manual_seed(1)
    checkpoint = load_checkpoint(finetune_model_dir)
    folder = tmp_path_factory.mktemp("mlm") / "encoder"
    save_checkpoint(folder, checkpoint.encoder, checkpoint.tokenizer, {"mlm": MaskedLMHead(checkpoint.config)})
    return folder


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    return write_jsonl(folder / "train.jsonl", sentiment_rows(24, 0)), write_jsonl(folder / "dev.jsonl", sentiment_rows(8, 1))


def log_records(output) -> list[dict]:
    lines = (output / "run" / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "loss" in r]


def test_masked_copy_never_touches_specials_or_padding(mlm_model_dir):
    tokenizer = Tokenizer.from_folder(mlm_model_dir)
    encoded = tokenizer.encode_batch(["the movie was good " * 4, "bad"], max_length=24)
    features = [type("F", (), {"input_ids": ids, "token_type_ids": types})()
                for ids, types in zip(encoded.input_ids, encoded.token_type_ids)]
    batch = collate(features, [0, 1], tokenizer.pad_id, lambda f, n: None)
    masker = BatchMasker(tokenizer, weight=0.5, decay=0.5, seed=3)
    copy = masker(batch, epoch=1)
    assert copy.weight == 0.25                                   # gamma x decay ** epoch
    special = torch.tensor(sorted(tokenizer.special_ids))
    untouched = torch.isin(batch.input_ids, special) | (batch.attention_mask == 0)
    assert torch.equal(copy.input_ids[untouched], batch.input_ids[untouched])
    assert (copy.labels[untouched] == IGNORE_INDEX).all()
    predicted = copy.labels != IGNORE_INDEX
    assert predicted.sum(1).tolist() == [2, 1]                   # 15% of 16 tokens, at least one per row
    assert torch.equal(copy.labels[predicted], batch.input_ids[predicted])
    assert torch.equal(masker(batch, epoch=1).input_ids, copy.input_ids)      # a function of (seed, epoch, row)


def test_aux_mlm_trains_logs_and_saves_the_plain_task_model(mlm_model_dir, data, tmp_path):
    train, dev = data
    out = tmp_path / "siatl"
    result = run_finetune(job_config(FinetuneConfig, task="classification", model=str(mlm_model_dir), train=str(train),
                                         dev=str(dev), output=str(out), aux_mlm_weight=0.5, aux_mlm_decay=0.5,
                                         **{**FAST, "batch_size": 4}))   # 6 steps an epoch: steps 1 and 10 logged
    records = log_records(out)
    assert records and all({"aux_mlm_loss", "task_loss", "aux_mlm_weight"} <= set(r) for r in records)
    for r in records:
        assert r["loss"] == pytest.approx(r["task_loss"] + r["aux_mlm_weight"] * r["aux_mlm_loss"], rel=1e-5)
        assert r["aux_mlm_loss"] > 0
    assert {r["aux_mlm_weight"] for r in records} == {0.5, 0.25}  # decayed in the second epoch
    # the saved folder is the task model only, and reloads for evaluate / predict
    saved = load_checkpoint(out)
    assert set(saved.heads) == {"classifier"}
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForSequenceClassification"]
    assert evaluate_file(out, dev)["accuracy"] == pytest.approx(result.metrics["accuracy"])
    assert set(predict(str(out), ["the film was great"])[0]["scores"]) == {"neg", "pos"}
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    ids = torch.tensor([[saved.tokenizer.cls_id] + [saved.tokenizer.token_to_id(w) for w in "the film was great".split()]
                        + [saved.tokenizer.sep_id]])
    with torch.no_grad():
        pooled = saved.encoder(ids).pooled_output
        torch.testing.assert_close(hf(input_ids=ids).logits, saved.heads["classifier"](pooled), atol=1e-5, rtol=1e-5)


def test_aux_mlm_works_for_ner_through_the_cli(mlm_model_dir, tmp_path, capsys):
    rows = [{"tokens": ["alice", "went", "to", "paris"], "tags": ["B-PER", "O", "O", "B-LOC"]},
            {"tokens": ["bob", "lives", "in", "london"], "tags": ["B-PER", "O", "O", "B-LOC"]}] * 4
    train = write_jsonl(tmp_path / "ner.jsonl", rows)
    code = cli_main(["finetune", "--task", "ner", "--model", str(mlm_model_dir), "--train", str(train),
                     "--output", str(tmp_path / "ner"), "--epochs", "1", "--batch-size", "4", "--max-length", "12",
                     "--aux-mlm-weight", "0.3", "--progress_bar=false"])
    assert code == 0
    assert all(r["aux_mlm_weight"] == pytest.approx(0.3) for r in log_records(tmp_path / "ner"))
    assert set(load_checkpoint(tmp_path / "ner").heads) == {"token_classifier"}


def test_gamma_zero_is_exactly_the_run_without_the_option(mlm_model_dir, data, tmp_path):
    train, dev = data
    runs = {}
    for name, extra in (("plain", {}), ("zero", {"aux_mlm_weight": 0.0})):
        out = tmp_path / name
        run_finetune(job_config(FinetuneConfig, task="classification", model=str(mlm_model_dir), train=str(train),
                                    dev=str(dev), output=str(out), **FAST, **extra))
        runs[name] = ([r["loss"] for r in log_records(out)], load_checkpoint(out).encoder.state_dict())
        assert not any("aux_mlm_loss" in r for r in log_records(out))
    assert runs["plain"][0] == runs["zero"][0]
    assert all(torch.equal(runs["plain"][1][k], runs["zero"][1][k]) for k in runs["plain"][1])


def test_folder_without_mlm_head_is_refused(finetune_model_dir, data, tmp_path):
    train, _ = data
    with pytest.raises(CheckpointError, match="needs a model folder with an MLM head") as err:
        run_finetune(job_config(FinetuneConfig, task="classification", model=str(finetune_model_dir), train=str(train),
                                    output=str(tmp_path / "m"), aux_mlm_weight=0.5, **FAST))
    assert str(finetune_model_dir) in str(err.value)
    assert not (tmp_path / "m").exists()                        # refused before any work
