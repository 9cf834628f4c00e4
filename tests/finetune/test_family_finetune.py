"""`bertkit finetune` on ELECTRA and XLNet folders: the family's head learns a planted keyword signal, and the
saved folder is the family's HF ForSequenceClassification class with the same logits in transformers."""
from __future__ import annotations

import json
import random

import pytest
import torch

import bertkit
from bertkit.job_config import job_config
from bertkit.checkpoints import load_checkpoint
from bertkit.cli import main
from bertkit.errors import CheckpointError
from bertkit.finetune import FinetuneConfig, run_finetune
from bertkit.finetune.model import model_from_checkpoint
from bertkit.model.heads import MlpClassificationHead, SummaryClassificationHead

WORDS = {"pos": ["good", "great", "fine"], "neg": ["bad", "awful", "poor"]}


def rows(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        label = rng.choice(["pos", "neg"])
        out.append({"text": f"the {rng.choice(['movie', 'film'])} was {rng.choice(WORDS[label])}", "label": label})
    return out


def write(path, data):
    path.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="utf-8")
    return str(path)


def electra_folder(path):
    from transformers import ElectraConfig, ElectraModel

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghijklmnopqrstuvwxyz")
    vocab += ["the", "movie", "film", "was"] + WORDS["pos"] + WORDS["neg"]
    torch.manual_seed(0)
    ElectraModel(ElectraConfig(vocab_size=len(vocab), embedding_size=16, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64, max_position_embeddings=40)).save_pretrained(
        str(path))
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("family", ["electra", "xlnet"])
def test_finetune_learns_and_saves_the_family_class(family, tmp_path, make_xlnet_folder, xlnet_vocab):
    import transformers

    if family == "electra":
        source = electra_folder(tmp_path / "base")
        expected_class, head_class = "ElectraForSequenceClassification", MlpClassificationHead
    else:
        source = tmp_path / "base"
        make_xlnet_folder("XLNetModel", source, tokenizer="spiece", dropout=0.0)
        expected_class, head_class = "XLNetForSequenceClassification", SummaryClassificationHead
    train, dev = write(tmp_path / "train.jsonl", rows(96, 0)), write(tmp_path / "dev.jsonl", rows(40, 1))
    out = tmp_path / "cls"
    assert main(["finetune", "--task", "classification", "--model", str(source), "--train", train, "--dev", dev,
                 "--output", str(out), "--epochs", "12", "--lr", "3e-3", "--batch-size", "16", "--max-length", "16",
                 "--warmup-ratio", "0"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())["dev"]
    assert metrics["accuracy"] >= 0.95                    # a keyword signal; chance is 0.5
    assert json.loads((out / "config.json").read_text())["architectures"] == [expected_class]

    checkpoint = load_checkpoint(out)
    net = model_from_checkpoint(checkpoint, "classification").eval()
    assert isinstance(net.head, head_class)
    texts = [r["text"] for r in rows(6, 2)]
    if family == "electra":
        reference_tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    else:
        reference_tokenizer = transformers.XLNetTokenizer(vocab=xlnet_vocab)      # left padding, segments
    inputs = reference_tokenizer(texts, padding=True, return_tensors="pt", return_token_type_ids=True)
    with torch.no_grad():
        expected = getattr(transformers, expected_class).from_pretrained(str(out)).eval()(**inputs).logits
        ours = net(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
    assert (ours - expected).abs().max() <= 1e-4
    # predictions through the API agree with transformers' argmax
    labels = [p["label"] for p in bertkit.load(out).predict(texts)]
    assert labels == [net.label_names[i] for i in expected.argmax(-1).tolist()]


def test_xlnet_refuses_token_and_span_tasks(tmp_path, make_xlnet_folder):
    make_xlnet_folder("XLNetModel", tmp_path / "x")
    config = job_config(FinetuneConfig, task="ner", model=str(tmp_path / "x"), train=str(tmp_path / "none.jsonl"),
                            output=str(tmp_path / "out"))
    with pytest.raises(CheckpointError, match="XLNet model; bertkit fine-tunes XLNet for classification"):
        run_finetune(config)


def test_electra_ner_saves_token_classification_that_transformers_runs(tmp_path):
    import transformers

    source = electra_folder(tmp_path / "base")
    tagged = [{"tokens": ["the", "movie", "was", word], "tags": ["O", "B-X", "O", "B-Y"]}
              for word in WORDS["pos"] + WORDS["neg"]]
    train = write(tmp_path / "ner.jsonl", tagged)
    out = tmp_path / "ner"
    assert main(["finetune", "--task", "ner", "--model", str(source), "--train", train, "--output", str(out),
                 "--epochs", "1", "--batch-size", "4", "--max-length", "16"]) == 0
    assert json.loads((out / "config.json").read_text())["architectures"] == ["ElectraForTokenClassification"]
    net = model_from_checkpoint(load_checkpoint(out), "ner").eval()
    inputs = transformers.AutoTokenizer.from_pretrained(str(out))(["the film was awful", "good"], padding=True,
                                                                  return_tensors="pt")
    with torch.no_grad():
        expected = transformers.ElectraForTokenClassification.from_pretrained(str(out)).eval()(**inputs).logits
        ours = net(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
    assert (ours - expected).abs().max() <= 1e-4
