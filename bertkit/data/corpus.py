"""Raw pre-training corpora: documents of sentences, streamed from plain-text files.

Format (as in Google's BERT): one sentence or paragraph per line, a blank line between documents; UTF-8,
`.gz` accepted. Lines holding several sentences are split at sentence-final punctuation, English
(. ! ? followed by a space) and Chinese (。！？； which need no space), closing quotes kept with their sentence.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from bertkit.data.text import check_file, file_suffix, iter_lines
from bertkit.errors import BertkitWarning, InputFileError

_CLOSERS = re.escape("\"'”’」』）)]")
# A sentence ends after Chinese end punctuation (plus closing quotes), or after . ! ? (plus closers)
# followed by whitespace. Lookbehind keeps the punctuation with its sentence.
_BOUNDARY = re.compile(rf"(?<=[。！？；][{_CLOSERS}])|(?<=[。！？；])(?![{_CLOSERS}。！？；])"
                       rf"|(?<=[.!?][{_CLOSERS}])\s+|(?<=[.!?])\s+")
# "Mr. Smith" is not two sentences: a short abbreviation before the period keeps the text together.
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "prof", "st", "vs", "etc", "e.g", "i.e", "jr", "sr", "no", "fig", "u.s"}


def split_sentences(text: str) -> list[str]:
    """Split one line into sentences; whitespace-only pieces are dropped."""
    pieces = [p.strip() for p in _BOUNDARY.split(text) if p and p.strip()]
    merged: list[str] = []
    for piece in pieces:
        if merged and _ends_with_abbreviation(merged[-1]):
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    return merged


def _ends_with_abbreviation(sentence: str) -> bool:
    if not sentence.endswith("."):
        return False
    last = sentence[:-1].rsplit(None, 1)[-1].lower() if sentence[:-1].strip() else ""
    return last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha())


@dataclass(frozen=True)
class CorpusPosition:
    """Where a streaming read stands: file index and the last line consumed (1-based, 0 = none)."""
    file: int = 0
    line: int = 0


# The structured formats other commands read, and archives: never a raw corpus (a JSONL file's keys and braces
# would be trained on as text). Any other name is read as plain text (WMT / OPUS corpora are named train.zh,
# news.2019.en.shuffled.deduped, ...); the reader still refuses binary and wrongly encoded files.
NOT_CORPUS_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".conll", ".parquet", ".arrow", ".zip", ".bz2", ".xz",
                       ".zst", ".tar", ".safetensors", ".bin", ".pt", ".npy")


def check_corpus_files(paths: Sequence[str | Path]) -> list[Path]:
    if not paths:
        raise InputFileError("(corpus)", "no corpus files given; pass --corpus FILE [FILE ...]")
    files = []
    for p in paths:
        path = check_file(p, "pass text files (one sentence or paragraph per line)")
        suffix = file_suffix(path).lower()
        if suffix in NOT_CORPUS_SUFFIXES:
            raise InputFileError(path, f"a {suffix} file is not a plain-text corpus: pass text files with one "
                                       "sentence or paragraph per line and a blank line between documents "
                                       "(.gz accepted; decompress other archives)")
        files.append(path)
    return files


def iter_documents(paths: Sequence[str | Path], start: CorpusPosition = CorpusPosition(),
                   split: bool = True, encoding: str = "utf-8") -> Iterator[tuple[list[str], CorpusPosition]]:
    """Yield (sentences of one document, position after it). Documents never span files. Resuming from
    `start` skips what was already consumed, so an interrupted shard build continues where it stopped.

    Warns when a non-empty file has no blank line at all (everything becomes one document, which gives
    sentence-pair objectives no real 'random next' documents); raises for a corpus with no text.
    """
    files = check_corpus_files(paths)
    any_text = start.file > 0 or start.line > 0
    for index in range(start.file, len(files)):
        path = files[index]
        doc: list[str] = []
        breaks, lines_with_text, last = 0, 0, 0
        skip_to = start.line if index == start.file else 0
        for number, line in iter_lines(path, encoding):
            last = number
            if number <= skip_to:
                continue
            text = line.strip()
            if not text:
                breaks += 1
                if doc:
                    yield doc, CorpusPosition(index, number)
                    doc = []
                continue
            lines_with_text += 1
            doc.extend(split_sentences(text) if split else [text])
        if doc:
            yield doc, CorpusPosition(index, last)
        if lines_with_text:
            any_text = True
        if lines_with_text > 1 and breaks == 0 and skip_to == 0:
            warnings.warn(f"{path}: no blank lines between documents, so the whole file is one document; "
                          "put a blank line between documents for next-sentence / sentence-order objectives",
                          BertkitWarning, stacklevel=2)
    if not any_text:
        raise InputFileError(", ".join(map(str, files)), "the corpus is empty: no text lines to pre-train on")
