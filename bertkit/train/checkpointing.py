"""Training state on disk: model, optimizer, schedule, RNG of every rank and data position, in one file
written atomically (a temporary file, then os.replace), so a crash mid-write never leaves a broken state."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import torch

from bertkit.errors import CheckpointError

STATE_FILE = "training_state.pt"


def state_path(output_dir: Path) -> Path:
    return Path(output_dir) / "checkpoint" / STATE_FILE


def save_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    torch.save(state, tmp)
    with open(tmp, "rb") as handle:   # make the bytes durable before the rename publishes them
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def load_state(path: Path) -> Optional[dict[str, Any]]:
    if not path.is_file():
        return None
    try:
        # RNG states hold numpy arrays and tuples, so the full unpickler is needed; the file is our own.
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # a truncated or foreign file: say which and what to do
        raise CheckpointError(f"{path}: cannot read the training state ({type(err).__name__}: {err}); "
                              "delete it to start over") from None
