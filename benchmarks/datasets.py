"""The public labelled sets of the developer data kit (`../shared/data/`, see its README.md) as (train, dev, test).

Every loader returns a `Splits` of three lists of row dicts, in the row format the CLI reads for its task:

| name                 | task                | rows                                    | train / dev / test      |
|----------------------|---------------------|-----------------------------------------|-------------------------|
| bbc                  | classification      | {"text", "label"} 5 topics              | 1,467 / 210 / 419       |
| chnsenticorp_like    | classification      | {"text", "label"} pos / neg             | 13,889 / 1,736 / 1,736  |
| wordnet_lexname      | classification      | {"text", "label"} 45 lexicographer files| 5,999 / 998 / 1,503     |
| bible_pairs          | pair-classification | {"text", "text_pair", "label"} 0 / 1    | 26,626 / 1,476 / 2,990  |
| peoples_daily_ner    | ner                 | {"tokens", "tags"} PER / LOC / ORG      | 35,635 / 4,449 / 4,449  |
| wordnet_qa           | qa                  | {"id", "title", "question", "context",  | 17,916 / 2,084 / 2,000  |
|                      |                     |  "answers": [{"text", "answer_start"}]} | (lemma-disjoint)        |

Sets the data kit has no split for are split here, with a fixed seed, so every run sees the same rows:
- wordnet_lexname, a stand-in for a held-out set of ~6k short technical descriptions in ~40 skewed classes: the
  WordNet definitions of wordnet_qa_{train,dev} ("What word means: <definition>?" -> <definition>) labelled by
  their lexicographer file (the article title: adj.all, noun.artifact, verb.weather...). 8,500 of the 22,000
  questions are drawn stratified by label (every label keeps at least 3 rows), then cut 6,000 / 1,000 / 1,500
  per label. The largest class (adj.all) is 30% of train, the smallest has 2 rows.
- bible_pairs: "is text_pair the same verse as text?" Every KJV verse appears once, with its own WEB verse
  (label "1") or, for a seeded half, the WEB text of a nearby verse of the same chapter (label "0": a hard
  negative, same topic and wording). The data kit's test books stay test; dev = the books in DEV_BOOKS.
- wordnet_qa: test = the data kit's dev file (lemma-disjoint from train); dev = the train questions whose
  answer lemma hashes into 10% (so dev is lemma-disjoint from the rest of train too).

`write_split(rows, task, path)` writes one split in the CLI's format (JSONL; SQuAD JSON for qa), so
`bertkit finetune --train ... --dev ...` reads exactly these rows. `subsample(rows, n, seed)` draws a
stratified subset (classification, pairs) or a seeded one (ner, qa) for shorter runs.

    python benchmarks/datasets.py --data-dir ../shared/data              # sizes and label counts
    python benchmarks/datasets.py --write /tmp/sets --name wordnet_lexname  # JSONL files for the CLI
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

DEFAULT_DATA_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
SEED = 20240601                       # the data kit's own split seed
DEV_BOOKS = ("Esther", "Ecclesiastes", "Mark", "Galatians", "Ephesians", "I Peter")   # 1,476 verses
LEXNAME_SIZES = (6000, 1000, 1500)    # train, dev, test rows of the wordnet_lexname set
LEXNAME_MIN_ROWS = 3                  # per label, so every label can appear in train and test
QUESTION = re.compile(r"^What word means: (.*)\?$", re.S)


@dataclass
class Splits:
    name: str
    task: str                         # classification | pair-classification | ner | qa (bertkit --task)
    train: list[dict]
    dev: list[dict]
    test: list[dict]
    source: str                       # the data kit files the rows came from

    def sizes(self) -> tuple[int, int, int]:
        return len(self.train), len(self.dev), len(self.test)


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _read_squad_rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        articles = json.load(f)["data"]
    return [{"id": qa["id"], "title": article["title"], "question": qa["question"], "context": p["context"],
             "answers": qa["answers"]}
            for article in articles for p in article["paragraphs"] for qa in p["qas"]]


def load_bbc(data_dir: Path = DEFAULT_DATA_DIR) -> Splits:
    parts = [read_jsonl(data_dir / f"bbc_{s}.jsonl.gz") for s in ("train", "dev", "test")]
    return Splits("bbc", "classification", *parts, source="bbc_{train,dev,test}.jsonl.gz")


def load_chnsenticorp_like(data_dir: Path = DEFAULT_DATA_DIR) -> Splits:
    parts = [read_jsonl(data_dir / f"chnsenticorp_like_{s}.jsonl.gz") for s in ("train", "dev", "test")]
    return Splits("chnsenticorp_like", "classification", *parts, source="chnsenticorp_like_{train,dev,test}.jsonl.gz")


def load_peoples_daily_ner(data_dir: Path = DEFAULT_DATA_DIR) -> Splits:
    parts = [read_jsonl(data_dir / f"peoples_daily_ner_{s}.jsonl.gz") for s in ("train", "dev", "test")]
    return Splits("peoples_daily_ner", "ner", *parts, source="peoples_daily_ner_{train,dev,test}.jsonl.gz")


def load_wordnet_lexname(data_dir: Path = DEFAULT_DATA_DIR) -> Splits:
    rows = []
    for split in ("train", "dev"):
        for qa in _read_squad_rows(data_dir / f"wordnet_qa_{split}.json.gz"):
            match = QUESTION.match(qa["question"])
            if match is None:
                raise ValueError(f"wordnet_qa_{split}.json.gz: question {qa['id']} is not 'What word means: ...?'")
            rows.append({"text": match.group(1), "label": qa["title"]})
    by_label: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_label[row["label"]].append(row)
    rng = random.Random(SEED)
    total = sum(LEXNAME_SIZES)
    train, dev, test = [], [], []
    for label in sorted(by_label):
        group = by_label[label]
        rng.shuffle(group)
        take = min(len(group), max(LEXNAME_MIN_ROWS, round(len(group) * total / len(rows))))
        group = group[:take]
        n_test = max(1, round(take * LEXNAME_SIZES[2] / total))
        n_dev = round(take * LEXNAME_SIZES[1] / total)
        test += group[:n_test]
        dev += group[n_test:n_test + n_dev]
        train += group[n_test + n_dev:]
    for part in (train, dev, test):
        rng.shuffle(part)
    return Splits("wordnet_lexname", "classification", train, dev, test,
                  source="wordnet_qa_{train,dev}.json.gz (definitions -> lexicographer file)")


def _verse_key(ref: str) -> tuple[str, int, int]:
    book, place = ref.rsplit(" ", 1)
    chapter, verse = place.split(":")
    return book, int(chapter), int(verse)


def _pairs(verses: list[dict], rng: random.Random) -> list[dict]:
    """One row per verse: its own WEB text (label 1) or, for half of them, a nearby verse's (label 0)."""
    chapters: dict[tuple[str, int], list[int]] = defaultdict(list)
    keys = [_verse_key(v["ref"]) for v in verses]
    for i, (book, chapter, _) in enumerate(keys):
        chapters[(book, chapter)].append(i)
    labels = [1] * (len(verses) // 2) + [0] * (len(verses) - len(verses) // 2)
    rng.shuffle(labels)
    rows = []
    for i, (verse, label) in enumerate(zip(verses, labels)):
        other = verse["text_b"]
        if label == 0:
            same = chapters[keys[i][:2]]
            spot = same.index(i)
            near = [same[j] for j in range(max(0, spot - 3), min(len(same), spot + 4)) if j != spot]
            if not near:                 # a one-verse chapter: any other verse of the set
                near = [j for j in (i - 1, i + 1) if 0 <= j < len(verses)]
            other = verses[rng.choice(near)]["text_b"]
        rows.append({"text": verse["text_a"], "text_pair": other, "label": str(label), "ref": verse["ref"]})
    return rows


def load_bible_pairs(data_dir: Path = DEFAULT_DATA_DIR) -> Splits:
    train_verses = read_jsonl(data_dir / "bible_pairs_train.jsonl.gz")
    test_verses = read_jsonl(data_dir / "bible_pairs_test.jsonl.gz")
    rng = random.Random(SEED)
    dev_verses = [v for v in train_verses if _verse_key(v["ref"])[0] in DEV_BOOKS]
    train_verses = [v for v in train_verses if _verse_key(v["ref"])[0] not in DEV_BOOKS]
    train, dev, test = (_pairs(v, rng) for v in (train_verses, dev_verses, test_verses))
    return Splits("bible_pairs", "pair-classification", train, dev, test,
                  source="bible_pairs_{train,test}.jsonl.gz (nearby-verse negatives)")


def _lemma_in_dev(answer: str) -> bool:
    return int(hashlib.sha256(answer.lower().encode("utf-8")).hexdigest(), 16) % 10 == 0


def load_wordnet_qa(data_dir: Path = DEFAULT_DATA_DIR) -> Splits:
    rows = _read_squad_rows(data_dir / "wordnet_qa_train.json.gz")
    test = _read_squad_rows(data_dir / "wordnet_qa_dev.json.gz")
    dev = [r for r in rows if _lemma_in_dev(r["answers"][0]["text"])]
    train = [r for r in rows if not _lemma_in_dev(r["answers"][0]["text"])]
    return Splits("wordnet_qa", "qa", train, dev, test, source="wordnet_qa_{train,dev}.json.gz")


LOADERS: dict[str, Callable[[Path], Splits]] = {
    "bbc": load_bbc, "chnsenticorp_like": load_chnsenticorp_like, "wordnet_lexname": load_wordnet_lexname,
    "bible_pairs": load_bible_pairs, "peoples_daily_ner": load_peoples_daily_ner, "wordnet_qa": load_wordnet_qa,
}


def load(name: str, data_dir: Path | str = DEFAULT_DATA_DIR) -> Splits:
    if name not in LOADERS:
        raise KeyError(f"unknown set {name!r}; choose one of {', '.join(LOADERS)}")
    return LOADERS[name](Path(data_dir))


def subsample(rows: list[dict], count: Optional[int], seed: int = SEED) -> list[dict]:
    """`count` rows: stratified by label where rows have one (each label keeps at least one row), else a
    seeded sample; the original order is kept. None or a count >= len(rows) returns rows as they are."""
    if count is None or count >= len(rows):
        return rows
    rng = random.Random(seed)
    if "label" not in rows[0]:
        keep = set(rng.sample(range(len(rows)), count))
        return [r for i, r in enumerate(rows) if i in keep]
    by_label: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_label[row["label"]].append(i)
    keep = set()
    for label in sorted(by_label):
        group = by_label[label]
        keep.update(rng.sample(group, max(1, round(len(group) * count / len(rows)))))
    return [r for i, r in enumerate(rows) if i in keep]


def write_split(rows: list[dict], task: str, path: Path | str) -> Path:
    """One split as the CLI reads it: JSONL rows, or for qa a SQuAD v1.1 JSON file (one article per title)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if task == "qa":
        articles: dict[str, list[dict]] = defaultdict(list)
        for row in rows:
            articles[row["title"]].append({"context": row["context"], "qas": [
                {"id": row["id"], "question": row["question"], "answers": row["answers"]}]})
        document = {"version": "1.1", "data": [{"title": t, "paragraphs": p} for t, p in articles.items()]}
        path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
        return path
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def write_splits(splits: Splits, folder: Path | str) -> dict[str, Path]:
    """train/dev/test files under folder/<name>/ (.jsonl, or .json for qa); returns {split: path}."""
    suffix = ".json" if splits.task == "qa" else ".jsonl"
    folder = Path(folder) / splits.name
    return {part: write_split(getattr(splits, part), splits.task, folder / f"{part}{suffix}")
            for part in ("train", "dev", "test")}


def describe(splits: Splits) -> str:
    line = f"{splits.name:<18} {splits.task:<20} train {len(splits.train):>6}  dev {len(splits.dev):>5}  " \
           f"test {len(splits.test):>5}"
    if splits.train and "label" in splits.train[0]:
        counts = Counter(r["label"] for r in splits.train)
        top = counts.most_common(1)[0]
        line += f"  labels {len(counts)} (largest {top[0]} {top[1] / len(splits.train):.0%}, " \
                f"smallest {min(counts.values())} rows)"
    return line


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--name", action="append", choices=list(LOADERS), help="sets to load (default: all)")
    parser.add_argument("--write", type=Path, help="write train/dev/test files under WRITE/<name>/")
    args = parser.parse_args(argv)
    for name in args.name or LOADERS:
        splits = load(name, args.data_dir)
        print(describe(splits))
        if args.write:
            for part, path in write_splits(splits, args.write).items():
                print(f"  {part}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
