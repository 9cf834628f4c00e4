"""Reading documents for an index, and building or updating an index from a documents file.

A documents file is JSONL (optionally .gz): one object per line with `id` (string or integer) and
`text`; every other field is kept as metadata, returned with each hit and usable in filters.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.data.text import check_readable, iter_jsonl, iter_lines
from bertkit.errors import BertkitError, InputFileError
from bertkit.progress import progress_bar
from bertkit.search.index import IdsAlreadyIndexed, Index
from bertkit.search.store import metadata_json
from bertkit.tokenizer.encoding import TextTooLongError
from bertkit.tokenizer.tokenizer import EMPTY_TEXT, InvalidTextError

CHUNK = 4096   # documents encoded and added per step: bounded memory, length-sorted batches inside


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    metadata: dict[str, Any]
    line: int = 0        # its line in the documents file


def read_documents(path: str | Path, require_text: bool = True) -> Iterator[Document]:
    path = check_readable(path, (".jsonl",))
    seen: set[str] = set()
    for number, row in iter_jsonl(path):
        doc_id = row.pop("id", None)
        if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool) or str(doc_id) == "":
            raise InputFileError(path, "missing 'id' (a non-empty string or integer)", line=number)
        doc_id = str(doc_id)
        if doc_id in seen:
            raise InputFileError(path, f"id {doc_id!r} appears twice in this file", line=number)
        seen.add(doc_id)
        text = row.pop("text", None)
        if require_text and not isinstance(text, str):
            raise InputFileError(path, "missing 'text' (a string)", line=number)
        if require_text and not text.strip():
            raise InputFileError(path, f"'text' {EMPTY_TEXT}", line=number)
        try:
            if require_text:        # what is indexed; a file of ids to delete keeps only the ids
                metadata_json(row)
        except BertkitError as err:
            raise InputFileError(path, str(err), line=number) from None
        yield Document(doc_id, text if isinstance(text, str) else "", row, number)


def _chunks(documents: Iterator[Document], size: int) -> Iterator[list[Document]]:
    chunk: list[Document] = []
    for document in documents:
        chunk.append(document)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def add_documents(index: Index, path: str | Path, replace: bool, chunk_size: int = CHUNK,
                  progress: bool = False) -> int:
    """Encode and add (or upsert) every document of a file; returns how many. Call index.save() after.
    progress: a bar counting documents (the file is streamed, so without a total)."""
    count = 0
    bar = progress_bar(None, progress, desc="indexing", unit="doc")
    try:
        for chunk in _chunks(read_documents(path), chunk_size):
            write = index.upsert if replace else index.add
            try:
                write([d.id for d in chunk], [d.text for d in chunk], metadata=[d.metadata for d in chunk])
            except IdsAlreadyIndexed as err:        # name the file and the line of the first one
                line = next(d.line for d in chunk if d.id == err.ids[0])
                raise IdsAlreadyIndexed(err.ids, f"{path}:{line}: ") from None
            except TextTooLongError as err:         # the encoder names "text N" of the chunk: name its line
                document = chunk[err.index]
                raise InputFileError(path, f"document {document.id!r} has {err.length} tokens, over the limit of "
                                           f"{err.limit}; pass --long-texts truncate or --long-texts sliding-window",
                                     line=document.line) from None
            except InvalidTextError as err:
                document = chunk[err.index]
                raise InputFileError(path, f"'text' of document {document.id!r} {err.reason}",
                                     line=document.line) from None
            count += len(chunk)
            if bar is not None:
                bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
    if count == 0:
        raise InputFileError(path, "has no documents")
    return count


def read_ids(path: str | Path) -> list[str]:
    """Ids to delete: a .txt file (one id per line) or .jsonl (field `id`)."""
    path = check_readable(path, (".txt", ".jsonl"))
    if path.name.removesuffix(".gz").endswith(".txt"):
        return [line.strip() for _, line in iter_lines(path) if line.strip()]
    return [d.id for d in read_documents(path, require_text=False)]
