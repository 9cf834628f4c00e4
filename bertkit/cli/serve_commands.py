"""`bertkit serve`: the HTTP server for embeddings, predictions and search.

Its flags are generated from ServeConfig (bertkit/cli/flags.py): one per field, `--config FILE.toml` with
ServeConfig keys, and `--key=value` overrides, all through bertkit/config.py's loader.
"""
from __future__ import annotations

import argparse

from bertkit.cli.flags import add_config_flags, config_from_args
from bertkit.cli.precision_option import PRECISION_HELP
from bertkit.errors import BertkitError
from bertkit.options import LAYER_STRATEGIES, LAYERS_HELP, POOLINGS, PRECISIONS
from bertkit.serve.batching import CPU_BATCH_OVERHEAD_TOKENS_BY_PRECISION, GPU_BATCH_OVERHEAD_TOKENS
from bertkit.serve.config import BACKENDS, ServeConfig, api_key_from_env

# the seconds fields keep their short spellings (--request-timeout, ...) beside the generated --request-timeout-s
_ALIASES = {"request-timeout": "request_timeout_s", "header-timeout": "header_timeout_s",
            "body-timeout": "body_timeout_s", "keep-alive-timeout": "keep_alive_timeout_s"}
_HELP = {
    "model": "model folder (any format bertkit.load reads); required, here or in --config",
    "index": "search index folder (built with the same model)",
    "host": "address to bind (localhost only unless asked: the API has no TLS of its own)",
    "workers": "model worker threads sharing the loaded model (with --backend process: batches sent to the "
               "model process at once, the next waiting in the pipe while one runs)",
    "max_batch_tokens": "padded tokens per forward pass",
    "max_batch_size": "rows per forward pass, taken length-sorted from the queue",
    "batch_overhead_tokens": "cost of one forward pass in tokens' worth, for cutting batches (none: measured, "
                             + ", ".join(f"{n} on CPU in {p}" for p, n in CPU_BATCH_OVERHEAD_TOKENS_BY_PRECISION.items())
                             + f", {GPU_BATCH_OVERHEAD_TOKENS} on GPU)",
    "max_request_texts": "texts per request; more gets 413",
    "max_request_bytes": "bytes per request body; more gets 413",
    "max_queued_texts": "texts waiting over all clients; more gets 503 busy",
    "request_timeout_s": "longest wait for the model in seconds before 503",
    "header_timeout_s": "a request's headers must arrive within this many seconds, else 408",
    "body_timeout_s": "a request's body must arrive within this many seconds of its headers, else 408",
    "keep_alive_timeout_s": "idle keep-alive connections close after this many seconds",
    "max_connections": "open connections; more get 503 at once",
    "api_key": "require this key (Authorization: Bearer KEY) on every endpoint but /health; none: the "
               "BERTKIT_API_KEY environment variable, else no key",
    "precision": PRECISION_HELP,
    "backend": "where the forward passes run: process (a model process of its own, so HTTP never waits on the "
               "model's GIL) or thread (in the server process); none: process for a model folder on CPU, else thread",
    "pooling": "default pooling of /encode, /v1/embeddings and /search queries, as encode --pooling (a request's "
               "own pooling still wins); none: the model folder's",
    "layers": f"{', '.join(LAYER_STRATEGIES)}; or {LAYERS_HELP}; none: the model folder's",
}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve a model over HTTP (embeddings, predictions, search)",
        description="Serve a model folder over HTTP: /encode (bert-as-service), /v1/embeddings (OpenAI), "
                    "/tokenize, /predict, /search, /status, /health and a page at /. Needs the `serve` extra. "
                    "Settings: ServeConfig defaults, then --config FILE.toml, then the flags, then --key=value.")
    add_config_flags(parser, ServeConfig, aliases=_ALIASES, help=_HELP, choices={"precision": PRECISIONS, "pooling": POOLINGS[:-1], "backend": BACKENDS},
                     metavars={"model": "DIR", "index": "DIR", "host": "ADDRESS", "api_key": "KEY", "layers": "NAME|I,J,..."})
    parser.set_defaults(func=run_serve, accepts_overrides=True)


def serve_config(args: argparse.Namespace) -> ServeConfig:
    config = config_from_args(ServeConfig, args)
    if not config.model:
        raise BertkitError("serve needs --model (or model = \"DIR\" in the --config file)")
    key = api_key_from_env(config.api_key)
    return config if key == config.api_key else ServeConfig(**{**config.__dict__, "api_key": key})


def run_serve(args: argparse.Namespace) -> int:
    from bertkit.serve.server import serve

    serve(serve_config(args))
    return 0
