"""Run logs: one JSON line per optimizer step (and per evaluation) in log.jsonl, and a loss.png curve."""
from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Optional

from bertkit.errors import BertkitError, BertkitWarning


class JsonlLog:
    """Appends records to `<folder>/log.jsonl`; a resumed run keeps appending to the same file. A new run
    (`fresh`) into a folder that has a log from an earlier run moves that log aside to the first free
    `log.<n>.jsonl` and starts its own, so log.jsonl and loss.png describe one run and no earlier record is lost."""

    def __init__(self, folder: Optional[Path], enabled: bool = True, fresh: bool = False):
        self.path = folder / "log.jsonl" if folder is not None and enabled else None
        self._file = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if fresh and self.path.exists() and self.path.stat().st_size:
                self.path.rename(earlier_log_path(self.path))
            # O_NOFOLLOW: a log.jsonl that is a link (a run folder from elsewhere) is refused, not appended through
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
            except OSError as err:
                raise BertkitError(f"{self.path}: cannot append the run log ({err.strerror}; a link is refused)") \
                    from None
            self._file = os.fdopen(fd, "a", encoding="utf-8")
            if self.path.stat().st_size and not _ends_with_newline(self.path):
                self._file.write("\n")          # a crash cut the last record short: the next one starts a line

    def write(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, ensure_ascii=False, allow_nan=True) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def earlier_log_path(path: Path) -> Path:
    """The first free `log.<n>.jsonl` beside `path` (n = 1, 2, ...)."""
    n = 1
    while path.with_name(f"{path.stem}.{n}{path.suffix}").exists():
        n += 1
    return path.with_name(f"{path.stem}.{n}{path.suffix}")


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def read_log(path: Path) -> list[dict]:
    """The records of a log.jsonl; a line that is not a JSON object (a record a crash cut short) is skipped with
    one warning naming it, so a resumed run still draws its curve and finishes."""
    records, bad = [], []
    with Path(path).open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if isinstance(record, dict):
                records.append(record)
            else:
                bad.append(number)
    if bad:
        warnings.warn(f"{path}:{bad[0]}: skipped {len(bad)} line(s) that are not JSON records (cut short by a "
                      "crash?)", BertkitWarning, stacklevel=2)
    return records


def plot_loss(log_path: Path, image_path: Path) -> Optional[str]:
    """Draw training loss (and evaluation loss, where logged) against steps. Returns a note instead of
    drawing when matplotlib is missing, so plotting never stops a finished run."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed; skipped loss.png (pip install 'bertkit[plot]')"
    records = read_log(log_path)
    # After a NaN roll-back or a resume, steps repeat: the last record for a step is the one that counted.
    train = {r["step"]: r["loss"] for r in records if "loss" in r and "eval" not in r and "event" not in r}
    evals = {r["step"]: r["eval"]["loss"] for r in records if isinstance(r.get("eval"), dict) and "loss" in r["eval"]}
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = sorted(s for s in train if math.isfinite(train[s]))
    ax.plot(steps, [train[s] for s in steps], label="train loss", linewidth=1)
    if evals:
        steps = sorted(evals)
        ax.plot(steps, [evals[s] for s in steps], "o-", label="eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(image_path, dpi=100)
    plt.close(fig)
    return None
