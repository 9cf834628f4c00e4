"""The progress bar of the long non-training steps (encode, index build/add, whiten, plot-embeddings,
evaluate-embeddings): tqdm on stderr, shown only when asked for (the CLI asks when stderr is a terminal) and the
job is long enough to want one. Training has its own bar in `bertkit.train.loop` (`progress_bar` config field)."""
from __future__ import annotations

import sys

MIN_TEXTS = 1000   # below this a bar would flash by; the command's own summary line is enough


def progress_wanted() -> bool:
    """What the CLI passes as `progress`: a bar on a terminal, none in logs, pipes and CI (stderr not a TTY)."""
    return sys.stderr.isatty()


def progress_bar(total: int | None, enabled: bool, desc: str = "encoding", unit: str = "text"):
    """A tqdm bar on stderr, or None when disabled or when `total` is known and under MIN_TEXTS."""
    if not enabled or (total is not None and total < MIN_TEXTS):
        return None
    from tqdm import tqdm
    return tqdm(total=total, unit=unit, file=sys.stderr, desc=desc)
