"""POST /search embeds a query as the index embedded its documents, long-text rule included."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from bertkit import Index
from bertkit.search import EncoderSpec, ModelTextEncoder
from bertkit.serve.app import create_app
from bertkit.serve.config import ServeConfig
from bertkit.serve.server import build_service
from servers import DOCUMENTS

LONG_QUERY = " ".join(["the cat sat on the mat", "hello world", "the dog is on a mat"] * 8)   # ~100 tokens


def _index(folder, model_dir, long_texts: str):
    spec = EncoderSpec(str(model_dir), max_length=16, long_texts=long_texts, stride=4)
    index = Index.create(folder, encoder=ModelTextEncoder(spec))
    index.add([d[0] for d in DOCUMENTS], [d[1] for d in DOCUMENTS], metadata=[d[2] for d in DOCUMENTS])
    index.save()
    index.close()
    return folder


@pytest.mark.parametrize("long_texts", ["sliding-window", "truncate"])
def test_search_scores_equal_the_library_for_a_long_query(tmp_path, tiny_model_dir, long_texts):
    pytest.importorskip("faiss")
    folder = _index(tmp_path / "idx", tiny_model_dir, long_texts)
    expected = Index.open(folder).search(LONG_QUERY, k=4)
    service = build_service(ServeConfig(model=str(tiny_model_dir), index=str(folder), backend="thread"))
    with TestClient(create_app(service)) as client:
        answer = client.post("/search", json={"query": LONG_QUERY, "k": 4})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        # a sliding-window index was searched with the query cut to 16 tokens: other scores than the library's
        assert body["query_truncated"] is (long_texts == "truncate")
        assert [h["id"] for h in body["results"]] == [h.id for h in expected]
        assert [h["score"] for h in body["results"]] == pytest.approx([h.score for h in expected], abs=1e-5)
        missing = client.post("/search", json={"query": "cat", "filter": {"knd": "animal"}})
        assert missing.status_code == 422 and "filter field 'knd': no document" in missing.json()["detail"]


def test_an_index_built_with_another_pooling_than_a_whitened_folder_is_served(tmp_path, tiny_model_dir):
    pytest.importorskip("faiss")
    import bertkit
    from bertkit.embed.whitening import whiten_model

    words = [d[1] for d in DOCUMENTS[:3]]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"{words[i % 3]} {words[(i * 7) % 3]} {i}" for i in range(80)) + "\n")
    whitened = tmp_path / "whitened"
    whiten_model(bertkit.load(tiny_model_dir), corpus, whitened, dim=8)       # mean pooling: 32 -> 8 dims
    folder = tmp_path / "idx"
    index = Index.create(folder, encoder=ModelTextEncoder(EncoderSpec(str(whitened), pooling="cls")))
    index.add([d[0] for d in DOCUMENTS], [d[1] for d in DOCUMENTS])          # cls: not whitened, 32 dims
    index.save()
    index.close()
    expected = Index.open(folder).search("the cat", k=3)
    # the server compared the index's 32 dims with the folder's default (whitened mean) 8 and refused to start
    service = build_service(ServeConfig(model=str(whitened), index=str(folder), backend="thread"))
    with TestClient(create_app(service)) as client:
        answer = client.post("/search", json={"query": "the cat", "k": 3})
        assert answer.status_code == 200, answer.text
        assert [h["score"] for h in answer.json()["results"]] == pytest.approx([h.score for h in expected], abs=1e-5)


def test_an_index_built_from_other_layers_names_the_serve_flag_that_fits_it(tmp_path, tiny_model_dir):
    pytest.importorskip("faiss")
    from bertkit.errors import BertkitError

    folder = tmp_path / "idx"
    index = Index.create(folder, encoder=ModelTextEncoder(EncoderSpec(str(tiny_model_dir), layers="-2,-1")))
    index.add([d[0] for d in DOCUMENTS], [d[1] for d in DOCUMENTS])
    index.save()
    index.close()
    # it said only "rebuild the index", though serve --layers makes the server embed queries as the index did
    with pytest.raises(BertkitError, match=r"start it with --layers=-2,-1, or rebuild the index"):
        build_service(ServeConfig(model=str(tiny_model_dir), index=str(folder), backend="thread"))
    expected = Index.open(folder).search("the cat", k=3)
    service = build_service(ServeConfig(model=str(tiny_model_dir), index=str(folder), backend="thread", layers="-2,-1"))
    with TestClient(create_app(service)) as client:
        hits = client.post("/search", json={"query": "the cat", "k": 3}).json()["results"]
        assert [h["score"] for h in hits] == pytest.approx([h.score for h in expected], abs=1e-5)
