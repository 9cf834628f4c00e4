"""The model process (serve/process_runner.py): the default for a folder on CPU, the same vectors as the library
and the thread runner, its CPU counted in /metrics, no orphan after a stop or a SIGKILL of the server, and a
crash that fails the batch with a one-line 503 (then a restart), never a hang. The pipe's bytes (serve/wire.py)
are read without pickle and refuse what the protocol does not write."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

import bertkit
from bertkit.serve.inputs import TokenSequence
from bertkit.serve.process_runner import ModelProcess, ModelProcessFailed, ModelProcessSpec
from bertkit.serve.runner import EmbedItem, NonFiniteResult
from bertkit.serve.wire import WireError, decode_reply, decode_request, encode_reply, encode_request
from servers import start

TEXTS = ["the cat sat on the mat", "hello world", "dog", "你好 世界", "the dog is on the mat " * 4]


def _gone(pid: int) -> bool:
    """Exited: every thread of it (a zombie waiting for its reaper counts as exited). The main thread shows "Z"
    while the process's other threads (torch's pool) are still dying, and until they are, waitpid does not
    report it and its sockets stay open: the parent cannot see the death yet."""
    try:
        states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                  for task in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return True
    return all(state in ("Z", "X") for state in states)


def _wait_gone(pid: int, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_process_backend_is_the_default_for_a_folder_and_gives_the_library_vectors(precision, tiny_model_dir):
    expected = bertkit.load(tiny_model_dir, precision=precision)
    alone = np.stack([expected.encode([text])[0] for text in TEXTS])
    for backend in (None, "thread"):
        running = start(tiny_model_dir, precision=precision, backend=backend)
        try:
            with httpx.Client(base_url=running.url, timeout=30) as client:
                status = client.get("/status").json()
                served = np.concatenate([np.asarray(client.post("/encode", json={"texts": [text]}).json()["results"],
                                                    dtype=np.float32) for text in TEXTS])
        finally:
            running.stop()
        assert status["model"]["backend"]["kind"] == (backend or "process")
        assert status["model"]["precision"] == precision
        np.testing.assert_array_equal(served, alone)          # bit for bit, through the pipe or not


def test_two_workers_pipeline_batches_and_every_reply_reaches_its_own_request(tiny_model_dir):
    """--workers 2: two batches in flight on one pipe; replies are read in the order sent, so each text gets
    its own vector (a swapped reply would hand a text another text's vector)."""
    model = bertkit.load(tiny_model_dir)
    texts = [f"{TEXTS[i % len(TEXTS)]} {' '.join(['cat'] * (i % 7))}" for i in range(40)]
    expected = {text: model.encode([text])[0] for text in texts}
    running = start(tiny_model_dir, workers=2, backend="process")
    try:
        with httpx.Client(base_url=running.url, timeout=60) as client, ThreadPoolExecutor(8) as clients:
            answers = list(clients.map(lambda text: client.post("/encode", json={"texts": [text]}), texts * 3))
            batches = client.get("/status").json()["queue"]["batches"]
    finally:
        running.stop()
    assert batches > 1
    for text, answer in zip(texts * 3, answers):
        assert answer.status_code == 200, answer.text
        np.testing.assert_allclose(answer.json()["results"][0], expected[text], rtol=0, atol=1e-6)


def test_model_process_stops_with_the_server_and_its_cpu_is_counted(tiny_model_dir):
    running = start(tiny_model_dir, backend="process")
    pid = running.service.runner.process.pid
    assert pid is not None and pid != os.getpid() and not _gone(pid)
    try:
        with httpx.Client(base_url=running.url, timeout=30) as client, ThreadPoolExecutor(4) as clients:
            before, child_before = client.get("/status").json()["queue"], _cpu_seconds(pid)
            started = time.perf_counter()
            answers = list(clients.map(lambda _: client.post("/encode", json={"texts": TEXTS * 6}), range(80)))
            elapsed = time.perf_counter() - started
            after, child_after = client.get("/status").json()["queue"], _cpu_seconds(pid)
        assert all(answer.status_code == 200 for answer in answers)
    finally:
        running.stop()
    assert _wait_gone(pid, 2.0), "the model process outlived the server"
    counted, used = after["model_cpu_s"] - before["model_cpu_s"], child_after - child_before
    # the passes run in the child: its CPU, not the server thread's (nearly idle in recv), is what /status counts
    assert used > 0.05 and 0.5 * used <= counted <= used + 0.05, (counted, used)
    # two batches in flight (one running, one in the pipe) must not count the child's time twice
    assert 0 < after["model_busy_s"] - before["model_busy_s"] <= elapsed


def test_a_model_process_killed_during_a_batch_fails_it_with_one_line_and_is_restarted(tiny_model_dir):
    expected = bertkit.load(tiny_model_dir).encode(TEXTS[:2])
    running = start(tiny_model_dir, backend="process")
    try:
        first = running.service.runner.process.pid
        os.kill(first, signal.SIGSTOP)            # the batch reaches the child and waits there...
        with httpx.Client(base_url=running.url, timeout=30) as client, ThreadPoolExecutor(1) as pool:
            pending = pool.submit(client.post, "/encode", json={"texts": TEXTS[:2]})
            process, deadline = running.service.runner.process, time.monotonic() + 30
            while process._sent == process._received and time.monotonic() < deadline:   # not sent yet
                time.sleep(0.01)
            os.kill(first, signal.SIGKILL)        # ...and the child dies under it
            failed = pending.result(timeout=60)
            health = client.get("/health")
            again = client.post("/encode", json={"texts": TEXTS[:2]})
            backend = client.get("/status").json()["model"]["backend"]
    finally:
        running.stop()
    assert failed.status_code == 503
    message = failed.json()["detail"]
    assert "model process died during this batch" in message and "\n" not in message
    assert health.status_code == 200                  # restarted at once, not at the next request
    assert again.status_code == 200
    np.testing.assert_allclose(np.asarray(again.json()["results"], dtype=np.float32), expected, atol=1e-6)
    assert backend["restarts"] == 1 and backend["pid"] not in (None, first)


def test_a_model_process_that_died_idle_is_unhealthy_then_replaced_without_a_failed_request(tiny_model_dir):
    running = start(tiny_model_dir, backend="process")
    try:
        first = running.service.runner.process.pid
        os.kill(first, signal.SIGKILL)
        assert _wait_gone(first)
        with httpx.Client(base_url=running.url, timeout=30) as client:
            health = client.get("/health")
            served = client.post("/encode", json={"texts": TEXTS[:2]})
            healthy = client.get("/health")
    finally:
        running.stop()
    assert health.status_code == 503 and "model process is not running" in health.json()["detail"]
    assert served.status_code == 200 and healthy.status_code == 200, (served.text, healthy.text)


def test_sigkill_of_the_server_takes_the_model_process_with_it(tiny_model_dir, tmp_path):
    script = tmp_path / "serve_forever.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from bertkit.serve.config import ServeConfig
        from bertkit.serve.server import build_service
        service = build_service(ServeConfig(model={str(tiny_model_dir)!r}))
        print(service.runner.process.pid, flush=True)
        time.sleep(120)
    """), encoding="utf-8")
    server = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        child = int(server.stdout.readline())
        assert not _gone(child)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        assert _wait_gone(child), "the model process outlived its SIGKILLed server"
    finally:
        server.kill()
        server.wait()


def test_a_folder_the_model_process_cannot_load_is_one_line(tmp_path):
    spec = ModelProcessSpec(str(tmp_path / "missing"), None, "cpu", None, None, 1)
    with pytest.raises(ModelProcessFailed) as raised:
        ModelProcess(spec)
    assert str(tmp_path / "missing") in str(raised.value) and "\n" not in str(raised.value)


def test_backend_process_refuses_a_model_passed_in_memory(tiny_model_dir):
    from bertkit.errors import BertkitError
    from bertkit.serve.config import ServeConfig
    from bertkit.serve.server import build_service

    with pytest.raises(BertkitError, match="--backend thread"):
        build_service(ServeConfig(backend="process"), model=bertkit.load(tiny_model_dir))
    with pytest.raises(BertkitError, match="--backend 'fork'"):
        ServeConfig(backend="fork")


# --- the wire ---------------------------------------------------------------------------------------------
def test_requests_and_replies_cross_the_wire_unchanged():
    items = [EmbedItem(TokenSequence([2, 9, 3], [0, 0, 0]), "mean", True),
             EmbedItem(TokenSequence([2, 7, 3, 8, 3], [0, 0, 0, 1, 1], True), "cls", False)]
    assert decode_request(encode_request("embed", items)) == ("embed", items)
    sequences = [item.sequence for item in items]
    assert decode_request(encode_request("predict", sequences)) == ("predict", sequences)
    rng = np.random.default_rng(0)
    vector, logits = rng.standard_normal(384).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    results, error, wall, cpu = decode_reply(encode_reply([vector, NonFiniteResult("embedding"),
                                                           (logits, logits[:, 0])], 0.5, 0.25))
    assert error is None and (wall, cpu) == (0.5, 0.25)
    assert results[0].dtype == np.float32 and results[0].tobytes() == vector.tobytes()
    assert results[1] == NonFiniteResult("embedding")
    np.testing.assert_array_equal(results[2][0], logits)
    np.testing.assert_array_equal(results[2][1], logits[:, 0])


def test_the_wire_refuses_what_it_does_not_write():
    def message(header: dict, data: bytes = b"") -> bytes:
        head = json.dumps(header).encode()
        return len(head).to_bytes(4, "little") + head + data

    with pytest.raises(WireError):       # an object array would need pickle
        decode_reply(message({"rows": [{"array": ["object", [1]]}]}, b"\0" * 8))
    with pytest.raises(WireError):       # more bytes claimed than sent
        decode_reply(message({"rows": [{"array": ["float32", [384]]}]}, b"\0" * 16))
    with pytest.raises(WireError):
        decode_request(message({"kind": "shell", "items": []}))
    with pytest.raises(WireError):
        decode_request(b"\xff\xff\xff\xff{}")
    with pytest.raises(WireError):       # items claim more tokens than the pass's id array holds
        decode_request(message({"kind": "embed", "items": [{"n": 4}]}, b"\0" * 8))
    with pytest.raises(WireError):       # a block of a dtype the wire never writes
        decode_reply(message({"block": ["object", [2, 3]]}, b"\0" * 48))
    with pytest.raises(WireError):       # a block must have rows
        decode_reply(message({"block": ["float32", []]}, b"\0" * 4))


def test_a_pass_crosses_the_wire_as_one_id_array_and_one_vector_block():
    """A request's ids travel as one array per pass and a pass's vectors as one (B, D) block: the message holds
    each token once (4 bytes each, twice: ids and segments) and each vector's bytes once, in order."""
    items = [EmbedItem(TokenSequence(list(range(2, 2 + n)), [0] * n), "mean", True) for n in (3, 1, 7)]
    request = encode_request("embed", items)
    header_size = int.from_bytes(request[:4], "little")
    assert len(request) - 4 - header_size == 2 * 4 * 11
    assert decode_request(request) == ("embed", items)
    vectors = np.random.default_rng(1).standard_normal((3, 384)).astype(np.float32)
    reply = encode_reply(list(vectors), 0.5, 0.25)
    assert json.loads(reply[4:4 + int.from_bytes(reply[:4], "little")])["block"] == ["float32", [3, 384]]
    results, error, _, _ = decode_reply(reply)
    assert error is None and [r.tobytes() for r in results] == [v.tobytes() for v in vectors]
