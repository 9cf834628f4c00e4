"""[UNK] rate of all-MiniLM-L6-v2's (English, uncased) vocabulary on the data kit's English and Chinese files:
the figures behind bertkit/tokenizer/coverage.py's 5% warning line.

    python benchmarks/unknown_rate.py --data ../shared/data
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from bertkit.api import minilm_path
from bertkit.tokenizer import Tokenizer
from bertkit.tokenizer.coverage import UNKNOWN_WARN_RATE, measure_coverage

ROWS = 500


def rows(path: Path, field: str) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        out = []
        for line in handle:
            row = json.loads(line)
            out.append("".join(row[field]) if isinstance(row[field], list) else row[field])
            if len(out) == ROWS:
                return out
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="../shared/data")
    data = Path(parser.parse_args().data)
    with gzip.open(data / "en_corpus.txt.gz", "rt", encoding="utf-8") as handle:
        english = [line for line, _ in zip((l for l in handle if l.strip()), range(3000))]
    files = {"bbc_train.jsonl.gz (text)": rows(data / "bbc_train.jsonl.gz", "text"),
             "en_corpus.txt.gz (3000 lines)": english,
             "chnsenticorp_like_train.jsonl.gz (text)": rows(data / "chnsenticorp_like_train.jsonl.gz", "text"),
             "peoples_daily_ner_train.jsonl.gz (tokens)": rows(data / "peoples_daily_ner_train.jsonl.gz", "tokens")}
    tokenizer = Tokenizer.from_folder(minilm_path())
    print(f"| file ({ROWS} rows unless stated) | [UNK] rate | warns (> {UNKNOWN_WARN_RATE:.0%}) |\n|---|---:|---|")
    for name, texts in files.items():
        coverage = measure_coverage(tokenizer, texts)
        print(f"| {name} | {coverage.rate:.2%} | {'yes' if coverage.rate > UNKNOWN_WARN_RATE else 'no'} |")


if __name__ == "__main__":
    main()
