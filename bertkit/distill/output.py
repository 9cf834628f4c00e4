"""Checks of the folders a compression command reads and writes: its --output is not one of the folders it reads
(writing the pruned, quantized or distilled model there would replace the model it came from, and the reference
it is measured against), and the model it trains or prunes from holds float weights, not int8 ones."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from bertkit.errors import BertkitError
from bertkit.model.precision import has_int8


def check_new_output(output: str | os.PathLike, **sources: Optional[str | os.PathLike]) -> None:
    """sources: flag name (model, teacher, student) -> folder; a one-line error naming the flag when output is it."""
    target = Path(output).resolve()
    for flag, folder in sources.items():
        if folder and Path(folder).resolve() == target:
            raise BertkitError(f"--output {output} is the --{flag} folder; write to a new folder, so the model it "
                               "comes from is kept")


def require_float(checkpoint, flag: str, command: str) -> None:
    """An int8 folder (bertkit quantize) cannot be pruned or distilled from: its int8 layers take no gradients and
    its weights do not load into float layers. A one-line error naming the folder it was quantized from."""
    if has_int8(checkpoint.encoder):
        source = ((checkpoint.meta or {}).get("quantization") or {}).get("quantized_from")
        raise BertkitError(f"--{flag} {checkpoint.path} is an int8 folder; {command} the float folder it was quantized "
                           f"from{f' ({source})' if source else ''}, then quantize the result")
