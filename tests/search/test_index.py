"""The index test suite, run against every vector backend (Faiss, and Milvus Lite when installed)."""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.search import Index, IndexSettings

DIM = 16


def _backends():
    backends = ["faiss"]
    try:
        import milvus_lite  # noqa: F401
        import pymilvus  # noqa: F401
        backends.append("milvus")
    except ImportError:
        pass
    return backends


@pytest.fixture(params=_backends())
def backend(request):
    return request.param


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


def _build(folder, backend: str, n: int = 60, **settings) -> tuple[Index, np.ndarray]:
    vectors = _vectors(n)
    index = Index.create(folder, settings=IndexSettings(backend=backend, **settings))
    index.add([f"doc-{i}" for i in range(n)], [f"text {i}" for i in range(n)], vectors=vectors,
              metadata=[{"group": ["a", "b", "c"][i % 3], "year": 2000 + i % 5} for i in range(n)])
    index.save()
    return index, vectors


class HashEncoder:
    """A deterministic stand-in for a model: a text's vector depends only on its words."""

    def encode(self, texts):
        out = np.zeros((len(texts), DIM), np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row] += np.random.default_rng(abs(hash(word)) % 2**32).standard_normal(DIM)
        return out

    def spec(self):
        return {}


def test_search_finds_each_vector_with_string_ids_text_and_metadata(tmp_path, backend):
    index, vectors = _build(tmp_path / "idx", backend)
    hits = index.search(vectors[7], k=3)
    assert hits[0].id == "doc-7" and hits[0].text == "text 7"
    assert hits[0].metadata == {"group": "b", "year": 2002}
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)  # cosine of a vector with itself
    assert hits[0].as_json()["group"] == "b"
    assert len(index) == 60 and index.info().kind == "flat"
    index.close()


def test_add_rejects_existing_ids_and_upsert_replaces(tmp_path, backend):
    index, vectors = _build(tmp_path / "idx", backend)
    with pytest.raises(BertkitError, match="already in the index"):
        index.add(["doc-1"], ["again"], vectors=vectors[:1])
    index.upsert(["doc-1", "new"], ["replaced", "brand new"], vectors=np.stack([-vectors[1], vectors[2]]),
                 metadata=[{"group": "z"}, {}])
    assert len(index) == 61
    top = index.search(-vectors[1], k=1)[0]
    assert (top.id, top.text, top.metadata) == ("doc-1", "replaced", {"group": "z"})
    assert "doc-1" not in [h.id for h in index.search(vectors[1], k=5)]
    index.close()


def test_deleted_ids_never_come_back(tmp_path, backend):
    index, vectors = _build(tmp_path / "idx", backend)
    missing = index.delete(["doc-3", "doc-4", "not-there"])
    assert missing == ["not-there"]
    for hits in (index.search(vectors[3], k=60), index.search(vectors[4], k=10, filter={"group": "a"})):
        assert not {"doc-3", "doc-4"} & {h.id for h in hits}
    index.save()
    index.close()
    reopened = Index.open(tmp_path / "idx")
    assert len(reopened) == 58
    assert not {"doc-3", "doc-4"} & {h.id for h in reopened.search(vectors[3], k=60)}
    reopened.close()


def test_filters_restrict_the_search_itself(tmp_path, backend):
    index, vectors = _build(tmp_path / "idx", backend)
    hits = index.search(vectors[0], k=10, filter={"group": "b"})
    assert len(hits) == 10 and all(h.metadata["group"] == "b" for h in hits)
    # A narrow filter still returns every match, even those far from the query: no over-fetching.
    hits = index.search(vectors[0], k=5, filter={"group": "c", "year": [2000, 2001]})
    expected = {f"doc-{i}" for i in range(60) if i % 3 == 2 and i % 5 in (0, 1)}
    assert {h.id for h in hits} <= expected and len(hits) == min(5, len(expected))
    assert index.search(vectors[0], k=5, filter={"id": ["doc-9", "doc-10"]})[0].id in ("doc-9", "doc-10")
    assert index.search(vectors[0], k=5, filter={"group": "nope"}) == []
    index.close()


