"""Reading labeled data files as text: UTF-8 with or without BOM, gzip, and GB18030/GBK only when asked.

Chinese data often arrives GBK-encoded. Guessing encodings silently corrupts text, so a file that is not
valid UTF-8 stops with the file, the line and, when the bytes decode as GB18030, the flag that reads it.
"""
from __future__ import annotations

import codecs
import gzip
from pathlib import Path
from typing import Iterator

from bertkit.errors import InputFileError

_GZIP_MAGIC = b"\x1f\x8b"


def read_bytes(path: str | Path) -> bytes:
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "file not found")
    data = path.read_bytes()
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise InputFileError(path, f"broken gzip file ({err}); re-create it or pass the uncompressed file") from None
    return data


def _normalize_encoding(encoding: str) -> str:
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise InputFileError("--encoding", f"unknown encoding {encoding!r}; use utf-8 or gb18030") from None


def _decode_line(raw: bytes, encoding: str, path: Path, line_no: int) -> str:
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as err:
        if encoding in ("utf-8", "utf-8-sig") and _looks_like_gb18030(raw):
            hint = "the bytes look like GBK/GB18030 Chinese text; pass --encoding gb18030"
        else:
            hint = "pass --encoding with the file's real encoding (e.g. gb18030, latin-1)"
        raise InputFileError(path, f"not valid {encoding} (byte {err.start} of the line); {hint}",
                             line_no) from None


def _looks_like_gb18030(raw: bytes) -> bool:
    try:
        text = raw.decode("gb18030")
    except UnicodeDecodeError:
        return False
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def iter_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its newline) for every line; a UTF-8 BOM is dropped.

    Splits on b"\\n" only (not on Unicode line separators inside a text); b"\\n" never occurs inside a
    GB18030 multi-byte character, so the same split works for both encodings.
    """
    path = Path(path)
    encoding = _normalize_encoding(encoding)
    data = read_bytes(path)
    if data.startswith(codecs.BOM_UTF8) and encoding in ("utf-8", "utf-8-sig"):
        data = data[len(codecs.BOM_UTF8):]
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()  # the empty piece after the final newline is not a line
    for index, raw in enumerate(pieces):
        yield index + 1, _decode_line(raw.rstrip(b"\r"), encoding, path, index + 1)


def read_text(path: str | Path, encoding: str = "utf-8") -> str:
    """The whole file as one string (for JSON documents such as SQuAD), with the same error reporting."""
    return "\n".join(line for _, line in iter_lines(path, encoding))
