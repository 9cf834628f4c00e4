"""Start-up: load the model (and index), run the self-test, then serve with uvicorn until interrupted."""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

import torch

import bertkit
from bertkit.distill.onnx_model import OnnxModel
from bertkit.errors import BertkitError
from bertkit.finetune.linear import LinearPredictor, linear_predictor_of
from bertkit.search.encoding import PROBE_TEXT
from bertkit.serve.config import ServeConfig
from bertkit.serve.linear import LinearService, TfidfService
from bertkit.serve.onnx_runner import OnnxRunner
from bertkit.serve.process_runner import SERVER_SWITCH_INTERVAL_S, ModelProcessSpec, ProcessRunner
from bertkit.serve.runner import BatchRunner, EmbedItem, ModelRunner, NonFiniteResult
from bertkit.serve.search import SearchIndex
from bertkit.serve.service import EmbeddingService


def build_service(config: ServeConfig, model: Any = None) -> EmbeddingService:
    """Load what the config names (or take an already loaded model) and self-test it.

    Raises BertkitError (SelfTestFailed included) instead of starting a server that answers wrongly.
    """
    loaded_here = model is None
    if model is None:
        if not config.model:
            raise BertkitError("serve: pass --model DIR (a model folder bertkit.load reads)")
        model = bertkit.load(config.model, precision=config.precision)
    name = Path(config.model).name if config.model else "bertkit"
    linear = linear_predictor_of(model)
    if isinstance(model, LinearPredictor):          # TF-IDF: no encoder, so no vectors and no index
        asked = [flag for flag, value in (("--index", config.index), ("--pooling", config.pooling),
                                           ("--layers", config.layers), ("--max-length", config.max_length))
                 if value is not None and value != ""]
        if asked:
            flag = asked[0]
            raise BertkitError(f"{config.model}: {model.refusal()}; it cannot serve {flag}")
        return TfidfService(config, model, name)
    if getattr(model, "tokenizer", None) is None:
        raise BertkitError(f"{config.model}: the model folder has no tokenizer (vocab.txt or tokenizer.json); "
                           "the server needs one to read text")
    runner = make_runner(config, model, loaded_here)
    try:
        return _build(config, model, runner, name, linear)
    except BaseException:
        runner.close()
        raise


def make_runner(config: ServeConfig, model: Any, loaded_here: bool) -> BatchRunner:
    """The thread runner (ModelRunner, OnnxRunner) or, for a folder this server loaded, the model process."""
    onnx = isinstance(model, OnnxModel)
    device = str(getattr(model, "device", None) or next(model.encoder.parameters()).device) if not onnx else "cpu"
    # the model process gets its pipe by fd inheritance (POSIX); elsewhere the default stays the thread runner
    backend = config.backend or ("process" if loaded_here and not onnx and device == "cpu" and os.name == "posix"
                                 else "thread")
    if backend == "thread":
        return (OnnxRunner if onnx else ModelRunner)(model, config.pooling, config.layers)
    if onnx or not loaded_here:
        what = "an ONNX export" if onnx else "a model passed in memory"
        raise BertkitError(f"serve: --backend process runs a PyTorch model folder given by --model; for {what} "
                           "use --backend thread")
    spec = ModelProcessSpec(config.model, config.precision, device, config.pooling, config.layers,
                            torch.get_num_threads())
    return ProcessRunner(model, spec)


def _build(config: ServeConfig, model: Any, runner: BatchRunner, name: str, linear: Any) -> EmbeddingService:
    folder_length = getattr(runner, "max_length", None)     # what bertkit.search encodes with, unless an index says
    if config.max_length is not None:                # the vector routes' limit; heads keep their position table
        if config.max_length > runner.position_limit:
            raise BertkitError(f"serve --max-length {config.max_length}: {config.model} has "
                               f"{runner.position_limit} positions; lower it")
        runner.max_length = config.max_length
    service = (LinearService(config, runner, linear, name) if linear is not None
               else EmbeddingService(config, runner, None, model_name=name))
    if config.index:
        try:
            # The pooling rule of bertkit.search's ModelTextEncoder, so queries match the documents.
            service.index = SearchIndex(config.index, config.model or None, _vector_width(runner),
                                        runner.default_pooling, config.request_timeout_s,
                                        runner.default_layers, _probe_vector(runner), folder_length)
        except BaseException:
            service.close()
            raise
    return service


