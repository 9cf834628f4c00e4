"""Readers for text classification, pair classification and regression files.

Formats (chosen by extension, after an optional .gz):
- .jsonl / .json: one object per line, `{"text", "text_pair"?, "label"}` (`text_a`/`text_b` also accepted);
- .tsv / .csv: Google run_classifier's `label<TAB>text[<TAB>text_pair]`, or any column order under a
  header row naming `label` and `text` (`sentence`, `sentence1`, `text_a`) and optionally `text_pair`
  (`sentence2`, `text_b`); quotes follow CSV rules; in CSV (not TSV, a line format) a quoted field may hold
  newlines, the row then named by its first line;
- .txt: one text per line, no labels (for prediction).
Multi-label rows give a list (JSONL) or a comma-separated field (TSV/CSV). Every problem is collected
with its line (see bad_rows.py) so one run reports them all.
"""
from __future__ import annotations

import csv
import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, NamedTuple, Optional, Union

from bertkit.data.bad_rows import BadRowLog, jsonl_objects
from bertkit.data.text import iter_lines
from bertkit.data.labels import LabelMap
from bertkit.errors import InputFileError

LabelKind = Literal["class", "multi", "score"]
Label = Union[str, float, tuple[str, ...]]

MAX_RECORD_LINES = 1000      # lines one CSV record may span (a quoted field holding newlines)
# Python's csv refuses a field over 128 KiB by default, which a long document's text can be ("malformed quotes",
# it was reported); a record is bounded by its lines anyway. Raised once for the process, never lowered.
csv.field_size_limit(max(csv.field_size_limit(), 1 << 26))
TEXT_COLUMNS = ("text", "sentence", "sentence1", "text_a")
PAIR_COLUMNS = ("text_pair", "sentence2", "text_b")


class TextExample(NamedTuple):
    text: str
    text_pair: Optional[str]
    label: Optional[Label]
    line: int


@dataclass(frozen=True)
class ReadOptions:
    encoding: str = "utf-8"
    skip_bad_rows: bool = False
    rejects_path: Optional[Path] = None
    skip_hint: bool = False   # the command offers --skip-bad-rows: name it when bad rows stop the read


