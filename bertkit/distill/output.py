"""The one check that a compression command's --output is not one of the folders it reads: writing the pruned,
quantized or distilled model there would replace the model it came from (and the reference it is measured
against)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from bertkit.errors import BertkitError


def check_new_output(output: str | os.PathLike, **sources: Optional[str | os.PathLike]) -> None:
    """sources: flag name (model, teacher, student) -> folder; a one-line error naming the flag when output is it."""
    target = Path(output).resolve()
    for flag, folder in sources.items():
        if folder and Path(folder).resolve() == target:
            raise BertkitError(f"--output {output} is the --{flag} folder; write to a new folder, so the model it "
                               "comes from is kept")
