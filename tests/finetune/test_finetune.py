"""End-to-end fine-tuning on tiny in-code data: classification, NER and QA train, evaluate, predict, reload."""
from __future__ import annotations

import json
import random

import pytest
import torch
from scipy import stats

from bertkit.job_config import job_config
from bertkit.checkpoints import load_checkpoint
from bertkit.cli import main as cli_main
from bertkit.data.ner_readers import TaggedSentence
from bertkit.data.squad import Answer, QAExample
from bertkit.errors import BertkitError, CheckpointError
from bertkit.finetune import FinetuneConfig, evaluate_file, predict, predict_file, run_finetune
from bertkit.finetune.ner import NERTask
from bertkit.finetune.qa import QATask
from bertkit.tokenizer import Tokenizer
from bertkit.tokenizer.tokenizer import InvalidTextError

FAST = dict(epochs=12, lr=5e-3, batch_size=16, max_length=24, progress_bar=False, warmup_ratio=0.0,
            early_stopping_patience=0)


def sentiment_rows(n: int = 64, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    words = {"pos": ["good", "great", "fine", "nice"], "neg": ["bad", "awful", "poor", "sad"]}
    rows = []
    for _ in range(n):
        label = rng.choice(["pos", "neg"])
        rows.append({"text": f"the {rng.choice(['movie', 'film', 'book'])} was {rng.choice(words[label])}",
                     "label": label})
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def classifier_dir(finetune_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cls")
    train = write_jsonl(folder / "train.jsonl", sentiment_rows(64, 0))
    dev = write_jsonl(folder / "dev.jsonl", sentiment_rows(24, 1))
    result = run_finetune(job_config(FinetuneConfig, task="classification", model=str(finetune_model_dir), train=str(train),
                                         dev=str(dev), output=str(folder / "model"), **FAST))
    return result


def test_classification_trains_evaluates_and_records_the_run(classifier_dir):
    result = classifier_dir
    assert result.metrics["accuracy"] >= 0.9
    out = result.output
    assert {"config.json", "model.safetensors", "bertkit.json", "metrics.json", "vocab.txt"} <= {p.name for p in out.iterdir()}
    assert {"config.effective.json", "versions.json", "log.jsonl"} <= {p.name for p in (out / "run").iterdir()}
    meta = json.loads((out / "bertkit.json").read_text())
    assert meta["task"] == "classification" and meta["labels"] == ["neg", "pos"]
    assert json.loads((out / "metrics.json").read_text())["dev"]["accuracy"] == result.metrics["accuracy"]
    dev = out.parent / "dev.jsonl"
    assert evaluate_file(out, dev)["accuracy"] == pytest.approx(result.metrics["accuracy"])
    predictions = predict(str(out), ["the film was great", "the book was awful"])
    assert [p["label"] for p in predictions] == ["pos", "neg"]
    assert set(predictions[0]["scores"]) == {"neg", "pos"}


def test_reloaded_classifier_matches_transformers(classifier_dir):
    transformers = pytest.importorskip("transformers")
    out = classifier_dir.output
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert hf.config.id2label == {0: "neg", 1: "pos"}
    ours = predict(str(out), ["the movie was nice", "the movie was sad"])
    tokenizer = Tokenizer.from_folder(out)
    batch = tokenizer.pad_to_tensors(tokenizer.encode_batch(["the movie was nice", "the movie was sad"]))
    with torch.no_grad():
        logits = hf(**batch).logits
    probs = torch.softmax(logits, -1)
    for row, prediction in zip(probs, ours):
        assert row[1].item() == pytest.approx(prediction["scores"]["pos"], abs=1e-5)


def test_head_and_label_mismatches_fail_clearly(classifier_dir, tmp_path):
    out = classifier_dir.output
    with pytest.raises(CheckpointError, match="fine-tuned for 'classification', not 'ner'"):
        evaluate_file(out, out.parent / "dev.jsonl", task="ner")
    rows = [{"text": "the movie was good", "label": x} for x in ("a", "b", "c")]
    train = write_jsonl(tmp_path / "three.jsonl", rows)
    with pytest.raises(CheckpointError, match="predicts 2 labels"):
        run_finetune(job_config(FinetuneConfig, task="classification", model=str(out), train=str(train),
                                    output=str(tmp_path / "m"), **FAST))
    with pytest.raises(CheckpointError, match="not 'ner'"):
        run_finetune(job_config(FinetuneConfig, task="ner", model=str(out), train=str(train), output=str(tmp_path / "m"),
                                    **FAST))


def test_cli_finetune_evaluate_predict_for_regression_pairs(finetune_model_dir, tmp_path, capsys):
    rng = random.Random(0)
    rows = [{"text": "the movie", "text_pair": f"was {w}", "label": s}
            for w, s in [("good", 4.0), ("bad", 0.5), ("fine", 3.0), ("sad", 1.0)] * 6]
    rng.shuffle(rows)
    train = write_jsonl(tmp_path / "sts.jsonl", rows)
    code = cli_main(["finetune", "--task", "regression", "--model", str(finetune_model_dir), "--train", str(train),
                     "--dev", str(train), "--output", str(tmp_path / "reg"), "--epochs", "3", "--lr", "3e-3",
                     "--batch-size", "8", "--max-length", "16", "--seed", "1", "--progress_bar=false",
                     # fp32: dev is scored during training in the training precision and compared with evaluate's
                     # fp32 below; the tiny model's near-equal scores reorder under bf16 (spearman 0.45 vs -0.8)
                     "--precision=fp32"])
    assert code == 0
    dev = json.loads(capsys.readouterr().out)["dev"]
    assert cli_main(["evaluate", "--model", str(tmp_path / "reg"), "--input", str(train)]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert cli_main(["predict", "--model", str(tmp_path / "reg"), "--input", str(train),
                     "--output", str(tmp_path / "p.jsonl")]) == 0
    written = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [(r["text"], r["text_pair"]) for r in written] == [(r["text"], r["text_pair"]) for r in rows]
    # the file's scores are Model.predict's, and the metrics are those scores against the gold ones (scipy)
    offline = predict(str(tmp_path / "reg"), [(r["text"], r["text_pair"]) for r in rows])
    assert [r["score"] for r in written] == pytest.approx([p["score"] for p in offline], abs=1e-6)
    scores, gold = [r["score"] for r in written], [r["label"] for r in rows]
    assert evaluated["pearson"] == pytest.approx(stats.pearsonr(scores, gold)[0], abs=1e-5)
    assert evaluated["spearman"] == pytest.approx(stats.spearmanr(scores, gold)[0], abs=1e-5)
    assert dev["spearman"] == pytest.approx(evaluated["spearman"], abs=1e-5)     # the saved model is the best
    assert cli_main(["finetune", "--task", "regression", "--model", str(finetune_model_dir), "--train",
                     str(tmp_path / "missing.jsonl"), "--output", str(tmp_path / "x"), "--max-length", "16"]) == 2
    assert "missing.jsonl: file not found" in capsys.readouterr().err


# --- NER --------------------------------------------------------------------------------------------------

def ner_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        tokens, tags = [], []
        for _ in range(rng.randint(2, 4)):
            kind = rng.choice(["PER", "LOC", "O"])
            if kind == "PER":
                tokens += list("江泽民")
                tags += ["B-PER", "I-PER", "I-PER"]
            elif kind == "LOC":
                tokens += list(rng.choice(["北京", "上海", "中国"]))
                tags += ["B-LOC", "I-LOC"]
            else:
                tokens += list(rng.choice(["我爱", "在", "人民日报"]))
                tags += ["O"] * (len(tokens) - len(tags))
        rows.append({"tokens": tokens, "tags": tags})
    return rows


def test_ner_trains_with_windows_and_reloads_in_transformers(finetune_model_dir, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", ner_rows(48, 0))
    long_row = {"tokens": list("我爱北京江泽民在上海" * 3), "tags": (["O", "O", "B-LOC", "I-LOC", "B-PER", "I-PER", "I-PER",
                                                                  "O", "B-LOC", "I-LOC"] * 3)}
    dev = write_jsonl(tmp_path / "dev.jsonl", ner_rows(12, 1) + [long_row])
    result = run_finetune(job_config(FinetuneConfig, task="ner", model=str(finetune_model_dir), train=str(train), dev=str(dev),
                                         output=str(tmp_path / "ner"), **{**FAST, "epochs": 8, "max_length": 16}))
    assert result.metrics["f1"] > 0.5
    # entity F1 per type, counted by hand from the saved model's tags for the dev file (seqeval's BIO rules)
    predict_file(tmp_path / "ner", dev, tmp_path / "tags.jsonl")
    predicted = [json.loads(line)["tags"] for line in (tmp_path / "tags.jsonl").read_text().splitlines()]
    gold = [json.loads(line)["tags"] for line in dev.read_text(encoding="utf-8").splitlines()]
    for kind in ("PER", "LOC"):
        assert result.metrics[f"{kind}_f1"] == pytest.approx(_entity_f1(gold, predicted, kind), abs=1e-9)
    with pytest.raises(InvalidTextError, match="^text 1 is empty"):   # refused, as the server refuses it
        predict(str(tmp_path / "ner"), ["我爱北京", ""])
    found = predict(str(tmp_path / "ner"), ["我爱北京"])
    for entity in found[0]["entities"]:
        assert "我爱北京"[entity["start"]:entity["end"]] == entity["text"]
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path / "ner").eval()
    checkpoint = load_checkpoint(tmp_path / "ner")
    ids = torch.tensor([[2] + [checkpoint.tokenizer.token_to_id(c) for c in "我爱北京"] + [3]])
    with torch.no_grad():
        ours = checkpoint.heads["token_classifier"](checkpoint.encoder(ids).last_hidden_state)
        torch.testing.assert_close(hf(input_ids=ids).logits, ours, atol=1e-5, rtol=1e-5)


def _bio_spans(tags: list[str], kind: str) -> set[tuple[int, int]]:
    """(start, end) of each `kind` entity: B- starts one, I- continues one of its type or starts one (seqeval)."""
    spans, start = set(), None
    for i, tag in enumerate([*tags, "O"]):
        continues = tag == f"I-{kind}" and start is not None
        if start is not None and not continues:
            spans.add((start, i))
            start = None
        if tag == f"B-{kind}" or (tag == f"I-{kind}" and start is None):
            start = i
    return spans


def _entity_f1(gold: list[list[str]], predicted: list[list[str]], kind: str) -> float:
    g = {(n, *s) for n, tags in enumerate(gold) for s in _bio_spans(tags, kind)}
    p = {(n, *s) for n, tags in enumerate(predicted) for s in _bio_spans(tags, kind)}
    hits = len(g & p)
    return 2 * hits / (len(g) + len(p)) if g or p else 0.0


def test_ner_long_sentence_becomes_overlapping_windows(finetune_model_dir):
    tokenizer = Tokenizer.from_folder(finetune_model_dir)
    task = NERTask(tokenizer, ["O", "B-PER", "I-PER"], max_length=8, stride=2)
    sentence = TaggedSentence(list("江泽民我爱北京上海中国"), ["B-PER", "I-PER", "I-PER"] + ["O"] * 8, 1)
    features = task.encode([sentence])
    assert len(features) > 1 and all(len(f.input_ids) <= 8 for f in features)
    covered = {w for f in features for w in f.word_ids if w >= 0}
    assert covered == set(range(11))
    assert features[0].labels[1:4] == [1, 2, 2]


# --- QA ---------------------------------------------------------------------------------------------------

QA_FACTS = [("alice", "paris"), ("bob", "london"), ("john", "new york")]


def squad_file(path, n: int, seed: int):
    rng = random.Random(seed)
    paragraphs = []
    for i in range(n):
        facts = QA_FACTS[:]
        rng.shuffle(facts)
        context = " ".join(f"{who} went to {where} ." for who, where in facts)
        who, where = rng.choice(facts)
        paragraphs.append({"context": context, "qas": [{"id": f"q{i}", "question": f"where {who} went to ?",
                                                        "answers": [{"text": where,
                                                                     "answer_start": context.index(f"{who} went to {where}") + len(f"{who} went to ")}]}]})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))
    return path


def test_qa_trains_decodes_char_offsets_and_reloads_in_transformers(finetune_model_dir, tmp_path):
    train, dev = squad_file(tmp_path / "train.json", 64, 0), squad_file(tmp_path / "dev.json", 16, 1)
    result = run_finetune(job_config(FinetuneConfig, task="qa", model=str(finetune_model_dir), train=str(train), dev=str(dev),
                                         output=str(tmp_path / "qa"), **{**FAST, "max_length": 32, "epochs": 4}))
    context = "alice went to paris . bob went to london ."
    answer = predict(str(tmp_path / "qa"), [("where bob went to ?", context)])[0]
    assert context[answer["start"]:answer["end"]] == answer["answer"]
    predict_file(tmp_path / "qa", dev, tmp_path / "answers.jsonl")
    answers = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    paragraphs = json.loads(dev.read_text())["data"][0]["paragraphs"]
    assert [a["question"] for a in answers] == [p["qas"][0]["question"] for p in paragraphs]
    # exact match recounted from the saved model's answers (lower-case single words: no normalization needed)
    golds = [p["qas"][0]["answers"][0]["text"] for p in paragraphs]
    assert result.metrics["exact_match"] == pytest.approx(
        100 * sum(a["answer"] == g for a, g in zip(answers, golds)) / len(golds), abs=1e-9)
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForQuestionAnswering.from_pretrained(tmp_path / "qa").eval()
    checkpoint = load_checkpoint(tmp_path / "qa")
    encoded = checkpoint.tokenizer.encode_batch(["where bob went to ?"], [context])
    batch = checkpoint.tokenizer.pad_to_tensors(encoded)
    with torch.no_grad():
        start, end = checkpoint.heads["qa"](checkpoint.encoder(batch["input_ids"], batch["attention_mask"],
                                                                batch["token_type_ids"]).last_hidden_state)
        out = hf(**batch)
    torch.testing.assert_close(out.start_logits, start, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.end_logits, end, atol=1e-5, rtol=1e-5)


def test_qa_doc_stride_windows_keep_the_answer_and_v2_no_answer(finetune_model_dir):
    tokenizer = Tokenizer.from_folder(finetune_model_dir)
    context = "alice went to paris . " * 6 + "bob went to london ."
    start = context.index("london")
    example = QAExample("q", "where bob went to ?", context, (Answer("london", start),), False)
    task = QATask(tokenizer, max_length=24, doc_stride=6, max_question_length=8)
    features = task.encode([example])
    assert len(features) > 2 and all(len(f.input_ids) <= 24 for f in features)
    hits = [f for f in features if f.start_position > 0]
    assert hits and all(context[f.context_offsets[f.start_position][0]:f.context_offsets[f.end_position][1]]
                        == "london" for f in hits)
    impossible = QAExample("q2", "who ?", "alice went to paris .", (), True)
    assert all(f.start_position == 0 for f in task.encode([impossible]))
    with pytest.raises(BertkitError, match="leaves no room"):
        QATask(tokenizer, max_length=4)


def test_bad_task_inputs(finetune_model_dir, tmp_path):
    train = write_jsonl(tmp_path / "t.jsonl", [{"text": "a", "label": "x"}])
    with pytest.raises(BertkitError, match="text_pair"):
        run_finetune(job_config(FinetuneConfig, task="pair-classification", model=str(finetune_model_dir), train=str(train),
                                    output=str(tmp_path / "o"), **FAST))
    with pytest.raises(BertkitError, match="max-length"):
        run_finetune(job_config(FinetuneConfig, task="classification", model=str(finetune_model_dir), train=str(train),
                                    output=str(tmp_path / "o"), **{**FAST, "max_length": 4096}))


def test_ner_training_data_without_any_entity_is_one_error_naming_the_file(finetune_model_dir, tmp_path):
    """All-O tags give a tagger nothing to learn, as one label gives a classifier nothing (check_training_labels)."""
    train = write_jsonl(tmp_path / "t.jsonl", [{"tokens": ["the", "cat"], "tags": ["O", "O"]},
                                               {"tokens": ["a", "dog"], "tags": ["O", "O"]}])
    with pytest.raises(BertkitError, match=r"t.jsonl: all 2 sentences \(lines 1-2\) are tagged O: ner needs entities"):
        run_finetune(job_config(FinetuneConfig, task="ner", model=str(finetune_model_dir), train=str(train),
                                output=str(tmp_path / "o"), **FAST))
    assert not (tmp_path / "o").exists()