def test_reopen_answers_as_before(tmp_path, backend):
    index, vectors = _build(tmp_path / "idx", backend)
    before = [[h.id for h in hits] for hits in index.search_many(vectors[:5], k=4)]
    index.close()
    reopened = Index.open(tmp_path / "idx")
    assert [[h.id for h in hits] for hits in reopened.search_many(vectors[:5], k=4)] == before
    reopened.close()


_CRASHING_WRITER = """
import os, sys
import numpy as np
from bertkit.search import Index, generations
index = Index.open(sys.argv[1])
vectors = np.random.default_rng(1).standard_normal((20, {dim})).astype(np.float32)
index.add([f"crash-{{i}}" for i in range(20)], ["x"] * 20, vectors=vectors)
index.delete(["doc-0"])
if sys.argv[2] == "during-save":
    # Die after the new generation's files are written, just before the manifest switches to them.
    generations.commit_manifest = lambda *a, **k: os._exit(17)
    index.save()
os._exit(17)
"""


@pytest.mark.parametrize("when", ["before-save", "during-save"])
def test_crash_during_add_leaves_previous_index_usable(tmp_path, backend, when):
    index, vectors = _build(tmp_path / "idx", backend)
    before = [[(h.id, round(h.score, 4)) for h in hits] for hits in index.search_many(vectors[:6], k=5)]
    index.close()
    script = _CRASHING_WRITER.format(dim=DIM)
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script), str(tmp_path / "idx"), when],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 17, result.stderr
    reopened = Index.open(tmp_path / "idx")
    assert len(reopened) == 60
    after = [[(h.id, round(h.score, 4)) for h in hits] for hits in reopened.search_many(vectors[:6], k=5)]
    assert after == before
    # The next writer cleans up the crashed generation and saves normally.
    reopened.add(["later"], ["y"], vectors=vectors[:1])
    reopened.save()
    reopened.close()
    again = Index.open(tmp_path / "idx")
    assert len(again) == 61 and again.search(vectors[0], k=2)[0].id in ("doc-0", "later")
    again.close()


def test_text_queries_use_the_encoder(tmp_path, backend):
    index = Index.create(tmp_path / "idx", encoder=HashEncoder(), settings=IndexSettings(backend=backend))
    index.add(["1", "2", "3"], ["red apples", "green pears", "blue sky"], metadata=[{}, {}, {}])
    index.save()
    assert index.search("apples red", k=1)[0].id == "1"
    index.close()
    assert Index.open(tmp_path / "idx", encoder=HashEncoder()).search("sky blue", k=1)[0].id == "3"


def test_bad_input_gives_clear_errors(tmp_path, backend):
    index = Index.create(tmp_path / "idx", settings=IndexSettings(backend=backend))
    with pytest.raises(BertkitError, match="twice"):
        index.add(["a", "a"], ["x", "y"], vectors=_vectors(2))
    with pytest.raises(BertkitError, match="no encoder"):
        index.add(["a"], ["x"])
    index.close()
    with pytest.raises(BertkitError, match="not a bertkit index"):
        Index.open(tmp_path / "nothing")


# -- Faiss index structures ------------------------------------------------------------------------

def test_ivf_on_too_few_vectors_falls_back_to_flat_with_a_message(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="bertkit.search"):
        index, vectors = _build(tmp_path / "idx", "faiss", n=100, kind="ivf")
    info = index.info()
    assert info.kind == "flat" and "too few" in info.note
    assert "too few" in caplog.text
    assert index.search(vectors[5], k=1)[0].id == "doc-5"


def test_auto_switches_to_ivf_beyond_threshold_and_keeps_working(tmp_path):
    index, vectors = _build(tmp_path / "idx", "faiss", n=2000, ivf_threshold=1000)
    info = index.info()
    assert info.kind == "ivf" and info.params["nlist"] >= 16 and info.params["nprobe"] >= 8
    index.close()
    index = Index.open(tmp_path / "idx")
    assert index.info().kind == "ivf"
    found = sum(index.search(vectors[i], k=1)[0].id == f"doc-{i}" for i in range(50))
    assert found >= 45
    index.delete(["doc-0"])
    assert "doc-0" not in {h.id for h in index.search(vectors[0], k=50)}
    hits = index.search(vectors[0], k=5, filter={"id": ["doc-11", "doc-1999"]})
    assert {h.id for h in hits} == {"doc-11", "doc-1999"}  # a narrow filter probes more lists
    index.upsert(["doc-1"], ["moved"], vectors=-vectors[1:2])
    assert index.search(-vectors[1], k=1)[0].id == "doc-1"
    index.close()


