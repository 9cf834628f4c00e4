"""`bertkit serve` from the command line: a real process, flags into /status, start-up errors as one line."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bertkit.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_missing_model_is_a_one_line_error(tmp_path, capsys):
    assert main(["serve", "--model", str(tmp_path / "missing")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("bertkit: error:") and "missing" in error and "Traceback" not in error


def test_serve_process_answers_and_publishes_its_flags(tiny_model_dir):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "BERTKIT_API_KEY": "from-env", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "bertkit", "serve", "--model", str(tiny_model_dir),
                                "--port", str(port), "--max-request-texts", "5", "--max-batch-tokens", "512"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[1]
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.2)
        assert httpx.get(url + "/status", timeout=10).status_code == 401          # the key from the env
        status = httpx.get(url + "/status", headers={"X-API-Key": "from-env"}, timeout=10).json()
        assert status["limits"]["max_request_texts"] == 5 and status["config"]["max_batch_tokens"] == 512
        assert status["config"]["host"] == "127.0.0.1" and status["self_test"]["passed"]
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "self-test passed (32 dimensions" in err
