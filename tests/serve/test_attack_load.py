"""A few seconds of benchmarks/attack_load.py: honest clients get every answer right while an attacker sends
SQL in filter fields and holds slow connections."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import httpx
import pytest

from servers import start

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
_spec = importlib.util.spec_from_file_location("attack_load", BENCHMARKS / "attack_load.py")
attack_load = importlib.util.module_from_spec(_spec)
sys.path.insert(0, str(BENCHMARKS))    # the script imports its sibling machine.py, as when run from benchmarks/
try:
    _spec.loader.exec_module(attack_load)
finally:
    sys.path.remove(str(BENCHMARKS))   # benchmarks/serve.py must not shadow the tests' serve package

WORDS = "the cat dog sat on mat hello world is".split()


@pytest.fixture(scope="module")
def labelled_index(tmp_path_factory, tiny_model_dir) -> Path:
    pytest.importorskip("faiss")
    from bertkit import Index
    from bertkit.search import EncoderSpec, ModelTextEncoder

    folder = tmp_path_factory.mktemp("attack") / "index"
    index = Index.create(folder, encoder=ModelTextEncoder(EncoderSpec(str(tiny_model_dir))))
    texts = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + i % 4)) for i in range(30)]
    index.add([f"doc-{i}" for i in range(30)], texts, metadata=[{"label": "ab"[i % 2]} for i in range(30)])
    index.save()
    index.close()
    return folder


@pytest.mark.slow
def test_honest_clients_get_no_errors_while_an_attacker_works(tiny_model_dir, labelled_index):
    server = start(tiny_model_dir, index=str(labelled_index), header_timeout_s=1.0, body_timeout_s=1.0)
    try:
        attack = {"slow": 2, "slow_bodies": 1, "idle": 1, "byte_interval": 0.05}
        result = attack_load.run_phase(server.port, 4.0, 4, ["the cat sat", "hello world", "a dog", "on the mat", "is it"],
                           ["cat on mat", "hello"],
                           ["a", "b"], attack)
        assert result["honest_errors"] == 0, result["first_errors"]
        assert result["/search"]["requests"] > 0 and result["/encode"]["requests"] > 0
        for name in attack_load.INJECTIONS:
            assert set(result["attacks"][name]) == {"HTTP 422"}, (name, result["attacks"][name])
        for kind in ("slow headers", "slow body", "idle"):
            assert result["attacks"][kind]["HTTP/1.1 408 Request Timeout"] >= 1, (kind, result["attacks"][kind])
        status = httpx.get(f"{server.url}/status", timeout=30).json()
        assert status["index"]["documents"] == 30 and status["index"]["timeouts"] == 0
        assert httpx.get(f"{server.url}/health", timeout=30).json() == {"status": "ok"}
    finally:
        server.stop()
