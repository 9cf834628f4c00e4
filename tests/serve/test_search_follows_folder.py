"""A server started with --index answers from the generation a writer saved while it runs (index add / delete),
and keeps answering from the one it has when a newer generation cannot be opened."""
from __future__ import annotations

import json
import shutil

import pytest
from fastapi.testclient import TestClient

from bertkit.serve.app import create_app
from bertkit.serve.config import ServeConfig
from bertkit.serve.server import build_service


def _ids(client, query: str, filter: dict | None = None) -> list[str]:
    answer = client.post("/search", json={"query": query, "k": 10, **({"filter": filter} if filter else {})})
    assert answer.status_code == 200, answer.text
    return [hit["id"] for hit in answer.json()["results"]]


@pytest.fixture
def served(tiny_model_dir, index_dir, tmp_path):
    """(a copy of the test index, the service answering from it, its client), the four documents found."""
    folder = tmp_path / "docs"
    shutil.copytree(index_dir, folder)
    service = build_service(ServeConfig(model=str(tiny_model_dir), index=str(folder)))
    with TestClient(create_app(service)) as client:
        assert sorted(_ids(client, "hello world")) == ["d1", "d2", "d3", "d4"]
        yield folder, service, client


def test_added_and_deleted_documents_are_searched_without_a_restart(served):
    import bertkit

    folder, service, client = served
    opened = service.index.index
    assert _ids(client, "hello world") and service.index.index is opened     # nothing saved: no reopening
    before = client.get("/status").json()["index"]

    with bertkit.Index.open(folder, load_model=bertkit.load) as writer:
        writer.add(["d5"], ["trains leave the station at noon"], metadata=[{"kind": "new"}])
        writer.delete(["d1"])
        writer.save()

    assert _ids(client, "trains", {"kind": "new"}) == ["d5"]
    assert sorted(_ids(client, "hello world")) == ["d2", "d3", "d4", "d5"]
    after = client.get("/status").json()["index"]
    assert after["generation"] == before["generation"] + 1
    assert (before["documents"], after["documents"]) == (4, 4)
    assert after["refresh_error"] is None


def test_a_generation_that_cannot_be_opened_leaves_the_old_one_answering(served):
    folder, _, client = served
    manifest_path = folder / "index.json"
    manifest = json.loads(manifest_path.read_text())
    missing = manifest["generation"] + 7
    broken = dict(manifest, generation=missing, store=f"store.{missing}.sqlite")
    manifest_path.write_text(json.dumps(broken))

    assert sorted(_ids(client, "hello world")) == ["d1", "d2", "d3", "d4"]
    status = client.get("/status").json()["index"]
    assert status["generation"] == manifest["generation"]
    assert "cannot be opened" in status["refresh_error"] and "store." in status["refresh_error"]

    manifest_path.write_text(json.dumps(manifest))         # put back: the error clears on the next search
    assert sorted(_ids(client, "hello world")) == ["d1", "d2", "d3", "d4"]
    assert client.get("/status").json()["index"]["refresh_error"] is None


def test_a_rebuilt_index_the_model_cannot_query_leaves_the_old_one_answering(served):
    import numpy as np

    import bertkit

    folder, _, client = served
    with bertkit.Index.create(folder, dim=16, overwrite=True) as rebuilt:     # vectors from another model
        rebuilt.add(["x1"], ["other vectors"], vectors=np.ones((1, 16), dtype=np.float32))
        rebuilt.save()
    assert sorted(_ids(client, "hello world")) == ["d1", "d2", "d3", "d4"]
    status = client.get("/status").json()["index"]
    assert "holds 16-dimensional vectors but the model gives 32" in status["refresh_error"]
    assert status["documents"] == 4
