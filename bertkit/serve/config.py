"""ServeConfig: every setting of `bertkit serve`, published as is by GET /status."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from bertkit.errors import BertkitError
from bertkit.options import POOLINGS, parse_layers

API_KEY_ENV = "BERTKIT_API_KEY"
BACKENDS = ("process", "thread")


@dataclass(frozen=True)
class ServeConfig:
    model: str = ""
    index: Optional[str] = None
    host: str = "127.0.0.1"            # localhost only unless asked: the API has no TLS of its own
    port: int = 8000
    # Model worker threads that run micro-batches on the one loaded model. More than one only helps when
    # the device has spare capacity (a GPU, or many CPU cores); on a small CPU one worker is fastest.
    workers: int = 1
    # Padded tokens (batch rows x longest row) per forward pass: bounds memory and latency per batch.
    max_batch_tokens: int = 16384
    # Rows per forward pass. Queued texts are sorted by length and cut into batches of at most this many,
    # so each pads only to its own longest text; on a CPU that, not batch size, decides the speed.
    max_batch_size: int = 32
    # The fixed cost of one forward pass in tokens' worth of work: where length-sorted texts are cut into
    # batches (see batching.py). None: a measured default for the device (CPU or GPU).
    batch_overhead_tokens: Optional[int] = None
    max_request_texts: int = 256
    max_request_bytes: int = 8 * 1024 * 1024
    # Texts waiting for the model, over all clients; beyond it requests get 503 + Retry-After at once
    # instead of queueing forever.
    max_queued_texts: int = 8192
    request_timeout_s: float = 30.0
    api_key: Optional[str] = None
    search_k_limit: int = 100
    # Slow and idle clients (connections.py, guard.py). A request's headers must arrive within
    # header_timeout_s of the connection opening or of the previous response, its body within
    # body_timeout_s of the headers; else 408 and the connection is closed. Idle keep-alive connections
    # close after keep_alive_timeout_s; connections beyond max_connections get 503 at once.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_timeout_s: float = 5.0
    max_connections: int = 512
    max_header_bytes: int = 32 * 1024
    precision: Optional[str] = None    # fp32 | bf16 | int8 | auto, as bertkit.load; None: what the folder holds
    pooling: Optional[str] = None      # default pooling of every vector route; None: the model folder's
    layers: Optional[str] = None       # layer strategy or indices, as encode --layers; None: the model folder's
    # Where the forward passes run: "process" (a model process of its own, so HTTP never shares the model's
    # GIL) or "thread" (the batcher's threads in this process). None: process for a PyTorch model folder on
    # CPU (POSIX), thread for a model passed in memory (the Python API), an ONNX export, or a GPU.
    backend: Optional[str] = None
    max_length: Optional[int] = None   # tokens per text of every vector route, as encode --max-length; None: the
                                       # folder's max_seq_length (longer texts: 422, or cut with "truncate": true)

    def __post_init__(self) -> None:
        if self.pooling is not None and self.pooling not in POOLINGS[:-1]:
            raise BertkitError(f"serve: --pooling {self.pooling!r} is not one of {', '.join(POOLINGS[:-1])}")
        if self.layers is not None:
            try:
                object.__setattr__(self, "layers", parse_layers(self.layers))
            except ValueError as error:
                raise BertkitError(f"serve: {error}") from None
        if self.backend not in BACKENDS + (None,):
            raise BertkitError(f"serve: --backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if self.max_length is not None and self.max_length < 2:
            raise BertkitError(f"serve: --max-length {self.max_length} must be >= 2 ([CLS] and [SEP] take two)")
        for name in ("workers", "max_batch_tokens", "max_batch_size", "max_request_texts", "max_request_bytes",
                     "max_queued_texts", "search_k_limit", "max_connections", "max_header_bytes"):
            if getattr(self, name) <= 0:
                raise BertkitError(f"serve: --{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.batch_overhead_tokens is not None and self.batch_overhead_tokens < 0:
            raise BertkitError(f"serve: --batch-overhead-tokens must be >= 0, got {self.batch_overhead_tokens}")
        for name in ("request_timeout_s", "header_timeout_s", "body_timeout_s", "keep_alive_timeout_s"):
            if not getattr(self, name) > 0:   # also refuses NaN
                raise BertkitError(f"serve: --{name.removesuffix('_s').replace('_', '-')} must be positive, "
                                   f"got {getattr(self, name)}")
        if not 0 <= self.port <= 65535:
            raise BertkitError(f"serve: --port {self.port} is not a TCP port (0-65535)")
        if self.api_key is not None and not self.api_key.strip():
            raise BertkitError(f"serve: the API key is empty; pass a non-empty --api-key or unset {API_KEY_ENV}")

    def public_dict(self) -> dict:
        """The effective config without the secret: what /status shows."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["api_key"] = "set" if self.api_key else None
        return data


def api_key_from_env(explicit: Optional[str]) -> Optional[str]:
    """--api-key wins over the environment variable; neither means no authentication."""
    return explicit if explicit is not None else (os.environ.get(API_KEY_ENV) or None)
