"""Reading a model folder's JSON files: untrusted, so a bad file is a CheckpointError naming it, never a traceback."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertkit.errors import CheckpointError

META_FILE = "bertkit.json"     # what a folder holds besides the HF files: task, labels, pooling, provenance


def read_json(path: Path, expect: type | None = dict) -> Any:
    """The parsed file; `expect` (dict by default, None for any value) is the type the top level must have."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from None
    if expect is not None and not isinstance(value, expect):
        raise CheckpointError(f"{path}: expected a JSON {'object' if expect is dict else expect.__name__}, "
                              f"got a {type(value).__name__}")
    return value