def file_format(path: str | Path) -> str:
    """'jsonl', 'tsv', 'csv', 'txt', 'conll' or 'squad' from the file name (a trailing .gz is ignored)."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    suffix = name.rsplit(".", 1)[-1] if "." in name else ""
    formats = {"jsonl": "jsonl", "ndjson": "jsonl", "tsv": "tsv", "csv": "csv", "txt": "txt",
               "conll": "conll", "bio": "conll", "json": "squad"}
    if suffix not in formats:
        raise InputFileError(path, f"cannot tell the format from the extension {suffix!r}; "
                             "use .jsonl, .tsv, .csv, .txt, .conll or .json (SQuAD), optionally + .gz")
    return formats[suffix]


def read_text_examples(path: str | Path, label_kind: LabelKind = "class", labels: Optional[LabelMap] = None,
                       require_labels: bool = True, options: ReadOptions = ReadOptions()) -> list[TextExample]:
    """Read a classification/regression file. `labels` (the training label map) turns unseen labels into
    bad rows, as dev/test files must not bring new classes."""
    path = Path(path)
    log = BadRowLog(path, options.skip_bad_rows, options.rejects_path, skip_hint=options.skip_hint)
    fmt = file_format(path)
    if fmt == "jsonl":
        rows = _jsonl_rows(path, options.encoding, log)
    elif fmt in ("tsv", "csv"):
        layout: dict = {}
        delimiter = "\t" if fmt == "tsv" else ","
        rows = list(_delimited_rows(path, delimiter, options.encoding, log, layout))
        if layout.get("headerless") and label_kind == "class":
            _check_label_first(path, fmt, rows)
        rows = _without_swallowed_rows(rows, delimiter, log)
    elif fmt == "txt":
        # every line is a text, a blank one too: it is refused as an empty text, naming its line, as encode does
        rows = ((n, {"text": line}, line) for n, line in iter_lines(path, options.encoding))
    elif fmt == "squad":
        raise InputFileError(path, "a .json file is read as SQuAD (qa); rows for this task go in JSONL, one "
                                   "object per line (.jsonl), or .tsv / .csv")
    else:
        raise InputFileError(path, f"a {fmt} file cannot hold text-classification examples; "
                             "use .jsonl, .tsv or .csv")
    examples = []
    for line_no, row, raw in rows:
        example = _to_example(row, line_no, raw, label_kind, labels, require_labels, log)
        if example is not None:
            examples.append(example)
    log.finish()
    if not examples:
        raise InputFileError(path, "no examples found (the file is empty or every row was rejected)")
    return examples


def _jsonl_rows(path: Path, encoding: str, log: BadRowLog):
    for line_no, row, line in jsonl_objects(path, encoding, log):
        for alias, name in (("text_a", "text"), ("sentence", "text"), ("text_b", "text_pair")):
            if alias in row and name not in row:
                row[name] = row.pop(alias)
        yield line_no, row, line


def _delimited_rows(path: Path, delimiter: str, encoding: str, log: BadRowLog, layout: dict):
    """Rows as dicts; layout["headerless"] says whether the columns were read in the default order."""
    columns: Optional[list[str]] = None
    # TSV is a line format (one row per line, as GLUE's files and Google's run_classifier have it); CSV's quoted
    # fields may hold newlines (RFC 4180, and what Python's csv module, pandas and spreadsheets write)
    max_lines = 1 if delimiter == "\t" else MAX_RECORD_LINES
    for line_no, line, fields in _records(iter_lines(path, encoding), delimiter, max_lines):
        if isinstance(fields, csv.Error):
            log.add(line_no, "malformed quotes", f"malformed quotes ({fields}); a field that starts with \" must "
                    "end with \" and double the quotes inside it", line)
            continue
        if columns is None:
            columns = _header_columns(fields)
            if columns is not None:
                continue
            columns = ["label", "text", "text_pair"][:len(fields)] if len(fields) > 1 else ["text"]
            layout["headerless"] = len(fields) > 1
            if len(fields) > 3:
                log.add(line_no, "wrong number of columns", f"{len(fields)} columns; without a header the "
                        "layout is label<TAB>text[<TAB>text_pair]", line)
                columns = None
                continue
        if len(fields) != len(columns):
            log.add(line_no, "wrong number of columns",
                    f"{len(fields)} columns where the file has {len(columns)} ({', '.join(columns)}); "
                    "a tab or comma inside a text must be quoted", line)
            continue
        yield line_no, dict(zip(columns, fields)), line


def _records(lines: Iterator[tuple[int, str]], delimiter: str, max_lines: int) -> Iterator[tuple[int, str, Any]]:
    """(first line number, record text, fields or the csv.Error) per record; blank lines skipped. A quoted field
    may hold newlines (as Python's csv module and spreadsheets write them): a record whose quote is still open
    at the end of its line goes on over the next lines until the quote closes, at most max_lines, each
    line parsed once. A quote that never closes is one bad record at its first line, and the lines after it are
    read again on their own."""
    pending: deque[tuple[int, str]] = deque()
    source = iter(lines)

    def next_line() -> Optional[tuple[int, str]]:
        return pending.popleft() if pending else next(source, None)

    def record_lines(taken: list[tuple[int, str]]) -> Iterator[str]:
        yield taken[0][1] + "\n"
        while len(taken) < max_lines and (more := next_line()) is not None:
            taken.append(more)
            yield more[1] + "\n"

    while (first := next_line()) is not None:
        line_no, line = first
        if not line.strip():
            continue
        taken = [first]
        try:
            fields = next(csv.reader(record_lines(taken), delimiter=delimiter, strict=True))
        except csv.Error as err:
            yield line_no, line, err
            pending.extendleft(reversed(taken[1:]))      # read the lines after the bad one on their own
            continue
        yield line_no, "\n".join(text for _, text in taken), fields


def _without_swallowed_rows(rows: list, delimiter: str, log: BadRowLog) -> list:
    """A stray quote at the start of a CSV text opens a field that runs on over the next lines until some line
    ends with a quote, taking whole rows into one text. Legitimate multi-line texts hold paragraphs; a record
    whose later lines read as rows of their own (the file's number of columns, a label the file's one-line rows
    use) is one bad row naming where its quote opened, never a silent merge."""
    labels = {row.get("label") for _, row, raw in rows if "\n" not in raw}
    kept = []
    for line_no, row, raw in rows:
        if "\n" in raw and "label" in row:
            position = list(row).index("label")
            lines = raw.split("\n")
            for offset, line in enumerate(lines[1:], start=1):
                fields = next(csv.reader([line], delimiter=delimiter), [])
                if len(fields) == len(row) and fields[position] in labels:
                    log.add(line_no, "quote runs over rows",
                            f"the quote opened here runs on to line {line_no + len(lines) - 1}, over lines that "
                            f"read as rows of their own (line {line_no + offset}: label {fields[position]!r}); "
                            "close the quote, or double a quote inside a quoted text", raw)
                    break
            else:
                kept.append((line_no, row, raw))
            continue
        kept.append((line_no, row, raw))
    return kept


def _check_label_first(path: Path, fmt: str, rows: list) -> None:
    """Without a header the first column is the label. A file written text first reads its texts as labels and
    would fail later, blaming dev or training on thousands of classes: when the "labels" vary like texts
    (most rows a label of their own) and run longer than the "texts", say so here, naming this file."""
    pairs = [(row["label"], row["text"]) for _, row, _ in rows if isinstance(row.get("text"), str)
             and isinstance(row.get("label"), str) and row["label"] and row["text"]]
    if not pairs:
        return
    labels = [label for label, _ in pairs]
    mean_label = sum(map(len, labels)) / len(pairs)
    mean_text = sum(len(text) for _, text in pairs) / len(pairs)
    if len(set(labels)) > len(pairs) / 2 and mean_label > 2 * mean_text:
        line, label, text = rows[0][0], *pairs[0]
        sep = "<TAB>" if fmt == "tsv" else ","
        raise InputFileError(path, f"line {line}: the first column looks like texts ({len(set(labels))} different "
                                   f"values in {len(pairs)} rows, e.g. {label[:40]!r}) and the second like labels "
                                   f"(e.g. {text[:40]!r}); without a header a row is label{sep}text: swap the "
                                   f"columns or add a header row text{sep}label")


def _header_columns(fields: list[str]) -> Optional[list[str]]:
    names = [field.strip().lower() for field in fields]
    if not any(name in TEXT_COLUMNS for name in names):
        return None
    mapped = []
    for name in names:
        if name in TEXT_COLUMNS and "text" not in mapped:
            mapped.append("text")
        elif name in PAIR_COLUMNS:
            mapped.append("text_pair")
        else:
            mapped.append(name)
    return mapped


def _to_example(row: dict, line_no: int, raw: str, label_kind: LabelKind, labels: Optional[LabelMap],
                require_labels: bool, log: BadRowLog) -> Optional[TextExample]:
    text, pair = row.get("text"), row.get("text_pair")
    if text is None:
        hint = "; these look like NER rows: pass --task ner" if {"tokens", "tags"} <= set(row) else ""
        log.add(line_no, "missing text", f'no "text" field (fields: {", ".join(map(str, row))}){hint}', raw)
        return None
    if not isinstance(text, str) or (pair is not None and not isinstance(pair, str)):
        log.add(line_no, "text is not a string", "text and text_pair must be strings", raw)
        return None
    if not text.strip() or (pair is not None and not pair.strip()):
        log.add(line_no, "empty text", "empty or whitespace-only text", raw)
        return None
    label = row.get("label")
    if label is None or label == "":
        if require_labels:
            log.add(line_no, "missing label", 'no "label" value', raw)
            return None
        return TextExample(text, pair, None, line_no)
    parsed = _parse_label(label, label_kind)
    if isinstance(parsed, str) and label_kind != "class":
        log.add(line_no, "bad label", parsed, raw)
        return None
    if labels is not None and label_kind != "score":
        unknown = [name for name in ((parsed,) if label_kind == "class" else parsed) if name not in labels]
        if unknown:
            known = ", ".join(labels.names[:10]) + (", ..." if len(labels) > 10 else "")
            log.add(line_no, "unknown label", f"unknown label {unknown[0]!r} (training labels: {known})", raw)
            return None
    return TextExample(text, pair, parsed, line_no)


def _parse_label(label, label_kind: LabelKind) -> Label:
    """The label as str (class), tuple of str (multi) or float (score); for multi/score a str is an error."""
    if label_kind == "class":
        return str(label).strip()
    if label_kind == "multi":
        items = label if isinstance(label, list) else str(label).split(",")
        names = tuple(sorted({str(item).strip() for item in items if str(item).strip()}))
        return names if names else "multi-label row with no labels"
    try:
        value = float(label)
    except (TypeError, ValueError):
        return f"label {label!r} is not a number (regression needs numeric labels)"
    return value if math.isfinite(value) else f"label {label!r} is not a finite number"


def label_map_for(examples: list[TextExample], label_kind: LabelKind) -> Optional[LabelMap]:
    """The training label map (None for regression)."""
    if label_kind == "score":
        return None
    if label_kind == "multi":
        return LabelMap.from_labels(name for ex in examples for name in ex.label)
    return LabelMap.from_labels(ex.label for ex in examples)