def test_ivfpq_on_request(tmp_path, monkeypatch):
    from bertkit.search import faiss_backend
    monkeypatch.setattr(faiss_backend, "PQ_BITS", 4)  # 16-centroid codebooks train in well under a second
    few, _ = _build(tmp_path / "few", "faiss", n=600, kind="ivfpq")  # PQ needs 2**bits * 39 = 624 points
    assert few.info().kind == "flat" and "too few" in few.info().note
    index, vectors = _build(tmp_path / "idx", "faiss", n=1000, kind="ivfpq")
    info = index.info()
    assert info.kind == "ivfpq" and info.params["pq_m"] >= 1
    found = sum(index.search(vectors[i], k=10)[0].id == f"doc-{i}" for i in range(20))
    assert found >= 10  # PQ codes are lossy; the exact match is usually but not always first
    index.close()


def test_overwrite_keeps_the_old_index_until_the_new_one_is_saved(tmp_path, backend):
    index, vectors = _build(tmp_path / "idx", backend)
    index.close()
    fresh = Index.create(tmp_path / "idx", settings=IndexSettings(backend=backend), overwrite=True)
    fresh.add(["only"], ["one"], vectors=vectors[:1])
    with Index.open(tmp_path / "idx") as reader:      # not saved yet: readers still see the old index
        assert len(reader) == 60
    fresh.save()
    fresh.close()
    with Index.open(tmp_path / "idx") as reader:
        assert len(reader) == 1
    with pytest.raises(BertkitError, match="already holds an index"):
        Index.create(tmp_path / "idx")


def test_create_with_a_loaded_model_saves_and_reopens_with_the_same_vectors(tmp_path, tiny_model_dir):
    """Issue 17: Index.create(..., encoder=bertkit.load(M)) failed on save ('Model' object has no attribute 'spec')."""
    import bertkit

    model = bertkit.load(tiny_model_dir)
    texts = ["the cat sat on the mat", "a red apple", "the old king", "blue sky and sea"]
    index = Index.create(tmp_path / "idx", encoder=model)
    index.add(["a", "b", "c", "d"], texts)
    index.save()
    index.close()
    again = bertkit.Index.open(tmp_path / "idx")   # rebuilt from the manifest's spec, not from the Model object
    assert again.encoder.spec()["model"] == str(tiny_model_dir.resolve())
    expected = model.encode(texts[2:3])[0]
    np.testing.assert_allclose(again.encoder.encode(texts[2:3])[0], expected, atol=1e-5)
    assert again.search(texts[2], k=1)[0].id == "c"
    again.close()


def test_the_search_package_loads_no_model_itself_bertkit_index_does(tmp_path, tiny_model_dir):
    """Issue 16: bertkit.search sits below the API, so it is given a loaded model or a loader; bertkit.Index is
    search.Index with bertkit.load built in, and the three ways of opening encode queries identically."""
    import bertkit
    from bertkit.search import EncoderSpec, ModelTextEncoder

    texts = ["the cat sat on the mat", "a red apple", "the old king", "blue sky and sea"]
    index = Index.create(tmp_path / "idx", encoder=bertkit.load(tiny_model_dir))
    index.add(["a", "b", "c", "d"], texts)
    index.save()
    index.close()
    with pytest.raises(BertkitError) as refused:
        Index.open(tmp_path / "idx")
    message = str(refused.value)
    assert "\n" not in message and str(tiny_model_dir.resolve()) in message
    assert "bertkit.Index.open" in message and "load_model=bertkit.load" in message
    expected = bertkit.load(tiny_model_dir).encode(texts)
    opened = [bertkit.Index.open(tmp_path / "idx"), Index.open(tmp_path / "idx", load_model=bertkit.load),
              Index.open(tmp_path / "idx", encoder=bertkit.load(tiny_model_dir))]
    for reader in opened:
        assert [hit.id for hit in reader.search(texts[1], k=2)][0] == "b"
        np.testing.assert_allclose(reader.encoder.encode(texts), expected, atol=1e-5)
        reader.close()
    assert isinstance(opened[0], Index) and opened[0].encoder._model is not None   # loaded on first query
    # A spec-only encoder given to the search package without a loader says what to pass when it first encodes;
    # bertkit.Index fills in bertkit.load, so the documented ModelTextEncoder(EncoderSpec(...)) keeps working.
    bare = Index.create(tmp_path / "bare", encoder=ModelTextEncoder(EncoderSpec(str(tiny_model_dir))))
    with pytest.raises(BertkitError, match="pass load_model=bertkit.load"):
        bare.add(["a"], texts[:1])
    bare.close()
    with bertkit.Index.create(tmp_path / "api", encoder=ModelTextEncoder(EncoderSpec(str(tiny_model_dir)))) as built:
        built.add(["a", "b", "c", "d"], texts)
        np.testing.assert_allclose(built.encoder.encode(texts), expected, atol=1e-5)


