"""The progress bar of the long non-training steps (encode, index build/add, whiten, plot-embeddings,
evaluate-embeddings): tqdm on stderr, shown only when asked for (the CLI asks when stderr is a terminal) and the
job is long enough to want one. Training has its own bar in `bertkit.train.loop` (`progress_bar` config field).

The command line's `--quiet` and `--progress / --no-progress` are set here once per command (`configure`) and
win over what each step would do (`show_progress`): `--quiet` also drops the training loop's progress lines.
Library callers never set them, so they keep each function's own default."""
from __future__ import annotations

import sys
from typing import Optional

_settings: dict = {"progress": None, "quiet": False}


def configure(progress: Optional[bool] = None, quiet: bool = False) -> None:
    """The CLI's --progress / --no-progress (None: neither given) and --quiet, for the command about to run."""
    _settings.update(progress=progress, quiet=quiet)


def show_progress(default: bool) -> bool:
    """Whether to draw a progress bar: off under --quiet, else --progress / --no-progress, else `default`."""
    if _settings["quiet"]:
        return False
    return default if _settings["progress"] is None else bool(_settings["progress"])


def quiet() -> bool:
    return bool(_settings["quiet"])

def clock(seconds: float) -> str:
    """m:ss (h:mm:ss past an hour), rounded to the second."""
    seconds = int(round(max(seconds, 0.0)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


MIN_TEXTS = 1000   # below this a bar would flash by; the command's own summary line is enough


def progress_wanted() -> bool:
    """What the CLI passes as `progress`: a bar on a terminal, none in logs, pipes and CI (stderr not a TTY)."""
    return sys.stderr.isatty()


def progress_bar(total: int | None, enabled: bool, desc: str = "encoding", unit: str = "text"):
    """A tqdm bar on stderr, or None when disabled or when `total` is known and under MIN_TEXTS."""
    if not show_progress(enabled) or (total is not None and total < MIN_TEXTS):
        return None
    from tqdm import tqdm
    return tqdm(total=total, unit=unit, file=sys.stderr, desc=desc)
