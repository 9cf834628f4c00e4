"""The bytes between the server and its model process: a small JSON header and raw numpy buffers, no pickle.

One message is `<u32 header length><JSON header><data>`: token ids travel as int32 arrays (one per pass, cut by
the header's lengths), results as the arrays the runner returned (float32 vectors, logits; one block when they
share a shape) in their own dtype, so a vector that crosses the pipe is bit for bit the one the model made. Only the dtypes in DTYPES are read back; anything else is a WireError.
Requests: kind "embed" (EmbedItem), "predict" and "qa" (TokenSequence). Replies: results, or an error line.
"""
from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

from bertkit.serve.inputs import TokenSequence
from bertkit.serve.runner import EmbedItem, NonFiniteResult

DTYPES = frozenset({"float16", "float32", "float64", "int32", "int64"})
_LENGTH = struct.Struct("<I")


class WireError(Exception):
    """A message that is not what this protocol writes."""


def _message(header: dict, arrays: list[np.ndarray]) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([_LENGTH.pack(len(head)), head, *(np.ascontiguousarray(a).tobytes() for a in arrays)])


def _split(message: bytes) -> tuple[dict, memoryview]:
    if len(message) < _LENGTH.size:
        raise WireError("message shorter than its length field")
    (size,) = _LENGTH.unpack_from(message)
    end = _LENGTH.size + size
    if end > len(message):
        raise WireError("header longer than the message")
    header = json.loads(bytes(message[_LENGTH.size:end]))
    if not isinstance(header, dict):
        raise WireError("header is not an object")
    return header, memoryview(message)[end:]


class _Reader:
    """Arrays cut in order from a message's data part; copies, so they outlive the message."""

    def __init__(self, data: memoryview):
        self.data, self.offset = data, 0

    def take(self, spec: Any) -> np.ndarray:
        if not (isinstance(spec, list) and len(spec) == 2 and spec[0] in DTYPES and isinstance(spec[1], list)
                and all(isinstance(n, int) and n >= 0 for n in spec[1])):
            raise WireError(f"bad array spec {spec!r}")
        dtype, shape = np.dtype(spec[0]), tuple(spec[1])
        size = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if self.offset + size > len(self.data):
            raise WireError("array runs past the end of the message")
        array = np.frombuffer(self.data[self.offset:self.offset + size], dtype=dtype).reshape(shape).copy()
        self.offset += size
        return array


def _spec(array: np.ndarray) -> list:
    if array.dtype.name not in DTYPES:
        raise WireError(f"dtype {array.dtype.name} cannot be sent")
    return [array.dtype.name, list(array.shape)]


# --- requests: server -> model process --------------------------------------------------------------------
# A request's token ids travel as two int32 arrays for the whole pass (every item's ids, then every item's
# segment ids), cut per item by the header's lengths: one copy and one list conversion per pass, not per text
# (a 15-text pass decoded in ~0.3 ms with two arrays per text).
def encode_request(kind: str, payloads: list) -> bytes:
    items, ids, types = [], [], []
    for payload in payloads:
        sequence = payload.sequence if kind == "embed" else payload
        item: dict = {"n": len(sequence.input_ids), "pair": bool(sequence.pair)}
        if kind == "embed":
            item.update(pooling=payload.pooling, normalize=bool(payload.normalize))
        items.append(item)
        ids += sequence.input_ids
        types += sequence.token_type_ids
    return _message({"kind": kind, "items": items}, [np.asarray(ids, dtype=np.int32).reshape(-1),
                                                     np.asarray(types, dtype=np.int32).reshape(-1)])


def decode_request(message: bytes) -> tuple[str, list]:
    header, data = _split(message)
    kind, items = header.get("kind"), header.get("items")
    if kind not in ("embed", "predict", "qa") or not isinstance(items, list):
        raise WireError("bad request header")
    lengths = [item.get("n") if isinstance(item, dict) else None for item in items]
    if not all(isinstance(n, int) and n >= 0 for n in lengths):
        raise WireError("bad request item")
    reader, total = _Reader(data), sum(lengths)
    ids, types = (reader.take(["int32", [total]]).tolist() for _ in range(2))
    payloads, start = [], 0
    for item, n in zip(items, lengths):
        sequence = TokenSequence(ids[start:start + n], types[start:start + n], bool(item.get("pair")))
        start += n
        payloads.append(EmbedItem(sequence, str(item.get("pooling")), bool(item.get("normalize")))
                        if kind == "embed" else sequence)
    return kind, payloads


# --- replies: model process -> server ---------------------------------------------------------------------
def encode_reply(results: list, wall_seconds: float, cpu_seconds: float) -> bytes:
    """Results that are all arrays of one dtype and shape (a pass's vectors) go as one (B, ...) block."""
    if results and all(isinstance(r, np.ndarray) for r in results) and \
            len({(r.dtype, r.shape) for r in results}) == 1:
        block = np.stack(results)
        return _message({"block": _spec(block), "wall": wall_seconds, "cpu": cpu_seconds}, [block])
    rows, arrays = [], []
    for result in results:
        if isinstance(result, NonFiniteResult):
            rows.append({"nonfinite": result.what})
        elif isinstance(result, tuple):                  # QA: (start logits, end logits)
            rows.append({"tuple": [_spec(part) for part in result]})
            arrays += list(result)
        else:
            rows.append({"array": _spec(result)})
            arrays.append(result)
    return _message({"rows": rows, "wall": wall_seconds, "cpu": cpu_seconds}, arrays)


def encode_failure(error: BaseException) -> bytes:
    return _message({"error": f"{type(error).__name__}: {error}".splitlines()[0]}, [])


def decode_reply(message: bytes) -> tuple[list | None, str | None, float, float]:
    """(results, None, the pass's wall and CPU seconds) or (None, the child's one-line error, 0.0, 0.0)."""
    header, data = _split(message)
    if "error" in header:
        return None, str(header["error"]), 0.0, 0.0
    if "block" in header:
        block = _Reader(data).take(header["block"])
        if block.ndim < 1:
            raise WireError("bad reply block")
        return list(block), None, float(header.get("wall") or 0.0), float(header.get("cpu") or 0.0)
    rows, reader, results = header.get("rows"), _Reader(data), []
    if not isinstance(rows, list):
        raise WireError("bad reply header")
    for row in rows:
        if not isinstance(row, dict):
            raise WireError("bad reply row")
        if "nonfinite" in row:
            results.append(NonFiniteResult(str(row["nonfinite"])))
        elif "tuple" in row and isinstance(row["tuple"], list):
            results.append(tuple(reader.take(spec) for spec in row["tuple"]))
        else:
            results.append(reader.take(row.get("array")))
    return results, None, float(header.get("wall") or 0.0), float(header.get("cpu") or 0.0)


def encode_control(header: dict) -> bytes:
    """A message with no arrays: the model process's "ready" or its start-up failure."""
    return _message(header, [])


def decode_control(message: bytes) -> dict:
    return _split(message)[0]
