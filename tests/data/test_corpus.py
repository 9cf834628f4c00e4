import gzip

import pytest

from bertkit.data.corpus import CorpusPosition, check_corpus_files, iter_documents, split_sentences
from bertkit.errors import BertkitError


def test_split_english_and_chinese_sentences():
    assert split_sentences('Hello there. Mr. Smith went home! Did he? "Yes." Then') == \
        ["Hello there.", "Mr. Smith went home!", "Did he?", '"Yes."', "Then"]
    assert split_sentences("今天天气很好。我们去公园吧！好不好？可以；走吧“他说。”然后") == \
        ["今天天气很好。", "我们去公园吧！", "好不好？", "可以；", "走吧“他说。”", "然后"]
    assert split_sentences("The U.S. economy grew 3.5 percent.") == ["The U.S. economy grew 3.5 percent."]


def test_documents_split_at_blank_lines_and_resume(tmp_path):
    path = tmp_path / "c.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\ufeffA one. A two.\nA three.\n\n\nB one.\n\nC one.\nC two.\n")
    docs = list(iter_documents([path]))
    assert [d for d, _ in docs] == [["A one.", "A two.", "A three."], ["B one."], ["C one.", "C two."]]
    after_first = docs[0][1]
    assert [d for d, _ in iter_documents([path], after_first)] == [["B one."], ["C one.", "C two."]]
    assert docs[-1][1] == CorpusPosition(0, 8)


def test_empty_corpus_is_an_error(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("\n\n  \n", encoding="utf-8")
    with pytest.raises(BertkitError, match="empty"):
        list(iter_documents([path]))


def test_no_document_breaks_warns(tmp_path):
    path = tmp_path / "flat.txt"
    path.write_text("One line.\nAnother line.\nA third.\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="no blank lines between documents"):
        docs = list(iter_documents([path]))
    assert len(docs) == 1


def test_binary_and_missing_files_are_one_line_errors(tmp_path):
    binary = tmp_path / "model.txt"
    binary.write_bytes(b"\x00\x01\x02\xff\xfe" * 50)
    with pytest.raises(BertkitError, match="binary"):
        list(iter_documents([binary]))
    with pytest.raises(BertkitError, match="file not found"):
        list(iter_documents([tmp_path / "missing.txt"]))
    with pytest.raises(BertkitError, match="no corpus files"):
        list(iter_documents([]))


def test_a_structured_file_is_refused_and_any_other_name_is_read_as_text(tmp_path):
    """Pre-training refused plain-text corpora named as WMT / OPUS name theirs (train.zh, news.2019.en.shuffled.deduped:
    'unsupported file type') while vocab training read them; now every corpus reader shares one check, which refuses
    the structured formats other commands read (a JSONL file's braces are no corpus) and reads any other name."""
    from bertkit.tokenizer import train_wordpiece
    from bertkit.tokenizer.bpe import train_bpe

    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text('{"text": "a"}\n')
    with pytest.raises(BertkitError, match=r"corpus.jsonl: a .jsonl file is not a plain-text corpus"):
        check_corpus_files([jsonl])
    text = "我们今天去公园。\n今天天气很好。\n\nThe cat sat on the mat. The dog ran.\n"
    names = ("train.zh", "news.2019.en.shuffled.deduped", "wiki.TXT", "plain")
    for name in names:
        (tmp_path / name).write_text(text, encoding="utf-8")
    paths = [tmp_path / name for name in names]
    assert check_corpus_files(paths) == paths
    docs = [doc for doc, _ in iter_documents([tmp_path / "train.zh"])]
    assert docs == [["我们今天去公园。", "今天天气很好。"], ["The cat sat on the mat.", "The dog ran."]]
    for train in (lambda files: train_wordpiece(files, vocab_size=200, num_unused=0),
                  lambda files: train_bpe(files, vocab_size=300)):
        with pytest.raises(BertkitError, match="is a folder"):
            train([tmp_path])
        with pytest.raises(BertkitError, match="not a plain-text corpus"):
            train([jsonl])
