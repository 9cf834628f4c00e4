"""Checks of the folders a compression command reads and writes: its --output is not one of the folders it reads
(writing the pruned, quantized or distilled model there would replace the model it came from, and the reference
it is measured against), and the model it trains or prunes from holds float weights, not int8 ones."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from bertkit.checkpoints.json_files import META_FILE, read_json
from bertkit.checkpoints.weights import holds_model
from bertkit.errors import BertkitError
from bertkit.model.precision import has_int8


def check_new_output(output: str | os.PathLike, written_by: str, **sources: Optional[str | os.PathLike]) -> None:
    """sources: flag name (model, teacher, student) -> folder; a one-line error naming the flag when output is it.
    A model already in output is replaced only when this command wrote it (bertkit.json's `written_by` record:
    "quantization", "pruning", "distillation"); any other (a fine-tuned model, a download) is refused."""
    target = Path(output).resolve()
    for flag, folder in sources.items():
        if folder and Path(folder).resolve() == target:
            raise BertkitError(f"--output {output} is the --{flag} folder; write to a new folder, so the model it "
                               "comes from is kept")
    if target.is_dir() and holds_model(target):
        meta = read_json(target / META_FILE) if (target / META_FILE).is_file() else {}
        if written_by not in meta:
            held = f"a {meta['task']} model" if isinstance(meta.get("task"), str) else "a model"
            raise BertkitError(f"--output {output} holds {held} that this command did not write, which it would "
                               "replace; name a new folder")


def require_float(checkpoint, flag: str, command: str) -> None:
    """An int8 folder (bertkit quantize) cannot be pruned or distilled from: its int8 layers take no gradients and
    its weights do not load into float layers. A one-line error naming the folder it was quantized from."""
    if has_int8(checkpoint.encoder):
        source = ((checkpoint.meta or {}).get("quantization") or {}).get("quantized_from")
        raise BertkitError(f"--{flag} {checkpoint.path} is an int8 folder; {command} the float folder it was quantized "
                           f"from{f' ({source})' if source else ''}, then quantize the result")
