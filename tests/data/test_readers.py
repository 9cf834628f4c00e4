"""Bad-input tests for the classification, NER and SQuAD readers: every problem names file and line."""
from __future__ import annotations

import gzip
import json

import pytest

from bertkit.data.labels import LabelMap
from bertkit.data.ner_readers import read_tagged_sentences
from bertkit.data.readers import ReadOptions, label_map_for, read_text_examples
from bertkit.data.squad import read_squad
from bertkit.errors import InputFileError


def write(path, text: str, encoding: str = "utf-8"):
    path.write_bytes(text.encode(encoding))
    return path


# --- classification: JSONL / TSV / CSV --------------------------------------------------------------------

def test_jsonl_text_pairs_and_labels(tmp_path):
    rows = [{"text": "a b", "label": "x"}, {"text_a": "c", "text_b": "d", "label": 1}]
    path = write(tmp_path / "train.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    examples = read_text_examples(path)
    assert [(e.text, e.text_pair, e.label, e.line) for e in examples] == [("a b", None, "x", 1), ("c", "d", "1", 2)]
    assert label_map_for(examples, "class").names == ("1", "x")


def test_google_tsv_without_header_and_gzip(tmp_path):
    path = tmp_path / "train.tsv.gz"
    path.write_bytes(gzip.compress("pos\tgood film\tp1\nneg\tbad film\tpair text\n".encode()))
    examples = read_text_examples(path)
    assert examples[0] == ("good film", "p1", "pos", 1)
    assert examples[1] == ("bad film", "pair text", "neg", 2)


def test_a_headerless_file_written_text_first_is_one_error_naming_it(tmp_path):
    rows = [("good movie I would watch again", "pos"), ("a bad movie", "neg"), ("great film", "pos"),
            ("an awful film", "neg")]
    for suffix, sep in ((".tsv", "\t"), (".csv", ",")):
        path = write(tmp_path / f"train{suffix}", "".join(f"{text}{sep}{label}\n" for text, label in rows))
        with pytest.raises(InputFileError, match=rf"train{suffix}: line 1: the first column looks like texts "
                                                 r"\(4 different values in 4 rows.*add a header row text"):
            read_text_examples(path)
        dev = write(tmp_path / f"dev{suffix}", f"nice one{sep}pos\n")   # dev blamed before: "unknown label"
        with pytest.raises(InputFileError, match="first column looks like texts"):
            read_text_examples(dev, labels=LabelMap(["neg", "pos"]))
        path.write_text("".join(f"{label}{sep}{text}\n" for text, label in rows))     # label first: read
        assert [e.label for e in read_text_examples(path)] == ["pos", "neg", "pos", "neg"]
    # long labels on short texts with a header row are the file's own business
    path = write(tmp_path / "named.tsv", "label\ttext\nthe first long label\tab\nthe second long label\tcd\n")
    assert len(read_text_examples(path)) == 2


def test_header_row_in_any_column_order_and_bom(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes("\ufeffsentence\tlabel\nhello\t1\n".encode("utf-8"))
    assert read_text_examples(path) == [("hello", None, "1", 2)]
    csv_path = write(tmp_path / "train.csv", 'label,text,text_pair\nyes,"a, b","say ""hi"""\n')
    assert read_text_examples(csv_path) == [("a, b", 'say "hi"', "yes", 2)]


def test_unbalanced_quotes_in_tsv_are_reported_with_lines_and_counts(tmp_path):
    path = write(tmp_path / "train.tsv", 'pos\tfine\nneg\t"broken text\npos\tok "inner" quotes\nneg\t"x" y\n')
    with pytest.raises(InputFileError) as err:
        read_text_examples(path)
    message = str(err.value)
    assert f"{path}:2" in message and "2 x malformed quotes" in message and "line 2, 4" in message
    assert "--skip-bad-rows" not in message   # predict / evaluate / distill have no such flag: never name it
    with pytest.raises(InputFileError, match="or pass --skip-bad-rows"):   # finetune and baseline do
        read_text_examples(path, options=ReadOptions(skip_hint=True))


def test_quoted_fields_with_newlines_as_python_csv_writes_them(tmp_path):
    import csv

    rows = [{"text": "First paragraph.\n\nSecond, with \"quotes\".", "label": "tech"},
            {"text": "one line", "label": "sport"},
            {"text": "a\nb\nc", "label": "tech"}]
    for suffix, delimiter in ((".csv", ","), (".tsv", "\t")):
        path = tmp_path / f"train{suffix}"
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, ["text", "label"], delimiter=delimiter, quoting=csv.QUOTE_MINIMAL)
            writer.writeheader()
            writer.writerows(rows)
        if suffix == ".tsv":        # TSV is one row per line (GLUE, run_classifier): a newline in a text is an error
            with pytest.raises(InputFileError, match="malformed quotes"):
                read_text_examples(path)
            continue
        examples = read_text_examples(path)
        assert [(e.text, e.label) for e in examples] == [(r["text"], r["label"]) for r in rows]
        assert [e.line for e in examples] == [2, 5, 6]          # each row named by its first line


def test_a_long_text_is_read_whole(tmp_path):
    text = "word " * 30_000                     # 150,000 characters: over csv's default field limit (128 KiB)
    path = write(tmp_path / "train.tsv", f"pos\t{text}\n")   # was refused as "malformed quotes"
    assert read_text_examples(path)[0].text == text


def test_a_stray_quote_never_merges_rows_silently(tmp_path):
    lines = ["label,text"] + [f"{'pos' if i % 2 else 'neg'},row {i}" for i in range(1, 8)]
    lines[3] = 'pos,"a stray quote opens here'
    lines[6] = 'neg,and a later one closes it"'
    path = write(tmp_path / "train.csv", "\n".join(lines) + "\n")
    with pytest.raises(InputFileError, match=r"train.csv:4: .*1 x quote runs over rows .*the quote opened here "
                                             r"runs on to line 7, over lines that read as rows of their own "
                                             r"\(line 5: label 'neg'\)"):
        read_text_examples(path)
    kept = read_text_examples(path, options=ReadOptions(skip_bad_rows=True, rejects_path=tmp_path / "r.jsonl"))
    assert [e.line for e in kept] == [2, 3, 8]               # the merged record went to the rejects file, named


def test_a_quote_that_never_closes_is_one_bad_row_and_the_rows_after_it_are_read(tmp_path):
    path = write(tmp_path / "train.csv", 'label,text\npos,"never closed\nneg,plain\npos,"two\nlines"\n')
    examples = read_text_examples(path, options=ReadOptions(skip_bad_rows=True,
                                                             rejects_path=tmp_path / "rejects.jsonl"))
    assert [(e.text, e.line) for e in examples] == [("plain", 3), ("two\nlines", 4)]


def test_rows_of_another_task_say_which_task_reads_them(tmp_path):
    ner = write(tmp_path / "ner.jsonl", '{"tokens": ["Li", "Lei"], "tags": ["B-PER", "I-PER"]}\n')
    with pytest.raises(InputFileError, match=r'no "text" field \(fields: tokens, tags\); these look like NER rows: '
                                             r"pass --task ner"):
        read_text_examples(ner)
    array = write(tmp_path / "rows.json", json.dumps([{"text": "a", "label": "x"}]))
    with pytest.raises(InputFileError, match=r"rows.json: a .json file is read as SQuAD \(qa\); rows for this "
                                             r"task go in JSONL"):
        read_text_examples(array)
    with pytest.raises(InputFileError, match=r"ner.jsonl: qa reads SQuAD JSON: one .json file"):
        read_squad(ner)                                  # said "invalid JSON: Extra data"


def test_skip_bad_rows_writes_rejects(tmp_path):
    path = write(tmp_path / "train.tsv", 'pos\tfine\nneg\t"broken\nneg\t \npos\tgood\n')
    rejects = tmp_path / "rejects.jsonl"
    examples = read_text_examples(path, options=ReadOptions(skip_bad_rows=True, rejects_path=rejects))
    assert [e.text for e in examples] == ["fine", "good"]
    lines = [json.loads(line) for line in rejects.read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in lines] == [2, 3] and "quotes" in lines[0]["reason"]


def test_unknown_labels_in_dev_are_counted(tmp_path):
    train = read_text_examples(write(tmp_path / "train.jsonl", '{"text": "a", "label": "pos"}\n'
                                                               '{"text": "b", "label": "neg"}\n'))
    labels = label_map_for(train, "class")
    dev = write(tmp_path / "dev.jsonl", '{"text": "a", "label": "pos"}\n{"text": "b", "label": "neutral"}\n'
                                         '{"text": "c", "label": "neutral"}\n{"text": "d", "label": "POS"}\n')
    with pytest.raises(InputFileError) as err:
        read_text_examples(dev, labels=labels)
    message = str(err.value)
    assert "3 bad row(s)" in message and "3 x unknown label" in message and "line 2, 3, 4" in message
    assert "'neutral'" in message and "training labels: neg, pos" in message


def test_empty_texts_missing_labels_and_bad_json(tmp_path):
    path = write(tmp_path / "d.jsonl", '{"text": "  ", "label": "a"}\n{"text": "x"}\n{"text": "y", "label": "a"\n'
                                       '["not", "object"]\n{"text": "fine", "label": "a"}\n')
    with pytest.raises(InputFileError) as err:
        read_text_examples(path)
    for kind in ("empty text", "missing label", "invalid JSON", "not a JSON object"):
        assert kind in str(err.value)


def test_regression_and_multilabel_labels(tmp_path):
    path = write(tmp_path / "sts.tsv", "4.5\ta\tb\nnan\tc\td\nhigh\te\tf\n")
    with pytest.raises(InputFileError, match="2 bad row"):
        read_text_examples(path, "score")
    good = read_text_examples(write(tmp_path / "ok.tsv", "4.5\ta\tb\n"), "score")
    assert good[0].label == 4.5
    multi = read_text_examples(write(tmp_path / "m.jsonl", '{"text": "a", "label": ["y", "x"]}\n'
                                                           '{"text": "b", "label": "z,x"}\n'), "multi")
    assert [e.label for e in multi] == [("x", "y"), ("x", "z")]
    assert label_map_for(multi, "multi").names == ("x", "y", "z")


def test_gbk_bytes_give_a_clear_error_and_read_with_encoding(tmp_path):
    path = write(tmp_path / "zh.tsv", "pos\t很好的电影\nneg\t太差了\n", encoding="gbk")
    with pytest.raises(InputFileError) as err:
        read_text_examples(path)
    message = str(err.value)
    assert message.startswith(f"{path}:1:") and "--encoding gb18030" in message
    examples = read_text_examples(path, options=ReadOptions(encoding="gb18030"))
    assert [e.text for e in examples] == ["很好的电影", "太差了"]


def test_wrong_column_count_and_unknown_extension(tmp_path):
    path = write(tmp_path / "t.tsv", "label\ttext\npos\ta\tb\n")
    with pytest.raises(InputFileError, match="wrong number of columns"):
        read_text_examples(path)
    with pytest.raises(InputFileError, match="extension"):
        read_text_examples(write(tmp_path / "t.xlsx", "x"))
    with pytest.raises(InputFileError, match="not found"):
        read_text_examples(tmp_path / "missing.jsonl")


# --- NER ---------------------------------------------------------------------------------------------------

def test_ner_jsonl_and_conll_agree(tmp_path):
    jsonl = write(tmp_path / "n.jsonl", json.dumps({"tokens": ["江", "泽", "民"], "tags": ["B-PER", "I-PER", "I-PER"]})
                  + "\n" + json.dumps({"tokens": ["在", "北", "京"], "tags": ["O", "B-LOC", "I-LOC"]}) + "\n")
    conll = write(tmp_path / "n.conll", "-DOCSTART- O\n\n江 B-PER\n泽 I-PER\n民 I-PER\n\n在 O\n北\tB-LOC\n京 I-LOC\n")
    a, b = read_tagged_sentences(jsonl), read_tagged_sentences(conll)
    assert [(s.tokens, s.tags) for s in a] == [(s.tokens, s.tags) for s in b]
    assert [s.line for s in b] == [3, 7]
    assert LabelMap.from_tags(t for s in a for t in s.tags).names == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")


def test_ner_token_tag_mismatch_is_reported(tmp_path):
    jsonl = write(tmp_path / "n.jsonl", '{"tokens": ["a", "b"], "tags": ["O"]}\n{"tokens": ["a"], "tags": ["O"]}\n')
    with pytest.raises(InputFileError) as err:
        read_tagged_sentences(jsonl)
    assert f"{jsonl}:1" in str(err.value) and "2 tokens but 1 tags" in str(err.value)
    conll = write(tmp_path / "n.conll", "a O\nb\nc O\n\nd O\n")
    with pytest.raises(InputFileError, match="token/tag count mismatch") as err:
        read_tagged_sentences(conll)
    assert str(err.value).startswith(f"{conll}:2:")          # the untagged line, not the sentence's first


def test_ner_unknown_and_invalid_tags(tmp_path):
    path = write(tmp_path / "dev.jsonl", '{"tokens": ["a"], "tags": ["B-MISC"]}\n{"tokens": ["b"], "tags": ["PER"]}\n')
    with pytest.raises(InputFileError) as err:
        read_tagged_sentences(path, tags=LabelMap(("O", "B-PER", "I-PER")))
    assert "unknown tag 'B-MISC'" in str(err.value) and "bad tag" in str(err.value)


# --- SQuAD ---------------------------------------------------------------------------------------------------

def squad(qas, context="Alice went to Paris in May."):
    return json.dumps({"version": "2.0", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]})