def _vector_width(runner: BatchRunner) -> Callable[[str], int]:
    """pooling -> the width of the runner's vectors with it: a folder's whitening applies to the pooling it was
    fitted on only. An ONNX graph has one pooling, checked when a query is embedded."""
    if isinstance(runner, ModelRunner):
        return lambda pooling: runner.sentence_encoder(pooling, False).dim
    return lambda pooling: runner.dimension or 0


def _probe_vector(runner: BatchRunner) -> Callable[[str, Optional[int]], Optional[np.ndarray]]:
    """(pooling, max_length) -> the runner's vector of the index probe text, cut as the index cut it, as
    bertkit.search's ModelTextEncoder encodes it; None if not finite."""
    def probe(pooling: str, max_length: Optional[int]) -> Optional[np.ndarray]:
        problem = runner.embedding_problem(pooling, runner.default_normalize)   # an ONNX graph's one pooling
        if problem is not None:
            raise BertkitError(f"serve --index: {problem}")
        result = runner.embed([EmbedItem(runner.sequence_of(PROBE_TEXT, max_length), pooling, False)])[0]
        return None if isinstance(result, NonFiniteResult) else np.asarray(result)
    return probe


def serve(config: ServeConfig, model: Any = None, log_level: str = "info") -> None:
    try:
        import uvicorn
    except ImportError:
        raise BertkitError("serving needs FastAPI and uvicorn: pip install 'bertkit[serve]'") from None
    from bertkit.serve.app import create_app

    service = build_service(config, model)
    if isinstance(service.runner, ProcessRunner):    # this process now runs HTTP only (see the constant)
        sys.setswitchinterval(SERVER_SWITCH_INTERVAL_S)
        print(f"bertkit serve: forward passes in model process {service.runner.process.pid} (--backend process)",
              file=sys.stderr)
    test = service.self_test
    if service.runner is not None:                  # a TF-IDF folder has no weights in a precision
        print(f"bertkit serve: {getattr(service.runner.model, 'precision_note', 'precision fp32')}", file=sys.stderr)
    passed = (f"{test['dimension']} dimensions, norm {test['norm']:.3f}" if "dimension" in test
              else f"predicted {test['prediction']}")
    print(f"bertkit serve: self-test passed ({passed}); http://{config.host}:{config.port}/ (API: /docs)",
          file=sys.stderr)
    if service.index is not None and service.index.warning:
        print(f"bertkit serve: warning: {service.index.warning}", file=sys.stderr)
    if config.host not in ("127.0.0.1", "localhost", "::1") and not config.api_key:
        print(f"bertkit serve: warning: listening on {config.host} without an API key; anyone who can reach "
              "this port can use the model (pass --api-key or set BERTKIT_API_KEY)", file=sys.stderr)
    try:
        uvicorn.run(create_app(service), host=config.host, port=config.port, log_level=log_level,
                    access_log=False, timeout_graceful_shutdown=5, **connection_options(service))
    finally:
        service.close()


def connection_options(service: EmbeddingService) -> dict:
    """uvicorn settings for the config's limits on slow, idle and too many connections."""
    from bertkit.serve.connections import ConnectionLimits, uvicorn_options   # needs uvicorn

    config = service.config
    limits = ConnectionLimits(config.header_timeout_s, config.max_header_bytes, config.max_connections,
                              config.keep_alive_timeout_s)
    return uvicorn_options(limits, service.stats)


class BackgroundServer:
    """A server on its own thread (tests, notebooks): `with BackgroundServer(service) as server: server.url`.

    Port 0 picks a free port; the socket is bound before the thread starts, so `url` is usable at once.
    """
    def __init__(self, service: EmbeddingService, host: str = "127.0.0.1", port: int = 0):

        import uvicorn
        from bertkit.serve.app import create_app

        self.service = service
        self._socket = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.port = self._socket.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning", access_log=False,
                                                     **connection_options(service)))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name="bertkit-http", daemon=True)

    def __enter__(self) -> "BackgroundServer":
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the background server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
        self.service.close()