def test_an_object_that_cannot_encode_for_an_index_is_refused_in_one_line(tmp_path):
    with pytest.raises(BertkitError, match="neither a TextEncoder"):
        Index.create(tmp_path / "idx", encoder=object())


def _tamper(folder, **changes):
    import json
    manifest = json.loads((folder / "index.json").read_text())
    (folder / "index.json").write_text(json.dumps({**manifest, **changes}))


@pytest.mark.parametrize("changes, message", [
    ({"store": "../other/store.1.sqlite"}, r"store '../other/store.1.sqlite' must name a file inside"),
    ({"backend_files": ["/etc/passwd"]}, r"backend_files\[0\] '/etc/passwd' must name a file inside"),
    ({"store": None}, r"store must be a non-empty file name, got None"),
    ({"settings": "x"}, r"settings must be an object, got 'x'"),
    ({"settings": {"no_such_setting": 1}}, r"index.json: cannot open generation 1 \(TypeError"),
    ({"info": {"dim": "abc", "kind": "flat"}}, r"index.json: cannot open generation 1 \(ValueError"),
    ({"generation": "1"}, r"generation must be a whole number >= 0, got '1'"),
])
def test_a_tampered_manifest_is_one_error_and_reads_nothing_outside(tmp_path, changes, message):
    """index.json may come from anyone who could write the folder: the files it names stay inside it."""
    _build(tmp_path / "other", "faiss")
    _build(tmp_path / "idx", "faiss")
    _tamper(tmp_path / "idx", **changes)
    with pytest.raises(BertkitError, match=message):
        Index.open(tmp_path / "idx")


def test_a_manifest_that_is_not_an_object_is_one_error(tmp_path):
    _build(tmp_path / "idx", "faiss")
    (tmp_path / "idx" / "index.json").write_text("[]")
    with pytest.raises(BertkitError, match="an index manifest is a JSON object, got list"):
        Index.open(tmp_path / "idx")


def test_an_integer_filter_value_past_64_bits_is_one_error(tmp_path):
    index, _ = _build(tmp_path / "idx", "faiss")
    with pytest.raises(BertkitError, match="must fit in 64 bits"):
        index.search(_vectors(1)[0], 3, filter={"year": 10 ** 30})
    assert len(index.search(_vectors(1)[0], 3, filter={"year": 2001})) == 3


def test_a_filter_on_a_field_no_document_has_is_one_error_naming_the_fields(tmp_path):
    index, vectors = _build(tmp_path / "idx", "faiss")
    # a misspelt field used to match nothing and answer [] like a value that matches nothing
    with pytest.raises(BertkitError, match=r"filter field 'gruop': no document in the index has it "
                                           r"\(metadata fields: group, year\)"):
        index.search(vectors[0], k=5, filter={"gruop": "a"})
    with pytest.raises(BertkitError, match="'colour'"):
        index.search(vectors[0], k=5, filter={"group": "a", "colour": ["red"]})
    assert index.search(vectors[0], k=5, filter={"group": "nope"}) == []     # a known field, no match: no error
    assert len(index.search(vectors[0], k=5, filter={"colour": None})) == 5   # "has no colour" matches all
    index.close()


