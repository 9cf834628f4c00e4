"""Readers for token-tagging (NER) files: JSONL `{"tokens": [...], "tags": [...]}` and CoNLL.

CoNLL: one `token tag` line per token (space or tab between them; with more columns the first is the token
and the last the tag), a blank line between sentences; `-DOCSTART-` lines are skipped. The line number of a
sentence is the line of its first token.

Prediction also takes raw text (`read_raw_texts`): JSONL `{"text": ...}` rows, or a .txt file of one text per
line. A .txt file is CoNLL when it looks like CoNLL: every non-blank line `token ... tag` with a valid tag, or
one token per line with blank lines between sentences; anything else is raw text. Splitting raw text into
words is the predictor's (bertkit.finetune.ner.split_words), the same as for `Model.predict(texts)`.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Optional

from bertkit.data.bad_rows import BadRowLog, jsonl_objects
from bertkit.data.text import iter_lines
from bertkit.data.labels import LabelMap
from bertkit.data.readers import ReadOptions, file_format
from bertkit.errors import InputFileError


class TaggedSentence(NamedTuple):
    tokens: list[str]
    tags: Optional[list[str]]
    line: int


def read_tagged_sentences(path: str | Path, tags: Optional[LabelMap] = None, require_tags: bool = True,
                          options: ReadOptions = ReadOptions()) -> list[TaggedSentence]:
    """Read NER data; `tags` (the training tag set) turns unseen tags in dev/test into bad rows."""
    path = Path(path)
    log = BadRowLog(path, options.skip_bad_rows, options.rejects_path, skip_hint=options.skip_hint)
    fmt = file_format(path)
    if fmt == "jsonl":
        raw_sentences = _jsonl_sentences(path, options.encoding, log)
    elif fmt in ("conll", "txt", "tsv"):
        raw_sentences = _conll_sentences(path, options.encoding, log)
    else:
        raise InputFileError(path, f"a {fmt} file cannot hold NER examples; use .jsonl or .conll")
    sentences = []
    for sentence in raw_sentences:
        checked = _check(sentence, tags, require_tags, log)
        if checked is not None:
            sentences.append(checked)
    log.finish()
    if not sentences:
        raise InputFileError(path, "no sentences found (the file is empty or every sentence was rejected)")
    return sentences


class RawText(NamedTuple):
    text: str
    line: int


def read_raw_texts(path: str | Path, options: ReadOptions = ReadOptions()) -> Optional[list[RawText]]:
    """The texts of a raw-text NER input (see the module doc), or None when the file holds tokenized
    sentences (JSONL "tokens", CoNLL), which read_tagged_sentences reads."""
    path = Path(path)
    fmt = file_format(path)
    if fmt == "jsonl":
        return _jsonl_texts(path, options)
    if fmt == "txt" and not _looks_like_conll(path, options.encoding):
        log = BadRowLog(path, options.skip_bad_rows, options.rejects_path, skip_hint=options.skip_hint)
        texts = []
        for number, line in iter_lines(path, options.encoding):
            if line.strip():     # every line is a text: a blank one is refused (or skipped), as encode refuses it
                texts.append(RawText(line, number))
            else:
                log.add(number, "empty text", "empty or whitespace-only text", line)
        log.finish()
        if not texts:
            raise InputFileError(path, "no texts found (the file is empty or every row was rejected)")
        return texts
    return None


def _jsonl_texts(path: Path, options: ReadOptions) -> Optional[list[RawText]]:
    log = BadRowLog(path, options.skip_bad_rows, options.rejects_path, skip_hint=options.skip_hint)
    texts = []
    for line_no, row, line in jsonl_objects(path, options.encoding, log):
        if not texts and not log.rows and "tokens" in row:
            return None                                  # tokenized sentences: read_tagged_sentences
        if not isinstance(row.get("text"), str):
            log.add(line_no, "missing text", 'expected {"text": string} (or {"tokens": [strings]} on every row)',
                    line)
            continue
        if not row["text"].strip():
            log.add(line_no, "empty text", "empty or whitespace-only text", line)
            continue
        texts.append(RawText(row["text"], line_no))
    log.finish()
    if not texts:
        raise InputFileError(path, "no texts found (the file is empty or every row was rejected)")
    return texts


def _looks_like_conll(path: Path, encoding: str) -> bool:
    tagged = single = blank = 0
    seen_token = False
    for _, line in iter_lines(path, encoding):
        fields = line.split()
        if not fields:
            blank += seen_token
            continue
        if fields[0] == "-DOCSTART-":
            continue
        seen_token = True
        if len(fields) == 1:
            single += 1
        elif _valid_tag(fields[-1]):
            tagged += 1
        else:
            return False                                 # "John lives in Paris": a sentence, not a token line
    return tagged > 0 or (single > 0 and blank > 0)   # mixed tagged/untagged: the CoNLL reader reports it


def _jsonl_sentences(path: Path, encoding: str, log: BadRowLog):
    for line_no, row, line in jsonl_objects(path, encoding, log):
        tokens = row.get("tokens")
        tags = row.get("tags", row.get("ner_tags"))
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            log.add(line_no, "missing tokens", 'expected {"tokens": [strings], "tags": [strings]}', line)
            continue
        if tags is not None and (not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)):
            log.add(line_no, "bad tags", '"tags" must be a list of strings', line)
            continue
        yield TaggedSentence(tokens, tags, line_no), line


def _conll_sentences(path: Path, encoding: str, log: BadRowLog):
    tokens: list[str] = []
    tags: list[Optional[str]] = []
    start = 0
    lines: list[str] = []
    numbers: list[int] = []

    def flush():
        untagged = sum(tag is None for tag in tags)
        if untagged and untagged != len(tags):   # named by its first untagged line, the one to fix
            log.add(numbers[tags.index(None)], "token/tag count mismatch",
                    f"no tag; {untagged} of the {len(tokens)} lines of the sentence from line {start} have none",
                    "\n".join(lines))
            return None
        return TaggedSentence(list(tokens), None if untagged else list(tags), start), "\n".join(lines)

    for line_no, line in iter_lines(path, encoding):
        if line.startswith("-DOCSTART-"):
            continue
        if not line.strip():
            if tokens:
                result = flush()
                if result is not None:
                    yield result
                tokens, tags, lines, numbers = [], [], [], []
            continue
        if not tokens:
            start = line_no
        fields = line.split()
        lines.append(line)
        numbers.append(line_no)
        tokens.append(fields[0])
        tags.append(fields[-1] if len(fields) > 1 else None)
    if tokens:
        result = flush()
        if result is not None:
            yield result


def _check(item, tags: Optional[LabelMap], require_tags: bool, log: BadRowLog) -> Optional[TaggedSentence]:
    sentence, raw = item
    if not sentence.tokens:
        log.add(sentence.line, "empty sentence", "no tokens", raw)
        return None
    if any(not token.strip() for token in sentence.tokens):
        log.add(sentence.line, "empty token", "a token is empty or whitespace", raw)
        return None
    if sentence.tags is None:
        if require_tags:
            log.add(sentence.line, "missing tags", "no tags for this sentence", raw)
            return None
        return sentence
    if len(sentence.tags) != len(sentence.tokens):
        log.add(sentence.line, "token/tag count mismatch",
                f"{len(sentence.tokens)} tokens but {len(sentence.tags)} tags", raw)
        return None
    bad = [tag for tag in sentence.tags if not _valid_tag(tag)]
    if bad:
        log.add(sentence.line, "bad tag", f"tag {bad[0]!r} is not O or B-/I-/E-/S-/L-/U-TYPE", raw)
        return None
    if tags is not None:
        unknown = [tag for tag in sentence.tags if tag not in tags]
        if unknown:
            log.add(sentence.line, "unknown tag", f"unknown tag {unknown[0]!r} (training tags: "
                    f"{', '.join(tags.names)})", raw)
            return None
    return sentence


def _valid_tag(tag: str) -> bool:
    return tag == "O" or (len(tag) > 2 and tag[0] in "BIESLU" and tag[1] in "-_")
