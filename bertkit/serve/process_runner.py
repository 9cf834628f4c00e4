"""The model in its own process: the HTTP side (router, batcher) never shares a GIL with the forward passes.

`ProcessRunner` is a `ModelRunner` whose passes run elsewhere: a child process (a fresh interpreter, as
multiprocessing's spawn gives, never fork: torch keeps threads) loads the same folder with the same
precision, pooling, layers and thread count, and answers `run_batch` calls over a pipe. The batcher's
worker thread blocks in `recv_bytes`, which releases the GIL, so uvicorn, FastAPI and JSON on the event
loop no longer stall the model between ops (the bottleneck of one-text requests measured in BENCHMARKS.md). The bytes on the pipe are
serve/wire.py's: a JSON header and raw numpy buffers, nothing unpickled.

The parent keeps the loaded folder for what the routes read (tokenizer, heads' labels, limits) but drops
its weights (a linear probe's folder keeps them: its /predict runs here); the child does every forward
pass, the start-up self-test included.

Life cycle: the child exits when the pipe closes (server stopped, or the parent killed, even by SIGKILL: the
kernel closes the parent's end) and, while busy in a pass, when its parent process changes (a watcher
thread). A crashed child fails the batch it was running (the requests get a one-line 503), is logged,
and is started again at once; /health says 503 while no child is running.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Optional

import torch

import bertkit
from bertkit.errors import BertkitError
from bertkit.serve.runner import ModelRunner
from bertkit.serve.wire import decode_control, decode_reply, decode_request, encode_control, encode_failure, \
    encode_reply, encode_request

LOG = logging.getLogger("bertkit.serve")
START_TIMEOUT_S = 300.0          # loading a large folder on a busy machine
# The server process's GIL switch interval while a model process runs the passes (Python's default: 5 ms).
# The batcher's thread needs the GIL only between batches (to hand results over and send the next batch), and
# the event loop holds it for whole bursts of responses: a short interval bounds the model process's idle wait.
SERVER_SWITCH_INTERVAL_S = 0.001
PARENT_CHECK_S = 0.5


class ModelProcessFailed(BertkitError):
    """The model process could not start, or died during a batch."""


@dataclass(frozen=True)
class ModelProcessSpec:
    """What the child loads: the same arguments the parent's `bertkit.load` and `ModelRunner` got."""
    folder: str
    precision: Optional[str]
    device: str
    pooling: Optional[str]
    layers: Optional[str]
    threads: int


