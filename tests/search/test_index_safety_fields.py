"""index.json and the vectors file come from whoever could write the folder: a bad encoder field, a vectors
file of another dimension or one whose header claims more than it holds are one-line errors naming the file
(they were tracebacks, 500s on every /search, or gigabytes allocated; an attack trial)."""
from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest

import bertkit
from bertkit.errors import BertkitError

pytest.importorskip("faiss")


def _index(folder, dim: int = 8):
    with bertkit.Index.create(folder, dim=dim) as index:
        index.add(["a", "b", "c"], ["x", "y", "z"], vectors=np.eye(3, dim, dtype=np.float32))
        index.save()
    return folder


@pytest.mark.parametrize("encoder, message", [
    ("x", "encoder must be an object, got str"),
    ({"model": "m", "colour": 1}, "encoder has unknown fields ['colour']"),
    ({"model": "m", "max_length": "abc"}, "encoder.max_length has the wrong type ('abc')"),
    ({"model": "m", "max_length": -1}, "encoder.max_length must be at least 3, got -1"),
    ({"model": "m", "pooling": "bogus"}, "encoder.pooling 'bogus' is not one of cls, pooler"),
    ({"model": "m", "pooling": [1]}, "encoder.pooling has the wrong type ([1])"),
])
def test_a_bad_encoder_field_is_one_line(tmp_path, encoder, message):
    folder = _index(tmp_path / "idx")
    manifest = json.loads((folder / "index.json").read_text())
    manifest["encoder"] = encoder
    (folder / "index.json").write_text(json.dumps(manifest))
    with pytest.raises(BertkitError, match=re.escape(f"index.json: {message}")):
        bertkit.Index.open(folder)


def test_vectors_of_another_dimension_are_refused(tmp_path):
    folder = _index(tmp_path / "idx", dim=8)
    other = _index(tmp_path / "other", dim=4)
    manifest = json.loads((folder / "index.json").read_text())
    (folder / manifest["backend_files"][0]).write_bytes((other / manifest["backend_files"][0]).read_bytes())
    with pytest.raises(BertkitError, match=r"claims 3 vectors of 4 dimensions .* index.json saying 8 dimensions"):
        bertkit.Index.open(folder)


def test_a_vectors_header_claiming_more_than_the_file_holds_is_refused_before_reading(tmp_path):
    folder = _index(tmp_path / "idx")
    name = json.loads((folder / "index.json").read_text())["backend_files"][0]
    data = bytearray((folder / name).read_bytes())
    struct.pack_into("<Q", data, 74, 3 * 10**9 // 4)        # the float count faiss would allocate first: 3 GB
    (folder / name).write_bytes(bytes(data))
    with pytest.raises(BertkitError, match=r"header claims 3 vectors of 8 dimensions \(750,000,000 floats\)"):
        bertkit.Index.open(folder)