@pytest.mark.parametrize("bad, message", [("not a dict", "metadata must be an object of fields, got str"),
                                          ({"w": float("nan")}, "metadata field 'w' cannot be stored as JSON"),
                                          ({"w": object()}, "metadata field 'w' cannot be stored as JSON")])
def test_bad_metadata_is_refused_before_anything_is_written(tmp_path, bad, message):
    index, vectors = _build(tmp_path / "idx", "faiss", n=6)
    with pytest.raises(BertkitError, match=f"document 'new': {message}"):
        index.add(["new"], ["text"], vectors=_vectors(1, seed=1), metadata=[bad])
    # the failed add left no vector without its document (it did: the vector went in, then the row failed)
    index.add(["new"], ["text"], vectors=_vectors(1, seed=1), metadata=[{"group": "a"}])
    assert index.save().count == len(index) == 7
    assert len(index.search(vectors[0], k=5, filter={"group": "a"})) == 3     # filters still read every row
    index.close()


def test_filter_values_that_are_not_scalars_are_one_error(tmp_path):
    index, vectors = _build(tmp_path / "idx", "faiss", n=6)
    for value in ({"$gt": 2001}, [[2001]]):
        with pytest.raises(BertkitError, match="a filter value is a string, number, boolean or null"):
            index.search(vectors[0], k=5, filter={"year": value})           # was an sqlite3 traceback
    index.close()


def test_an_old_index_with_nan_metadata_names_the_problem_on_a_filtered_search(tmp_path):
    import json
    import sqlite3

    index, vectors = _build(tmp_path / "idx", "faiss", n=6)
    connection = sqlite3.connect(index.store.path)
    connection.execute("""UPDATE documents SET metadata = '{"group": "a", "w": NaN}' WHERE doc_id = 'doc-1'""")
    connection.commit()
    connection.close()
    assert json.loads((tmp_path / "idx" / "index.json").read_text())["store"] == index.store.path.name
    with pytest.raises(BertkitError, match="metadata holds NaN or Infinity.*update or delete that document"):
        Index.open(tmp_path / "idx").search(vectors[0], k=5, filter={"group": "a"})


@pytest.mark.parametrize("nprobe", [0, -3])
def test_an_nprobe_under_one_is_one_error(tmp_path, nprobe):
    _build(tmp_path / "idx", "faiss", n=6)[0].close()
    # -3 was an OverflowError from faiss at the first search; 0 silently meant "the default"
    with pytest.raises(BertkitError, match=f"nprobe {nprobe}: the number of IVF lists to probe must be an integer"):
        Index.open(tmp_path / "idx", nprobe=nprobe)
    assert len(Index.open(tmp_path / "idx", nprobe=3).search(_vectors(1)[0], k=2)) == 2


@pytest.mark.parametrize("kind", ["ivf", "ivfpq"])
def test_a_faiss_kind_with_the_milvus_backend_is_one_error(tmp_path, kind):
    # the kind was ignored and a flat Milvus index built, saying "milvus flat index" after the fact
    with pytest.raises(BertkitError, match=f"index kind '{kind}' is a faiss structure; the milvus backend"):
        Index.create(tmp_path / "idx", settings=IndexSettings(backend="milvus", kind=kind))
    assert not (tmp_path / "idx" / "index.json").exists()


def test_a_backend_whose_package_is_missing_is_one_error_before_anything_is_made(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pymilvus", None)                     # as if not installed
    monkeypatch.delitem(sys.modules, "bertkit.search.milvus_backend", raising=False)
    # it was raised at the first add, after the first chunk of documents had been encoded
    with pytest.raises(BertkitError, match="the Milvus backend needs pymilvus: pip install pymilvus milvus-lite"):
        Index.create(tmp_path / "idx", settings=IndexSettings(backend="milvus"))
    assert not (tmp_path / "idx").exists()
    with pytest.raises(BertkitError, match="index backend 'annoy' is not one of"):
        Index.create(tmp_path / "idx", settings=IndexSettings(backend="annoy"))
