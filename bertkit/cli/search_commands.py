"""`bertkit index build|add|update|delete|info` and `bertkit search`: thin shells over bertkit.search."""
from __future__ import annotations

import argparse
import json
import sys
import time

from bertkit.cli.precision_option import add_precision_flag, say_precision
from bertkit.errors import BertkitError
from bertkit.cli.flags import add_layers_flag, check_stride_flag, positive_int
from bertkit.options import POOLINGS
from bertkit.progress import progress_wanted


def register(subparsers) -> None:
    p = subparsers.add_parser("index", help="build and update a semantic search index (Faiss or Milvus)")
    actions = p.add_subparsers(dest="index_action", metavar="ACTION")
    actions.required = True

    build = actions.add_parser("build", help="encode a documents .jsonl ({id, text, ...metadata}) into an index")
    build.add_argument("--model", required=True, help="model folder that encodes documents and queries")
    build.add_argument("--input", required=True, help="documents .jsonl: id, text, other fields kept as metadata")
    build.add_argument("--index", required=True, help="index folder to create")
    build.add_argument("--pooling", choices=POOLINGS[:-1], default=None, help="default: the model folder's")
    add_layers_flag(build, "default: the model folder's")
    build.add_argument("--max-length", type=int, default=None)
    build.add_argument("--long-texts", choices=("truncate", "sliding-window", "error"), default="truncate",
                       help="documents over max-length: cut and count (default), average overlapping windows, or "
                            "fail; recorded with the index, so queries and later adds are encoded the same way")
    build.add_argument("--stride", type=int, default=None,
                       help="sliding-window overlap in tokens (default: 128, less when --max-length leaves a short window)")
    build.add_argument("--batch-size", type=positive_int, default=64)
    build.add_argument("--kind", choices=("auto", "flat", "ivf", "ivfpq"), default="auto",
                       help="auto: exact flat search, IVF beyond --ivf-threshold vectors")
    build.add_argument("--ivf-threshold", type=int, default=50_000)
    build.add_argument("--metric", choices=("cosine", "ip"), default="cosine")
    build.add_argument("--backend", choices=("faiss", "milvus"), default="faiss")
    build.add_argument("--milvus-uri", default=None, help="Milvus server URI; default: Milvus Lite in the index")
    build.add_argument("--overwrite", action="store_true", help="replace an existing index in --index")
    add_precision_flag(build)    # recorded with the index: queries are encoded the same way
    _lock_timeout_flag(build)
    build.set_defaults(func=run_build)

    for name, help_text in (("add", "add new documents (an existing id is an error)"),
                            ("update", "add documents, replacing those whose id is already indexed")):
        q = actions.add_parser(name, help=help_text)
        q.add_argument("--index", required=True)
        q.add_argument("--input", required=True, help="documents .jsonl: id, text, other fields as metadata")
        add_precision_flag(q)    # default: the precision the index was built with
        _lock_timeout_flag(q)
        q.set_defaults(func=run_add, replace=name == "update")

    delete = actions.add_parser("delete", help="delete documents by id")
    delete.add_argument("--index", required=True)
    delete.add_argument("ids", nargs="*", help="ids to delete")
    delete.add_argument("--input", help="a .txt (one id per line) or .jsonl (field id) file of ids")
    _lock_timeout_flag(delete)
    delete.set_defaults(func=run_delete)

    info = actions.add_parser("info", help="what the index holds and how it searches")
    info.add_argument("--index", required=True)
    info.set_defaults(func=run_info)

    s = subparsers.add_parser("search", help="query an index; prints JSON lines {id, score, text, ...metadata}")
    s.add_argument("--index", required=True)
    s.add_argument("--query", required=True, action="append", help="query text (repeatable)")
    s.add_argument("-k", type=int, default=10)
    s.add_argument("--filter", action="append", default=[], metavar="FIELD=VALUE",
                   help="keep documents whose metadata FIELD equals VALUE; repeat a field to allow several")
    s.add_argument("--nprobe", type=int, default=None, help="IVF lists to probe (default: chosen at build)")
    s.set_defaults(func=run_search)


def _lock_timeout_flag(parser) -> None:
    parser.add_argument("--lock-timeout", type=float, default=0.0, metavar="SECONDS",
                        help="when another writer holds the index, wait this long for it before giving up "
                             "(default: give up at once, naming the writer's PID)")


def _say(message: str) -> None:
    print(f"bertkit: {message}", file=sys.stderr)


def _documents(count: int) -> str:
    return f"{count:,} document{'s' * (count != 1)}"


def _describe(info) -> str:
    params = ", ".join(f"{k} {v}" for k, v in info.params.items())
    text = f"{info.count} vectors of dim {info.dim} in a {info.backend} {info.kind} index"
    return text + (f" ({params})" if params else "") + (f"; note: {info.note}" if info.note else "")


