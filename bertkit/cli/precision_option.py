"""The --precision flag of the commands that run a model (encode, index, predict, evaluate, serve)."""
from __future__ import annotations

import sys

from bertkit.options import PRECISIONS


PRECISION_HELP = ("weights stored and computed in fp32, bf16 or int8 (a folder from bertkit quantize); auto: bf16 "
                  "where this CPU has AMX or avx512_bf16 (or on a GPU), else fp32; none: what the folder holds")


def add_precision_flag(parser) -> None:
    parser.add_argument("--precision", choices=PRECISIONS, default=None, help=PRECISION_HELP)


def say_precision(model, requested: str | None) -> None:
    """One line on stderr saying which precision runs, when it was asked for or is not plain fp32."""
    note = getattr(model, "precision_note", None)
    if note and (requested is not None or getattr(model, "precision", "fp32") != "fp32"):
        print(f"bertkit: {note}", file=sys.stderr)
