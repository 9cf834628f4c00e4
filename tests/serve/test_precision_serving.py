"""POST /encode == bertkit.load(folder, precision=P).encode at every precision (fp32, bf16, int8), over real HTTP.

int8 is a folder written by `bertkit quantize` from the tiny model (the only way to get int8 weights). One text per
request is the library's batch of one: the vectors must be bit-identical. A list, or texts from several clients at
once, is cut into batches by the server's token budget, unlike encode's 32 sorted by length; a row's vector does
not depend on the other rows of its batch except through kernel blocking (flash attention over a longer padded
length), which in bf16 moves a component by at most one bf16 rounding step of the result (measured: 1.3e-3 on
these texts, int8 included because its matmuls run in bf16 where the CPU is fast at it). So lists are held to
1e-6 in fp32 and to 2**-8 (bf16's unit roundoff) otherwise, and every served vector must be nearer the library's
vector at its precision than to the fp32 one (so the server really ran that precision).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

import bertkit
from bertkit.cli import main
from servers import start

LONG = "the cat sat on the mat and the dog is on the mat " * 3
TEXTS = ["the cat sat on the mat", "hello world", LONG, "dog", "你好 世界", "is the cat on the mat ? hello"]
TOLERANCE = {"fp32": 1e-6, "bf16": 2.0 ** -8, "int8": 2.0 ** -8}


@pytest.fixture(scope="module")
def int8_folder(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("int8")
    texts = root / "texts.txt"
    texts.write_text("\n".join(TEXTS * 4) + "\n", encoding="utf-8")
    assert main(["quantize", "--model", str(tiny_model_dir), "--output", str(root / "q"), "--texts", str(texts)]) == 0
    return root / "q"


def _post(url: str, texts: list[str]) -> np.ndarray:
    with httpx.Client(base_url=url, timeout=60) as client:
        answer = client.post("/encode", json={"texts": texts})
    assert answer.status_code == 200, answer.text
    return np.asarray(answer.json()["results"], dtype=np.float32)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_encode_route_equals_model_encode_at_every_precision(precision, tiny_model_dir, int8_folder):
    folder = int8_folder if precision == "int8" else tiny_model_dir
    model = bertkit.load(folder, precision=precision)
    assert model.precision == precision
    alone = np.stack([model.encode([text])[0] for text in TEXTS])
    listed = model.encode(TEXTS * 3)
    fp32 = bertkit.load(tiny_model_dir, precision="fp32").encode(TEXTS)
    running = start(folder, precision=precision, backend="process")   # the default, through the pipe
    try:
        with httpx.Client(base_url=running.url, timeout=30) as client:
            status = client.get("/status").json()
        one_by_one = np.concatenate([_post(running.url, [text]) for text in TEXTS])
        whole = _post(running.url, TEXTS * 3)
        with ThreadPoolExecutor(len(TEXTS)) as clients:               # cross-client batches of one text each
            together = np.concatenate(list(clients.map(lambda text: _post(running.url, [text]), TEXTS)))
    finally:
        running.stop()
    assert status["model"]["precision"] == precision
    assert np.array_equal(one_by_one, alone)                           # the same batch: bit-identical
    assert np.abs(whole - listed).max() <= TOLERANCE[precision]
    assert np.abs(together - alone).max() <= TOLERANCE[precision]
    if precision != "fp32":                                            # it ran the precision asked for
        for served in (one_by_one, together):
            assert (np.abs(served - alone).max(1) < np.abs(served - fp32).max(1)).all()
