"""Milvus filters past the old 16,384-document cap: the `pk in [...]` expression is paged, and the merged top k
equals the exact top k over the filtered documents (numpy reference), with Milvus Lite."""
import numpy as np
import pytest

pytest.importorskip("milvus_lite")
pytest.importorskip("pymilvus")

from bertkit.errors import BertkitError  # noqa: E402
from bertkit.search.milvus_backend import FILTER_CHUNK, MilvusBackend  # noqa: E402

ROWS, DIM, K = 20_000, 8, 5


def test_a_filter_wider_than_one_page_gives_the_exact_filtered_top_k(tmp_path):
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    backend = MilvusBackend.create(tmp_path, 1, DIM)
    try:
        backend.add(np.arange(ROWS, dtype=np.int64), vectors)
        allowed = np.flatnonzero(np.arange(ROWS) % 7 != 3).astype(np.int64)   # 17,143 rows: two pages
        assert len(allowed) > FILTER_CHUNK
        queries = rng.standard_normal((3, DIM)).astype(np.float32)
        scores, ids = backend.search(queries, K, allowed)
        exact = queries @ vectors[allowed].T
        for row in range(len(queries)):
            best = allowed[np.argsort(-exact[row], kind="stable")[:K]]
            assert ids[row].tolist() == best.tolist()
            np.testing.assert_allclose(scores[row], np.sort(exact[row])[::-1][:K], rtol=1e-5, atol=1e-5)
        # the best row of all, when it is filtered out, is not returned
        top = int(np.argmax(queries[0] @ vectors.T))
        scores, ids = backend.search(queries[:1], K, np.setdiff1d(np.arange(ROWS), [top]).astype(np.int64))
        assert top not in ids[0].tolist() and (ids[0] >= 0).all()
        with pytest.raises(BertkitError, match="k 20000 is more than Milvus returns"):
            backend.search(queries[:1], 20_000, allowed)
    finally:
        backend.close()