# --- the child ------------------------------------------------------------------------------------------
def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def model_process_main(connection, spec: dict, parent: int) -> None:
    """The child's entry point: load, say ready (or why not), then answer batches until the pipe closes."""
    threading.Thread(target=_exit_with_parent, args=(parent,), name="bertkit-parent-watch", daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C reaches the whole process group; the pipe says when
    torch.set_num_threads(spec["threads"])
    try:
        model = bertkit.load(spec["folder"], device=spec["device"], precision=spec["precision"])
        runner = ModelRunner(model, spec["pooling"], spec["layers"])
    except BaseException as error:  # noqa: BLE001 - reported to the parent as one line, which raises it
        connection.send_bytes(encode_failure(error))
        return
    connection.send_bytes(encode_control({"ready": os.getpid()}))
    while True:
        try:
            message = connection.recv_bytes()
        except (EOFError, OSError):
            return                      # the server closed the pipe or died
        # process CPU: this process only runs the model, and its passes use torch's intra-op threads too
        started, cpu = time.perf_counter(), time.process_time()
        try:
            kind, payloads = decode_request(message)
            results = runner.run_batch(kind, payloads)
            reply = encode_reply(results, time.perf_counter() - started, time.process_time() - cpu)
        except Exception as error:  # noqa: BLE001 - the batch fails with this line, the process goes on
            reply = encode_failure(error)
        try:
            connection.send_bytes(reply)
        except OSError:
            return


# --- the parent -----------------------------------------------------------------------------------------
class ModelProcess:
    """One child process and its pipe. `call` runs one batch. Calls from several batcher threads (--workers N)
    are pipelined: each sends at once (the child reads the next batch as soon as it finishes one) and reads
    its reply in the order it sent."""

    def __init__(self, spec: ModelProcessSpec):
        self.spec = spec
        self.restarts = 0
        self._lock = threading.Lock()             # sending, starting, stopping
        self._turn = threading.Condition()        # whose reply comes next
        self._process: Any = None
        self._connection: Any = None
        self._generation = 0                      # which child: replies of a dead one never come
        self._sent = self._received = 0           # requests sent to / replies read from this child
        self._closed = False
        self._start()

    @property
    def pid(self) -> Optional[int]:
        return self._process.pid if self._process is not None else None

    def _start(self) -> None:
        # A fresh interpreter (`python -m` this module), not multiprocessing: spawn would re-run the user's
        # main script in the child, and fork would copy torch's threads. The pipe is a socket pair passed by fd.
        ours, theirs = socket.socketpair()
        root = str(Path(bertkit.__file__).resolve().parent.parent)      # the child imports this same bertkit
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        try:
            process = subprocess.Popen([sys.executable, "-m", __name__, str(theirs.fileno()), str(os.getpid()),
                                        json.dumps(asdict(self.spec))], pass_fds=(theirs.fileno(),),
                                       stdin=subprocess.DEVNULL, env=env)
        finally:
            theirs.close()             # the child holds the only other end: its EOF is our exit, and ours its
        connection = Connection(ours.detach())
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while not connection.poll(0.2):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise ModelProcessFailed(f"serve: the model process for {self.spec.folder} did not start "
                                             f"(exit code {process.poll()})")
            header = decode_control(connection.recv_bytes())
        except BaseException:
            connection.close()
            _stop(process)
            raise
        if "ready" not in header:
            connection.close()
            _stop(process)
            raise ModelProcessFailed(f"serve: the model process could not load {self.spec.folder}: "
                                     f"{header.get('error')}")
        self._process, self._connection = process, connection

    def call(self, kind: str, payloads: list) -> tuple[list, float, float]:
        """(results, the child's wall and CPU seconds on them); ModelProcessFailed if the child died or refused."""
        request = encode_request(kind, payloads)
        with self._lock:
            if self._closed:
                raise ModelProcessFailed("the server is shutting down")
            if self._connection is not None and self._process.poll() is not None:    # died while idle
                LOG.error("bertkit serve: the model process (pid %s) exited while idle (exit code %s); starting "
                          "a new one", self.pid, self._dead())
            if self._connection is None:          # died while idle, or an earlier restart failed
                self._restart()
            connection, generation, ticket = self._connection, self._generation, self._sent
            try:
                connection.send_bytes(request)
            except OSError:
                self._died(generation)
            self._sent += 1
        with self._turn:
            while self._received != ticket and self._generation == generation:
                self._turn.wait()
        if self._generation != generation:
            raise ModelProcessFailed("the model process died during this batch; it was restarted")
        try:
            reply = connection.recv_bytes()
        except (EOFError, OSError):
            with self._lock:
                self._died(generation)
        with self._turn:
            self._received += 1
            self._turn.notify_all()
        results, error, wall, cpu = decode_reply(reply)
        if error is not None:
            raise ModelProcessFailed(f"in the model process: {error}")
        if len(results) != len(payloads):
            raise ModelProcessFailed(f"the model process returned {len(results)} results for {len(payloads)} items")
        return results, wall, cpu

    def _died(self, generation: int) -> None:
        """Under self._lock: the child of `generation` is gone. Wake the calls waiting on it, start a new one
        (unless shutting down), and fail this call."""
        if self._closed:
            raise ModelProcessFailed("the server is shutting down")
        if self._generation == generation:
            code = self._dead()
            LOG.error("bertkit serve: the model process (pid %s) died during a batch (exit code %s); "
                      "starting a new one", self.pid, code)
            try:
                self._restart()
            except ModelProcessFailed as error:
                LOG.error("%s; the next batch tries again", error)
        raise ModelProcessFailed("the model process died during this batch; it was restarted")

    def _restart(self) -> None:
        self.restarts += 1
        self._start()
        LOG.warning("bertkit serve: model process restarted (pid %s, restart %d)", self.pid, self.restarts)

    def _dead(self) -> Optional[int]:
        """Under self._lock: forget the child (its pending replies never come) and reap it."""
        self._connection.close()
        self._connection = None
        with self._turn:
            self._generation += 1
            self._sent = self._received = 0
            self._turn.notify_all()
        try:
            return self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def problem(self) -> Optional[str]:
        """Why the model process cannot take a batch now (for /health), or None."""
        process = self._process
        code = process.poll() if process is not None else None
        if self._connection is None or code is not None:
            return f"the model process is not running (exit code {code}); the next batch starts a new one"
        return None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._connection is not None:
                self._connection.close()        # the child sees EOF and returns
                self._connection = None
            if self._process is not None:
                _stop(self._process)
            with self._turn:
                self._generation += 1
                self._turn.notify_all()


def _release_weights(model: Any) -> None:
    """Drop this process's copy of the weights (the model process holds them): the modules keep their
    shapes and configs, which is all the routes read here, on torch's storage-free "meta" device."""
    for module in (model.encoder, *(model.heads or {}).values()):
        module.to("meta")


def _stop(process: subprocess.Popen) -> None:
    """Wait for a child whose pipe is closed (it exits on the EOF), then kill it if it did not."""
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


class ProcessRunner(ModelRunner):
    """A ModelRunner whose passes (embed, predict, QA windows, the self-test) run in a model process."""
    def __init__(self, model: Any, spec: ModelProcessSpec):
        super().__init__(model, spec.pooling, spec.layers)
        self.process = ModelProcess(spec)
        self._clocks = threading.local()
        if getattr(model, "linear", None) is None:    # a linear probe's /predict still runs its encoder here
            _release_weights(model)

    def run_batch(self, kind: str, payloads: list) -> list:
        results, wall, cpu = self.process.call(kind, payloads)
        self._clocks.busy = getattr(self._clocks, "busy", 0.0) + wall
        self._clocks.cpu = getattr(self._clocks, "cpu", 0.0) + cpu
        return results

    def embed(self, items: list) -> list:
        return self.run_batch("embed", items)

    def predict(self, items: list) -> list:
        return self.run_batch("predict", items)

    def clocks(self) -> tuple[float, float]:
        """The model process's wall and CPU seconds in the passes of this thread's batches (the child runs
        one batch at a time, so the busy seconds of the batcher's threads add up to the child's)."""
        return getattr(self._clocks, "busy", 0.0), getattr(self._clocks, "cpu", 0.0)

    def backend(self) -> dict:
        return {"kind": "process", "pid": self.process.pid, "restarts": self.process.restarts}

    def health_problem(self) -> Optional[str]:
        return self.process.problem()

    def close(self) -> None:
        self.process.close()


if __name__ == "__main__":      # the child: python -m bertkit.serve.process_runner FD PARENT_PID SPEC_JSON
    model_process_main(Connection(int(sys.argv[1])), json.loads(sys.argv[3]), int(sys.argv[2]))
