"""Reading text files line by line: UTF-8 (BOM or not), .gz, errors that name the file and line.

GB18030/GBK files (common for Chinese corpora) get a clear error suggesting `encoding="gb18030"`,
which reads them.
"""
from __future__ import annotations

import codecs
import gzip
import json
from importlib import resources
from pathlib import Path
from typing import Iterator

from bertkit.errors import InputFileError

TEXT_SUFFIXES = (".txt", ".jsonl", ".tsv", ".csv", ".json", ".conll")


def file_suffix(path: Path) -> str:
    """The suffix that names the format: a .gz file's inner one (train.jsonl.gz -> .jsonl)."""
    return path.with_suffix("").suffix if path.suffix == ".gz" else path.suffix


def check_file(path: str | Path, folder_hint: str = "pass a file") -> Path:
    """A path that exists and is not a folder, else one InputFileError naming it."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(path, "file not found")
    if path.is_dir():
        raise InputFileError(path, f"is a folder; {folder_hint}")
    return path


def check_readable(path: str | Path, suffixes: tuple[str, ...] = TEXT_SUFFIXES) -> Path:
    path = check_file(path)
    if file_suffix(path).lower() not in suffixes:
        named = [suffix or "no extension" for suffix in suffixes]
        raise InputFileError(path, f"unsupported file type {file_suffix(path) or '(none)'!r}; expected "
                                   f"{', '.join(named)} (optionally .gz)")
    return path


def _open_binary(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def normalize_encoding(encoding: str) -> str:
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise InputFileError("--encoding", f"unknown encoding {encoding!r}; use utf-8 or gb18030") from None


def iter_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """Yield (line_number, line without its newline), 1-based, streaming. A UTF-8 BOM is dropped.

    Splits on b"\\n" only, which never occurs inside a GB18030 multi-byte character, so one split serves both.
    """
    path = Path(path)
    encoding = normalize_encoding(encoding)
    if not path.is_file():
        raise InputFileError(path, "is a folder; pass a file" if path.is_dir() else "file not found")
    try:
        with _open_binary(path) as raw:
            for number, data in enumerate(raw, start=1):
                if number == 1:
                    if b"\x00" in data[:1024]:
                        raise InputFileError(path, "looks like a binary file (NUL bytes), not text")
                    if data.startswith(codecs.BOM_UTF8) and encoding == "utf-8":
                        data = data[len(codecs.BOM_UTF8):]
                yield number, _decode_line(data.rstrip(b"\r\n"), encoding, path, number)
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise InputFileError(path, f"cannot read: {err}") from None


def _decode_line(data: bytes, encoding: str, path: Path, number: int) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        if encoding == "utf-8" and _looks_like_gb18030(data):
            hint = "the bytes look like GBK/GB18030 Chinese text; pass --encoding gb18030"
        else:
            hint = "pass --encoding with the file's real encoding (e.g. gb18030, latin-1)"
        raise InputFileError(path, f"invalid {encoding} bytes at column {err.start + 1}; {hint}",
                             line=number) from None


def _looks_like_gb18030(data: bytes) -> bool:
    try:
        text = data.decode("gb18030")
    except UnicodeDecodeError:
        return False
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def read_text(path: str | Path, encoding: str = "utf-8") -> str:
    """The whole file as one string (JSON documents such as SQuAD), with the same error reporting."""
    return "\n".join(line for _, line in iter_lines(path, encoding))


def iter_jsonl(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, dict]]:
    """(line number, JSON object) for each non-blank line of a .jsonl file; invalid JSON or a line that is not
    an object stops with the file and line."""
    for number, line in iter_lines(path, encoding):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputFileError(path, f"invalid JSON ({err.msg}, column {err.colno})", line=number) from None
        if not isinstance(row, dict):
            raise InputFileError(path, f"expected a JSON object, got {type(row).__name__}", line=number)
        yield number, row


def read_texts(path: str | Path, field: str = "text", encoding: str = "utf-8") -> list[str]:
    """Texts from a .txt file (one per line) or .jsonl (one object per line, `field` holds the text).

    Every line of a .txt file is one text, empty ones included (so line N stays text N; encoding refuses an
    empty text, naming its line); an empty file is an error.
    """
    path = check_readable(path, (".txt", ".jsonl"))
    if file_suffix(path).lower() != ".jsonl":
        texts = [line for _, line in iter_lines(path, encoding)]
        if not texts:
            raise InputFileError(path, "is empty; expected one text per line")
        return texts
    texts: list[str] = []
    for number, row in iter_jsonl(path, encoding):
        if field not in row:
            raise InputFileError(path, f"missing field {field!r}", line=number)
        if not isinstance(row[field], str):
            raise InputFileError(path, f"field {field!r} must be a string, got {type(row[field]).__name__}",
                                 line=number)
        texts.append(row[field])
    if not texts:
        raise InputFileError(path, "is empty; expected one text per line")
    return texts


__all__ = ["check_readable", "iter_jsonl", "iter_lines", "read_text", "read_texts"]


def builtin_sentences() -> list[str]:
    """The 400 WordNet definitions shipped in bertkit/data (search demo, the default int8 gate sample)."""
    text = resources.files("bertkit.data").joinpath("quickstart_sentences.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line and not line.startswith("#")]
