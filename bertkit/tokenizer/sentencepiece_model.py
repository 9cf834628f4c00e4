"""Reading a SentencePiece model file (`spiece.model`) without the sentencepiece package.

The file is one protobuf message, `ModelProto` (sentencepiece_model.proto): its pieces (string, score, type),
the trainer's settings (model type, unk id) and the normalizer (a precompiled character map). Only those fields
are read, by walking the protobuf wire format; everything else is skipped. The file is untrusted: every length
is checked against the bytes that are left, and a malformed file is named in a one-line CheckpointError.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from bertkit.errors import CheckpointError

# SentencePiece.Type
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
UNIGRAM = 1       # TrainerSpec.ModelType; 2 is BPE, 3 WORD, 4 CHAR
_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
# protobuf field numbers (sentencepiece_model.proto)
_PIECES, _TRAINER, _NORMALIZER = 1, 2, 3
_PIECE, _SCORE, _TYPE = 1, 2, 3
_MODEL_TYPE, _UNK_ID = 3, 40
_CHARSMAP, _ADD_DUMMY_PREFIX = 2, 3


@dataclass(frozen=True)
class Piece:
    piece: str
    score: float
    type: int = NORMAL


@dataclass(frozen=True)
class SentencePieceModel:
    pieces: list[Piece]
    model_type: str = "unigram"
    unk_id: int = 0
    precompiled_charsmap: Optional[bytes] = None
    add_dummy_prefix: bool = True


class _Malformed(Exception):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Malformed("a number runs past the end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of one message: an int for varint / fixed, bytes for length-delimited."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            if pos + 8 > len(data):
                raise _Malformed("a 64-bit field runs past the end")
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise _Malformed(f"field {number} claims {length} bytes, {len(data) - pos} are left")
            value, pos = data[pos:pos + length], pos + length
        elif wire == 5:
            if pos + 4 > len(data):
                raise _Malformed("a 32-bit field runs past the end")
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise _Malformed(f"unknown wire type {wire} (field {number})")
        yield number, wire, value


def _piece(data: bytes) -> Piece:
    text, score, kind = None, 0.0, NORMAL
    for number, wire, value in _fields(data):
        if number == _PIECE and wire == 2:
            text = value.decode("utf-8")
        elif number == _SCORE and wire == 5:
            score = struct.unpack("<f", value)[0]
        elif number == _TYPE and wire == 0:
            kind = value
    if text is None:
        raise _Malformed("a piece without its text")
    return Piece(text, score, kind)


def parse_sentencepiece_model(data: bytes, source: str) -> SentencePieceModel:
    pieces: list[Piece] = []
    model_type, unk_id, charsmap, dummy_prefix = UNIGRAM, 0, None, True
    try:
        for number, wire, value in _fields(data):
            if number == _PIECES and wire == 2:
                pieces.append(_piece(value))
            elif number == _TRAINER and wire == 2:
                for inner, inner_wire, inner_value in _fields(value):
                    if inner == _MODEL_TYPE and inner_wire == 0:
                        model_type = inner_value
                    elif inner == _UNK_ID and inner_wire == 0:
                        unk_id = inner_value
            elif number == _NORMALIZER and wire == 2:
                for inner, inner_wire, inner_value in _fields(value):
                    if inner == _CHARSMAP and inner_wire == 2:
                        charsmap = inner_value or None
                    elif inner == _ADD_DUMMY_PREFIX and inner_wire == 0:
                        dummy_prefix = bool(inner_value)
    except (_Malformed, UnicodeDecodeError) as err:
        raise CheckpointError(f"{source}: not a valid SentencePiece model ({err}); the file is truncated, corrupt "
                              "or something else") from None
    if not pieces:
        raise CheckpointError(f"{source}: not a valid SentencePiece model (it holds no pieces)")
    if model_type != UNIGRAM:
        raise CheckpointError(f"{source}: a SentencePiece {_MODEL_TYPES.get(model_type, model_type)} model; "
                              "XLNet's tokenizer is a unigram model")
    if not 0 <= unk_id < len(pieces):
        raise CheckpointError(f"{source}: unk_id {unk_id} is outside its {len(pieces)} pieces")
    return SentencePieceModel(pieces, "unigram", unk_id, charsmap, dummy_prefix)


def read_sentencepiece_model(path: Path) -> tuple[SentencePieceModel, bytes]:
    """The parsed model and the file's bytes (kept, so a saved folder carries the same spiece.model)."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"{path}: cannot read ({err.strerror})") from None
    if data.startswith(b"version https://git-lfs"):
        raise CheckpointError(f"{path}: is a git-lfs pointer file, not the SentencePiece model; run `git lfs pull`")
    return parse_sentencepiece_model(data, str(path)), data
