"""The model in its own process: `bertkit serve --model-process`.

In one process, the event loop (HTTP parsing, validation, JSON, tokenizing: ~2.7 ms of Python per request)
and the model thread take turns on the GIL. The model thread needs the GIL between every two torch ops, so
with many small requests it waits behind the event loop: a thread holding the GIL a quarter of the time in
2.7 ms slices cut a 1-thread MiniLM `encode` by 22-36% in our measurement. Here the batcher's worker thread
hands each micro-batch through a pipe to a child process that owns its own copy of the model and its own GIL,
and waits on the pipe without holding the GIL (bert-as-service ran its workers as processes for the same
reason). Payloads are token ids and results are small arrays, so the pipe costs little.
"""
from __future__ import annotations

import multiprocessing
import pickle
import threading
from typing import Any, Optional

from bertkit.errors import BertkitError


class ModelProcess:
    """A child process that loads `model_dir` and runs `run_batch(kind, payloads)` for the batcher."""

    def __init__(self, model_dir: str, device: str, threads: int, start_timeout_s: float = 300.0):
        context = multiprocessing.get_context("spawn")     # no fork of a process that holds threads and torch
        self._conn, child_end = context.Pipe()
        self._process = context.Process(target=_child_main, args=(model_dir, device, threads, child_end),
                                        name="bertkit-model", daemon=True)
        self._process.start()
        child_end.close()
        self._lock = threading.Lock()
        if not self._conn.poll(start_timeout_s):
            self.close()
            raise BertkitError(f"serve: the model process did not load {model_dir} within {start_timeout_s:.0f} s")
        status, value = self._receive()
        if status != "ready":
            self.close()
            raise BertkitError(f"serve: the model process could not load {model_dir}: {value}")

    @property
    def pid(self) -> Optional[int]:
        return self._process.pid

    def run_batch(self, kind: str, payloads: list) -> list:
        with self._lock:                 # one batch in flight: the pipe carries one request and its answer
            try:
                self._conn.send((kind, payloads))
            except (BrokenPipeError, OSError):
                raise RuntimeError(self._died()) from None
            status, value = self._receive()
        if status == "error":
            raise value
        return value

    def close(self) -> None:
        try:
            self._conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=5)
        self._conn.close()

    def _receive(self) -> tuple[str, Any]:
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            return "error", RuntimeError(self._died())

    def _died(self) -> str:
        self._process.join(timeout=1)
        return f"the model process exited (exit code {self._process.exitcode}); restart the server"


def _child_main(model_dir: str, device: str, threads: int, conn) -> None:
    import torch

    torch.set_num_threads(threads)
    try:
        import bertkit
        from bertkit.serve.predictions import qa_logits, question_answering
        from bertkit.serve.runner import ModelRunner

        runner = ModelRunner(bertkit.load(model_dir, device=device))
        qa_task, qa_head = question_answering(runner)
    except BaseException as error:  # noqa: BLE001 - reported to the parent, which refuses to start
        conn.send(("error", f"{type(error).__name__}: {error}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):       # the server went away
            return
        if message is None:
            return
        kind, payloads = message
        try:
            results = qa_logits(runner, qa_head, payloads) if kind == "qa" else runner.run_batch(kind, payloads)
            conn.send(("ok", results))
        except Exception as error:  # noqa: BLE001 - raised again in the server's batcher thread
            conn.send(("error", _picklable(error)))


def _picklable(error: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(error).__name__}: {error}")
