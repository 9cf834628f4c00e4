"""The document store beside the vectors: user ids, texts and metadata in one SQLite file.

Vector backends know only int64 row ids; this store maps the user's ids (any string) to those row ids
and keeps every other field of a document as JSON metadata. Filters on metadata fields are answered
here, by SQL, and the resulting row ids restrict the vector search (the search never over-fetches).
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    row_id   INTEGER PRIMARY KEY,
    doc_id   TEXT NOT NULL UNIQUE,
    text     TEXT NOT NULL,
    metadata TEXT NOT NULL
);
"""

FilterValue = str | int | float | bool | None | Sequence[str | int | float | bool]


@dataclass(frozen=True)
class StoredDocument:
    row_id: int
    doc_id: str
    text: str
    metadata: dict[str, Any]


def _json_path(field: str) -> str:
    if not field or '"' in field or "\\" in field:
        raise BertkitError(f"filter field {field!r}: use a plain metadata field name (no quotes or backslashes)")
    return f'$."{field}"'


def _sql_value(value: Any) -> Any:
    # json_extract returns JSON true/false as 1/0, so compare booleans as integers.
    return int(value) if isinstance(value, bool) else value


class DocumentStore:
    """SQLite table `documents(row_id, doc_id, text, metadata)`; one store per index generation."""

    def __init__(self, path: Path, readonly: bool = False):
        self.path = Path(path)
        if readonly:
            # A saved generation is never modified: writers copy it to the next generation first.
            if not self.path.is_file():
                raise BertkitError(f"{self.path}: the index's document store is missing; rebuild the index")
            self.connection = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        else:
            self.connection = sqlite3.connect(str(self.path))
            self.connection.executescript(_SCHEMA)

    def close(self) -> None:
        self.connection.close()

    def commit(self) -> None:
        self.connection.commit()

    def count(self) -> int:
        return self.connection.execute("SELECT COUNT(*) FROM documents").fetchone()[0]

    def next_row_id(self) -> int:
        return (self.connection.execute("SELECT MAX(row_id) FROM documents").fetchone()[0] or -1) + 1

    def row_ids_for(self, doc_ids: Iterable[str]) -> dict[str, int]:
        """Map the given user ids to row ids; ids not in the store are absent from the result."""
        found: dict[str, int] = {}
        doc_ids = [str(d) for d in doc_ids]
        for start in range(0, len(doc_ids), 500):  # stay below SQLite's bound-parameter limit
            chunk = doc_ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for doc_id, row_id in self.connection.execute(
                    f"SELECT doc_id, row_id FROM documents WHERE doc_id IN ({marks})", chunk):
                found[doc_id] = row_id
        return found

    def put(self, rows: Sequence[tuple[int, str, str, dict[str, Any]]]) -> None:
        """Insert or replace (row_id, doc_id, text, metadata) rows."""
        self.connection.executemany(
            "INSERT OR REPLACE INTO documents(row_id, doc_id, text, metadata) VALUES (?, ?, ?, ?)",
            [(r, d, t, json.dumps(m, ensure_ascii=False)) for r, d, t, m in rows])

    def remove(self, row_ids: Sequence[int]) -> None:
        self.connection.executemany("DELETE FROM documents WHERE row_id = ?", [(int(r),) for r in row_ids])

    def get(self, row_ids: Sequence[int]) -> dict[int, StoredDocument]:
        found: dict[int, StoredDocument] = {}
        row_ids = [int(r) for r in row_ids]
        for start in range(0, len(row_ids), 500):
            chunk = row_ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for row_id, doc_id, text, meta in self.connection.execute(
                    f"SELECT row_id, doc_id, text, metadata FROM documents WHERE row_id IN ({marks})", chunk):
                found[row_id] = StoredDocument(row_id, doc_id, text, json.loads(meta))
        return found

    def all_row_ids(self) -> list[int]:
        return [r for (r,) in self.connection.execute("SELECT row_id FROM documents ORDER BY row_id")]

    def iter_documents(self, batch_size: int = 1000) -> Iterable[StoredDocument]:
        cursor = self.connection.execute("SELECT row_id, doc_id, text, metadata FROM documents ORDER BY row_id")
        while rows := cursor.fetchmany(batch_size):
            for row_id, doc_id, text, meta in rows:
                yield StoredDocument(row_id, doc_id, text, json.loads(meta))

    def matching_row_ids(self, filter: dict[str, FilterValue]) -> list[int]:
        """Row ids of documents whose metadata matches every field of `filter`.

        A value matches by equality; a list or tuple matches any of its items. The key `id` filters on
        the user's ids.
        """
        clauses, params = [], []
        for field, value in filter.items():
            column = "doc_id" if field == "id" else f"json_extract(metadata, '{_json_path(field)}')"
            if isinstance(value, (list, tuple, set, frozenset)):
                values = [_sql_value(v) for v in value]
                if not values:
                    return []
                clauses.append(f"{column} IN ({','.join('?' * len(values))})")
                params.extend(values)
            elif value is None:
                clauses.append(f"{column} IS NULL")
            else:
                clauses.append(f"{column} = ?")
                params.append(_sql_value(value))
        where = " AND ".join(clauses) if clauses else "1"
        return [r for (r,) in self.connection.execute(f"SELECT row_id FROM documents WHERE {where}", params)]