def parse_filters(items: list[str]) -> dict:
    """["lang=en", "year=2001", "lang=de"] -> {"lang": ["en", "de"], "year": [2001, "2001"]}.

    A value that reads as a JSON number or boolean also matches its string form, since metadata files
    may hold either.
    """
    filters: dict[str, list] = {}
    for item in items:
        field, sep, raw = item.partition("=")
        if not sep or not field:
            raise BertkitError(f"--filter {item!r}: expected FIELD=VALUE")
        values = filters.setdefault(field, [])
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = raw
        if isinstance(parsed, (int, float, bool)) and not isinstance(parsed, str):
            values.append(parsed)
        values.append(raw)
    return filters


def run_build(args: argparse.Namespace) -> int:
    from bertkit.api import Index
    from bertkit.search import EncoderSpec, IndexSettings, ModelTextEncoder
    from bertkit.search.documents import add_documents

    check_stride_flag(args)
    settings = IndexSettings(backend=args.backend, kind=args.kind, ivf_threshold=args.ivf_threshold,
                             metric=args.metric, milvus_uri=args.milvus_uri)
    encoder = ModelTextEncoder(EncoderSpec(args.model, pooling=args.pooling, layers=args.layers,
                                           max_length=args.max_length, batch_size=args.batch_size,
                                           precision=args.precision, long_texts=args.long_texts,
                                           stride=args.stride))
    started = time.perf_counter()
    index = Index.create(args.index, encoder=encoder, settings=settings, overwrite=args.overwrite,
                         lock_timeout_s=args.lock_timeout)
    try:
        say_precision(encoder.model, args.precision)
        count = add_documents(index, args.input, replace=False, progress=progress_wanted())
        info = index.save()
    finally:
        index.close()
    _say(f"indexed {_documents(count)} in {time.perf_counter() - started:.1f}s: {_describe(info)}")
    return 0


def run_add(args: argparse.Namespace) -> int:
    from bertkit.api import Index
    from bertkit.search.documents import add_documents

    with Index.open(args.index, encoder=_encoder_in_precision(args.index, args.precision),
                    lock_timeout_s=args.lock_timeout) as index:
        if index.encoder is not None and hasattr(index.encoder, "model"):
            say_precision(index.encoder.model, args.precision)
        count = add_documents(index, args.input, replace=args.replace, progress=progress_wanted())
        info = index.save()
    _say(f"{'updated' if args.replace else 'added'} {_documents(count)}: {_describe(info)}")
    return 0


def _encoder_in_precision(index_folder: str, precision: str | None):
    """The index's own encoder with another precision (recorded in the index at save), or None: the manifest's."""
    if precision is None:
        return None
    from bertkit.search import EncoderSpec, ModelTextEncoder
    from bertkit.search.generations import read_manifest

    spec = read_manifest(index_folder).get("encoder")
    if not spec:
        raise BertkitError(f"{index_folder}: this index has no model to encode with; --precision does not apply")
    return ModelTextEncoder(EncoderSpec(**{**spec, "precision": precision}))


def run_delete(args: argparse.Namespace) -> int:
    from bertkit.api import Index
    from bertkit.search.documents import read_ids

    ids = list(args.ids) + (read_ids(args.input) if args.input else [])
    if not ids:
        raise BertkitError("index delete: give ids as arguments or --input FILE")
    with Index.open(args.index, lock_timeout_s=args.lock_timeout) as index:
        missing = index.delete(ids)
        info = index.save()
    _say(f"deleted {_documents(len(ids) - len(missing))}: {_describe(info)}")
    if missing:
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        _say(f"{len(missing)} ids were not in the index: {shown}")
    return 0


def run_info(args: argparse.Namespace) -> int:
    from bertkit.api import Index
    from bertkit.search.generations import read_manifest

    manifest = read_manifest(args.index)
    with Index.open(args.index) as index:
        info = index.info()
        print(json.dumps({"documents": len(index), "backend": info.backend, "kind": info.kind, "dim": info.dim,
                          "params": info.params, "note": info.note, "encoder": manifest.get("encoder"),
                          "settings": manifest.get("settings")}, ensure_ascii=False, indent=2))
    return 0


def run_search(args: argparse.Namespace) -> int:
    from bertkit.api import Index
    from bertkit.tokenizer.tokenizer import EMPTY_TEXT

    if args.k < 1:
        raise BertkitError(f"-k {args.k}: must be >= 1")
    empty = [i for i, query in enumerate(args.query) if not query.strip()]
    if empty:      # before the model loads; the encoder would say "text 0", which is no flag
        raise BertkitError(f"--query {args.query[empty[0]]!r} (query {empty[0] + 1} of {len(args.query)}) "
                           f"{EMPTY_TEXT}")
    filters = parse_filters(args.filter)
    with Index.open(args.index, nprobe=args.nprobe) as index:
        results = index.search_many(args.query, k=args.k, filter=filters or None)
    for query, hits in zip(args.query, results):
        for hit in hits:
            row = hit.as_json()
            if len(args.query) > 1:
                row = {"query": query, **row}
            print(json.dumps(row, ensure_ascii=False))
    return 0
