"""`bertkit predict` on a NER folder with raw text: .txt lines or {"text": ...} JSONL rows (issue 17).

They were read as CoNLL (a sentence line became token "john" tagged "paris") and the error suggested
--skip-bad-rows, which predict does not have. Raw text is now split into words exactly as
`bertkit.load(folder).predict(texts)` splits it (bertkit.finetune.ner.split_words), so the reference is
that API call; CoNLL in a .txt file is still read as CoNLL.
"""
from __future__ import annotations

import json
import random

import pytest

from bertkit.job_config import job_config
from bertkit.cli import main
from bertkit.finetune.job import FinetuneConfig, run_finetune
from bertkit.finetune.ner import split_words
from bertkit.finetune.predict import predict, predict_file

TEXTS = ["john smith lives in paris", "alice went to new york", "bob is in london", "我爱北京"]


def _ner_rows(n: int) -> list[dict]:
    rng = random.Random(0)
    people, places = [["john", "smith"], ["alice"], ["bob"]], [["paris"], ["london"], ["new", "york"]]
    rows = []
    for _ in range(n):
        person, place = rng.choice(people), rng.choice(places)
        rows.append({"tokens": person + ["lives", "in"] + place,
                     "tags": ["B-PER"] + ["I-PER"] * (len(person) - 1) + ["O", "O", "B-LOC"] + ["I-LOC"] * (len(place) - 1)})
    return rows


@pytest.fixture(scope="module")
def ner_folder(finetune_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ner")
    train = folder / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in _ner_rows(32)), encoding="utf-8")
    run_finetune(job_config(FinetuneConfig, task="ner", model=str(finetune_model_dir), train=str(train), output=str(folder / "m"),
                                epochs=3, lr=5e-3, batch_size=16, max_length=24, progress_bar=False,
                                warmup_ratio=0.0, early_stopping_patience=0))
    return folder / "m"


@pytest.fixture(scope="module")
def classifier_folder(finetune_model_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cls")
    train = folder / "train.jsonl"
    rows = [{"text": " ".join(r["tokens"]), "label": "far" if "london" in r["tokens"] else "near"} for r in _ner_rows(16)]
    train.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run_finetune(job_config(FinetuneConfig, task="classification", model=str(finetune_model_dir), train=str(train),
                                output=str(folder / "m"), epochs=1, batch_size=16, max_length=24, progress_bar=False,
                                early_stopping_patience=0, baseline=False))
    return folder / "m"


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("kind", ["txt", "jsonl"])
def test_predict_file_on_raw_text_matches_predict_on_the_texts(ner_folder, tmp_path, kind):
    source = tmp_path / f"in.{kind}"
    lines = TEXTS if kind == "txt" else [json.dumps({"text": t, "id": i}, ensure_ascii=False) for i, t in enumerate(TEXTS)]
    # a blank line: in JSONL it is no row (skipped, as encode skips it); in .txt every line is a text, so a blank
    # one is an empty text, refused naming its line as `bertkit encode` refuses it (one rule for empty texts)
    source.write_text("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n", encoding="utf-8")
    if kind == "txt":
        assert main(["predict", "--model", str(ner_folder), "--input", str(source), "--output",
                     str(tmp_path / "o.jsonl")]) == 2
        assert not (tmp_path / "o.jsonl").exists()
        source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["predict", "--model", str(ner_folder), "--input", str(source), "--output", str(tmp_path / "o.jsonl")]) == 0
    rows = _rows(tmp_path / "o.jsonl")
    expected = predict(str(ner_folder), TEXTS)
    assert [row["text"] for row in rows] == TEXTS
    assert [row["line"] for row in rows] == ([1, 2, 3, 4] if kind == "txt" else [1, 2, 4, 5])
    for row, want in zip(rows, expected):
        assert (row["tokens"], row["tags"], row["entities"]) == (want["tokens"], want["tags"], want["entities"])
    assert rows[0]["tokens"] == ["john", "smith", "lives", "in", "paris"]   # whitespace words
    assert rows[3]["tokens"] == list("我爱北京")                            # Chinese: one character per word


def test_conll_in_a_txt_file_is_still_read_as_conll(ner_folder, tmp_path):
    conll = "john B-PER\nsmith I-PER\nlives O\nin O\nparis B-LOC\n\nbob B-PER\nis O\nin O\nlondon B-LOC\n"
    (tmp_path / "a.conll").write_text(conll, encoding="utf-8")
    (tmp_path / "a.txt").write_text(conll, encoding="utf-8")
    predict_file(ner_folder, tmp_path / "a.conll", tmp_path / "c.jsonl")
    predict_file(ner_folder, tmp_path / "a.txt", tmp_path / "t.jsonl")
    assert _rows(tmp_path / "t.jsonl") == _rows(tmp_path / "c.jsonl")
    assert [row["tokens"] for row in _rows(tmp_path / "t.jsonl")] == [conll.split()[0:10:2], conll.split()[10::2]]


def test_a_jsonl_row_without_text_names_the_line_and_no_missing_flag(ner_folder, tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "bob is in london"}\n{"body": "no text here"}\n', encoding="utf-8")
    assert main(["predict", "--model", str(ner_folder), "--input", str(source), "--output", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"{source}:2" in err and "missing text" in err and "--skip-bad-rows" not in err


@pytest.mark.parametrize("task", ["ner", "classification"])
def test_a_blank_txt_line_is_refused_by_predict_as_by_encode(task, ner_folder, classifier_folder, tmp_path, capsys):
    """One rule for empty texts (issue 17): `bertkit encode` refuses a blank .txt line naming it; predict did
    skip it silently (so output row N was not input line N)."""
    folder = ner_folder if task == "ner" else classifier_folder
    source = tmp_path / "in.txt"
    source.write_text("john smith lives in paris\n   \nbob is in london\n", encoding="utf-8")
    assert main(["encode", "--model", str(folder), "--input", str(source), "--output", str(tmp_path / "v.npy")]) == 2
    encode_error = capsys.readouterr().err
    assert "line 2" in encode_error and "empty" in encode_error
    assert main(["predict", "--model", str(folder), "--input", str(source), "--output", str(tmp_path / "o.jsonl")]) == 2
    error = capsys.readouterr().err
    assert f"{source}:2" in error or "line 2" in error, error
    assert "empty" in error and "--skip-bad-rows" not in error and len(error.strip().splitlines()) == 1
    assert not (tmp_path / "o.jsonl").exists()


def test_combining_marks_stay_in_their_word():
    """Decomposed (NFD) text split "José" into "Jose" and a lone accent, so an entity came back as "Jose"."""
    words, spans = split_words("cafe\u0301 Jose\u0301 went to 北京, ok!")
    assert words == ["cafe\u0301", "Jose\u0301", "went", "to", "北", "京", ",", "ok", "!"]
    assert spans[1] == (6, 11)
