"""What the command line prints besides results: `--quiet` and `--progress / --no-progress`, set once per command.

Plain data, no torch. Library callers never set it, so they keep each function's own default; the CLI calls
`configure` before every command. `--quiet`: no progress bars and no progress lines (`bertkit: ...` notes of the
training loop); results, warnings and errors still print. `--progress` / `--no-progress`: progress bars on or
off (default: on where stderr is a terminal, as each command decides)."""
from __future__ import annotations

from typing import Optional

_settings = {"progress": None, "quiet": False}


def configure(progress: Optional[bool] = None, quiet: bool = False) -> None:
    _settings.update(progress=progress, quiet=quiet)


def show_progress(default: bool) -> bool:
    """Whether to draw a progress bar: off under --quiet, else --progress / --no-progress, else `default`."""
    if _settings["quiet"]:
        return False
    return default if _settings["progress"] is None else bool(_settings["progress"])


def quiet() -> bool:
    return bool(_settings["quiet"])
