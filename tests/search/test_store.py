"""The document store's filters: field names and values reach SQLite only as bound parameters, and a
filter query that runs past its time limit is interrupted."""
from __future__ import annotations

import pytest

from bertkit.errors import BertkitError, TimeLimitExceeded
from bertkit.search.store import DocumentStore

# Each closes the JSON-path string literal that an f-string built, then adds SQL of its own. With the
# field spliced into the SQL text, the first matched every document whatever its value (the filter was
# bypassed), and the second ran a recursive query (without its LIMIT it never ends and pins the thread).
INJECTIONS = [
    "' || char(34)) IS NULL OR 1=1 OR (1 = '",
    "' || char(34)) IS NULL OR (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 1000) "
    "SELECT max(x) FROM c) OR (1 = '",
    "kind'); DROP TABLE documents; --",
    'kind"',
    "kind\\",
    "",
]


@pytest.fixture
def store(tmp_path):
    store = DocumentStore(tmp_path / "store.sqlite")
    store.put([(i, f"doc-{i}", f"text {i}", {"kind": "animal" if i % 2 else "greeting", "year": 2000 + i % 3,
                                              "ok": i % 4 == 0, "名前": f"n{i % 2}", "a.b-c": "x"})
               for i in range(12)])
    store.commit()
    yield store
    store.close()


@pytest.mark.parametrize("field", INJECTIONS)
def test_injection_in_a_field_name_is_refused_and_runs_nothing(store, field):
    with pytest.raises(BertkitError, match="metadata field name"):
        store.matching_row_ids({field: "no such value"})
    assert store.count() == 12


def test_filters_match_by_value_with_bound_parameters(store):
    assert store.matching_row_ids({"kind": "animal"}) == [1, 3, 5, 7, 9, 11]
    assert store.matching_row_ids({"kind": "animal", "year": [2000, 2002]}) == [3, 5, 9, 11]
    assert store.matching_row_ids({"ok": True}) == [0, 4, 8]
    assert store.matching_row_ids({"名前": "n0", "a.b-c": "x"}) == [0, 2, 4, 6, 8, 10]
    assert store.matching_row_ids({"id": ["doc-3", "doc-4"]}) == [3, 4]
    assert store.matching_row_ids({"missing": None}) == list(range(12))
    assert store.matching_row_ids({"kind": []}) == []
    # A value that looks like SQL is only ever compared as a value.
    assert store.matching_row_ids({"kind": "animal' OR '1'='1"}) == []
    # Many values are one bound JSON array: no "too many SQL variables".
    assert sorted(store.matching_row_ids({"id": [f"doc-{i}" for i in range(100_000)]})) == list(range(12))


def test_a_filter_query_past_its_time_limit_is_interrupted(tmp_path):
    store = DocumentStore(tmp_path / "big.sqlite")
    store.put([(i, f"d{i}", "", {"kind": "a"}) for i in range(20_000)])
    store.commit()
    # A zero limit has passed by the first progress check, which comes long before 20,000 rows are read.
    with pytest.raises(TimeLimitExceeded, match="kind ran over its 0 s limit"):
        store.matching_row_ids({"kind": "a"}, timeout_s=0)
    # The limit applies to that query only: the next one runs to the end.
    assert len(store.matching_row_ids({"kind": "a"})) == 20_000
    store.close()


@pytest.mark.parametrize("schema", [
    "CREATE VIEW documents AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
    "SELECT x AS row_id, '' AS doc_id, '' AS text, '{}' AS metadata FROM c",
    "CREATE TABLE documents (row_id INTEGER PRIMARY KEY, doc_id TEXT, text TEXT, metadata TEXT); "
    "CREATE TABLE log (x); CREATE TRIGGER t AFTER INSERT ON documents BEGIN INSERT INTO log VALUES (1); END",
])
def test_a_crafted_store_is_refused_on_open(tmp_path, schema):
    import sqlite3

    path = tmp_path / "store.1.sqlite"
    connection = sqlite3.connect(path)
    connection.executescript(schema)
    connection.close()
    for readonly in (True, False):
        with pytest.raises(BertkitError, match="not a bertkit document store"):
            DocumentStore(path, readonly=readonly)
