"""Reading text files line by line: UTF-8 (BOM or not), .gz, errors that name the file and line.

GB18030/GBK files (common for Chinese corpora) get a clear error suggesting `encoding="gb18030"`,
which reads them.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Iterator

from bertkit.errors import InputFileError

TEXT_SUFFIXES = (".txt", ".jsonl", ".tsv", ".csv", ".json", ".conll")


def _suffix(path: Path) -> str:
    return path.with_suffix("").suffix if path.suffix == ".gz" else path.suffix


def check_readable(path: str | Path, suffixes: tuple[str, ...] = TEXT_SUFFIXES) -> Path:
    path = Path(path)
    if not path.exists():
        raise InputFileError(path, "no such file")
    if path.is_dir():
        raise InputFileError(path, "is a folder; pass a file")
    if _suffix(path).lower() not in suffixes:
        raise InputFileError(path, f"unsupported file type {_suffix(path) or '(none)'!r}; expected "
                                   f"{', '.join(suffixes)} (optionally .gz)")
    return path


def _open_binary(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def iter_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """Yield (line_number, line without its newline), 1-based. A UTF-8 BOM is dropped."""
    path = Path(path)
    try:
        with _open_binary(path) as raw:
            for number, data in enumerate(raw, start=1):
                if number == 1 and b"\x00" in data[:1024]:
                    raise InputFileError(path, "looks like a binary file (NUL bytes), not text")
                try:
                    line = data.decode(encoding)
                except UnicodeDecodeError as err:
                    hint = (" The file looks GB18030/GBK-encoded: pass encoding gb18030 (--encoding gb18030)."
                            if _decodes_as_gb18030(data) else "")
                    raise InputFileError(path, f"invalid {encoding} bytes at column {err.start + 1}.{hint}",
                                         line=number) from None
                if number == 1:
                    line = line.removeprefix("\ufeff")
                yield number, line.rstrip("\r\n")
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise InputFileError(path, f"cannot read: {err}") from None


def _decodes_as_gb18030(data: bytes) -> bool:
    try:
        data.decode("gb18030")
        return True
    except UnicodeDecodeError:
        return False


def read_texts(path: str | Path, field: str = "text", encoding: str = "utf-8") -> list[str]:
    """Texts from a .txt file (one per line) or .jsonl (one object per line, `field` holds the text).

    Every line of a .txt file is one text, empty ones included (their vectors are defined); an empty
    file is an error.
    """
    path = check_readable(path, (".txt", ".jsonl"))
    texts: list[str] = []
    is_jsonl = _suffix(path).lower() == ".jsonl"
    for number, line in iter_lines(path, encoding):
        if not is_jsonl:
            texts.append(line)
            continue
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputFileError(path, f"invalid JSON ({err.msg} at column {err.colno})", line=number) from None
        if not isinstance(row, dict) or field not in row:
            raise InputFileError(path, f"missing field {field!r}", line=number)
        if not isinstance(row[field], str):
            raise InputFileError(path, f"field {field!r} must be a string, got {type(row[field]).__name__}",
                                 line=number)
        texts.append(row[field])
    if not texts:
        raise InputFileError(path, "is empty; expected one text per line")
    return texts


__all__ = ["check_readable", "iter_lines", "read_texts"]
