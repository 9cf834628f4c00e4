"""`bertkit serve`: the HTTP server for embeddings, predictions and search."""
from __future__ import annotations

import argparse

from bertkit.cli.precision_option import add_precision_flag
from bertkit.serve.batching import CPU_BATCH_OVERHEAD_TOKENS_BY_PRECISION, GPU_BATCH_OVERHEAD_TOKENS
from bertkit.serve.config import ServeConfig, api_key_from_env


def register(subparsers) -> None:
    defaults = ServeConfig()
    parser = subparsers.add_parser(
        "serve", help="serve a model over HTTP (embeddings, predictions, search)",
        description="Serve a model folder over HTTP: /encode (bert-as-service), /v1/embeddings (OpenAI), "
                    "/tokenize, /predict, /search, /status, /health and a page at /. Needs the `serve` extra.")
    parser.add_argument("--model", required=True, metavar="DIR", help="model folder (any format bertkit.load reads)")
    parser.add_argument("--index", metavar="DIR", help="search index folder (built with the same model)")
    parser.add_argument("--host", default=defaults.host,
                        help="address to bind (default %(default)s: this machine only)")
    parser.add_argument("--port", type=int, default=defaults.port, help="default %(default)s")
    parser.add_argument("--workers", type=int, default=defaults.workers,
                        help="model worker threads sharing the loaded model (default %(default)s)")
    parser.add_argument("--max-batch-tokens", type=int, default=defaults.max_batch_tokens,
                        help="padded tokens per forward pass (default %(default)s)")
    parser.add_argument("--max-batch-size", type=int, default=defaults.max_batch_size,
                        help="rows per forward pass, taken length-sorted from the queue (default %(default)s)")
    parser.add_argument("--batch-overhead-tokens", type=int, default=None, metavar="N",
                        help="cost of one forward pass in tokens' worth, for cutting batches (default, measured: "
                             + ", ".join(f"{n} on CPU in {p}" for p, n in CPU_BATCH_OVERHEAD_TOKENS_BY_PRECISION.items())
                             + f", {GPU_BATCH_OVERHEAD_TOKENS} on GPU)")
    parser.add_argument("--max-request-texts", type=int, default=defaults.max_request_texts,
                        help="texts per request; more gets 413 (default %(default)s)")
    parser.add_argument("--max-queued-texts", type=int, default=defaults.max_queued_texts,
                        help="texts waiting over all clients; more gets 503 busy (default %(default)s)")
    parser.add_argument("--request-timeout", type=float, default=defaults.request_timeout_s, metavar="SECONDS",
                        help="longest wait for the model before 503 (default %(default)s)")
    parser.add_argument("--header-timeout", type=float, default=defaults.header_timeout_s, metavar="SECONDS",
                        help="a request's headers must arrive within this long, else 408 (default %(default)s)")
    parser.add_argument("--body-timeout", type=float, default=defaults.body_timeout_s, metavar="SECONDS",
                        help="a request's body must arrive within this long of its headers, else 408 "
                             "(default %(default)s)")
    parser.add_argument("--keep-alive-timeout", type=float, default=defaults.keep_alive_timeout_s,
                        metavar="SECONDS", help="idle keep-alive connections close after this long "
                                                "(default %(default)s)")
    parser.add_argument("--max-connections", type=int, default=defaults.max_connections,
                        help="open connections; more get 503 at once (default %(default)s)")
    parser.add_argument("--api-key", default=None,
                        help="require this key (Authorization: Bearer KEY) on every endpoint but /health; "
                             "default: the BERTKIT_API_KEY environment variable, else no key")
    add_precision_flag(parser)
    parser.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from bertkit.serve.server import serve

    config = ServeConfig(model=args.model, index=args.index, host=args.host, port=args.port, workers=args.workers,
                         max_batch_tokens=args.max_batch_tokens, max_batch_size=args.max_batch_size,
                         batch_overhead_tokens=args.batch_overhead_tokens,
                         max_request_texts=args.max_request_texts,
                         max_queued_texts=args.max_queued_texts, request_timeout_s=args.request_timeout,
                         header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout,
                         keep_alive_timeout_s=args.keep_alive_timeout, max_connections=args.max_connections,
                         api_key=api_key_from_env(args.api_key), precision=args.precision)
    serve(config)
    return 0