def test_squad_reads_v1_and_v2(tmp_path):
    path = write(tmp_path / "s.json", squad([
        {"id": "q1", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 14}]},
        {"id": "q2", "question": "Who else?", "answers": [], "is_impossible": True}]))
    examples = read_squad(path)
    assert examples[0].answers[0] == ("Paris", 14) and examples[1].is_impossible and not examples[1].answers


def test_squad_offsets_that_do_not_match_the_context(tmp_path):
    path = write(tmp_path / "s.json", squad([
        {"id": "q1", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 13}]},
        {"id": "q2", "question": "When?", "answers": [{"text": "May", "answer_start": 23}]}]))
    with pytest.raises(InputFileError) as err:
        read_squad(path)
    message = str(err.value)
    assert "1 x answer offset does not match context" in message and "question q1" in message
    assert "' Pari'" in message
    kept = read_squad(path, options=ReadOptions(skip_bad_rows=True, rejects_path=tmp_path / "r.jsonl"))
    assert [e.id for e in kept] == ["q2"]


def test_squad_invalid_json_names_the_line(tmp_path):
    path = write(tmp_path / "s.json", '{"version": "1.1",\n "data": [\n}')
    with pytest.raises(InputFileError) as err:
        read_squad(path)
    assert f"{path}:3" in str(err.value)
