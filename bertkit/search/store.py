"""The document store beside the vectors: user ids, texts and metadata in one SQLite file.

Vector backends know only int64 row ids; this store maps the user's ids (any string) to those row ids
and keeps every other field of a document as JSON metadata. Filters on metadata fields are answered
here, by SQL, and the resulting row ids restrict the vector search (the search never over-fetches).
"""
from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertkit.errors import BertkitError, TimeLimitExceeded

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    row_id   INTEGER PRIMARY KEY,
    doc_id   TEXT NOT NULL UNIQUE,
    text     TEXT NOT NULL,
    metadata TEXT NOT NULL
);
"""

FilterValue = str | int | float | bool | None | Sequence[str | int | float | bool]

# A filter field is a metadata key: letters (any script), digits, `_`, `-` and `.`, up to 128 characters.
# Field names and values reach SQLite only as bound parameters; the pattern keeps the JSON path well formed
# (`$."field"` has no escape for a quote) and error messages readable.
FIELD_NAME = re.compile(r"\w[\w.\-]{0,127}")
# SQLite calls the deadline check every this many virtual-machine instructions: well under a millisecond
# apart, a cost too small to measure on a query.
PROGRESS_INSTRUCTIONS = 10_000


@dataclass(frozen=True)
class StoredDocument:
    row_id: int
    doc_id: str
    text: str
    metadata: dict[str, Any]


def _json_path(field: str) -> str:
    if not isinstance(field, str) or not FIELD_NAME.fullmatch(field):
        raise BertkitError(f"filter field {str(field)[:80]!r}: a metadata field name is letters, digits, '_', "
                           "'-' and '.' (at most 128 characters)")
    return f'$."{field}"'


def metadata_json(metadata: Any) -> str:
    """A document's metadata as stored: a JSON object of JSON values. NaN and infinity are refused, since
    SQLite's JSON functions reject the whole row ('malformed JSON') and every filtered search would fail.
    Raises BertkitError naming the field; callers add which document."""
    if not isinstance(metadata, dict):
        raise BertkitError(f"metadata must be an object of fields, got {type(metadata).__name__}")
    for key, value in metadata.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as err:
            why = "NaN or infinite numbers" if isinstance(err, ValueError) else str(err)
            raise BertkitError(f"metadata field {str(key)[:80]!r} cannot be stored as JSON ({why})") from None
    return json.dumps(metadata, ensure_ascii=False)


def _sql_value(value: Any) -> Any:
    if not isinstance(value, (str, int, float)) and value is not None:
        raise BertkitError(f"filter value {str(value)[:40]}: a filter value is a string, number, boolean or null, "
                           f"or a list of those (got {type(value).__name__})")
    # json_extract returns JSON true/false as 1/0, so compare booleans as integers.
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
        raise BertkitError(f"filter value {str(value)[:40]}: an integer filter value must fit in 64 bits")
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
        self._check_schema()

    def _check_schema(self) -> None:
        """An index folder may come from anyone: refuse a store whose `documents` is a view (whose SQL would run
        on every query) or that holds triggers or anything else bertkit did not create."""
        objects = self.connection.execute("SELECT type, name FROM sqlite_master").fetchall()
        unexpected = [f"{kind} {name!r}" for kind, name in objects if (kind, name) != ("table", "documents")
                      and not (kind == "index" and name.startswith("sqlite_autoindex_documents_"))]
        if unexpected or ("table", "documents") not in objects:
            self.connection.close()
            raise BertkitError(f"{self.path}: not a bertkit document store (it holds "
                               f"{', '.join(unexpected[:3]) or 'no documents table'}); rebuild the index")

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
            [(r, d, t, metadata_json(m)) for r, d, t, m in rows])

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

    def matching_row_ids(self, filter: dict[str, FilterValue], timeout_s: float | None = None) -> list[int]:
        """Row ids of documents whose metadata matches every field of `filter`.

        A value matches by equality; a list or tuple matches any of its items. The key `id` filters on
        the user's ids. The SQL text is fixed: field names (checked against FIELD_NAME) and values are
        bound parameters. With `timeout_s`, a query still running after that long is interrupted and
        raises TimeLimitExceeded.
        """
        clauses, params = [], []
        for field, value in filter.items():
            if field == "id":
                column = "doc_id"
            else:
                column = "json_extract(metadata, ?)"
                params.append(_json_path(field))
            if isinstance(value, (list, tuple, set, frozenset)):
                values = [_sql_value(v) for v in value]
                if not values:
                    return []
                # One bound JSON array however many values: no limit on SQL variables to run into.
                clauses.append(f"{column} IN (SELECT value FROM json_each(?))")
                params.append(json.dumps(values))
            elif value is None:
                clauses.append(f"{column} IS NULL")
            else:
                clauses.append(f"{column} = ?")
                params.append(_sql_value(value))
        where = " AND ".join(clauses) if clauses else "1"
        with self._deadline(timeout_s, f"the filter on {', '.join(map(str, filter))}"):
            rows = [r for (r,) in self.connection.execute(f"SELECT row_id FROM documents WHERE {where}", params)]
            if not rows:            # a misspelt field matches nothing, silently: say so instead
                self._check_fields_exist([f for f, v in filter.items() if f != "id" and v is not None])
            return rows

    def _check_fields_exist(self, fields: list[str]) -> None:
        """BertkitError when some field is in no document's metadata, naming the fields that are."""
        missing = [f for f in fields if self.connection.execute(
            "SELECT 1 FROM documents WHERE json_type(metadata, ?) IS NOT NULL LIMIT 1", (_json_path(f),)
        ).fetchone() is None]
        if not missing or not self.count():
            return
        known = [k for (k,) in self.connection.execute(
            "SELECT DISTINCT j.key FROM documents, json_each(documents.metadata) AS j ORDER BY j.key LIMIT 21")]
        shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "") if known else "none"
        raise BertkitError(f"filter field {missing[0]!r}: no document in the index has it (metadata fields: {shown})")

    @contextlib.contextmanager
    def _deadline(self, timeout_s: float | None, what: str) -> Iterator[None]:
        """Interrupt the statements run inside once `timeout_s` seconds have passed (None: no limit)."""
        if timeout_s is not None:
            deadline = time.monotonic() + timeout_s
            self.connection.set_progress_handler(lambda: time.monotonic() > deadline, PROGRESS_INSTRUCTIONS)
        try:
            yield
        except sqlite3.OperationalError as err:
            if "malformed JSON" in str(err):    # NaN or Infinity stored by a version that did not refuse them
                raise BertkitError(f"{self.path}: some document's metadata holds NaN or Infinity, which "
                                   "filters cannot read; update or delete that document, or rebuild the index"
                                   ) from None
            if "interrupt" not in str(err):
                raise
            raise TimeLimitExceeded(f"{what} ran over its {timeout_s:g} s limit on {self.path.name} and was "
                                    "stopped; narrow the filter or retry") from None
        finally:
            self.connection.set_progress_handler(None, 0)
