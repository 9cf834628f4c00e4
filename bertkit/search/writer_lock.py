"""One writer per index folder: an exclusive lock on `INDEX/writer.lock`, held from the first change until
the save that commits it (or until the writer closes).

The lock is an OS file lock (flock; on Windows msvcrt.locking), so the kernel releases it when its
process ends, even by kill -9: a lock file left behind never blocks anyone. The file itself only records
who holds the lock (PID and time) for the error message of the next writer. Readers take no lock: they
read the generation that index.json names, whose files no writer modifies.
"""
from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

from bertkit.errors import BertkitError

LOCK_FILE = "writer.lock"
POLL_S = 0.1          # how often a waiting writer tries again

try:
    import fcntl
except ImportError:   # pragma: no cover - Windows
    fcntl = None
    import msvcrt


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:  # pragma: no cover - Windows
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return True
    except OSError:
        return False


def _holder(path: Path) -> str:
    """'PID 123 since 2026-11-23 10:01:02' from the lock file, or a vaguer phrase while it is being written."""
    try:
        pid, since = path.read_text(encoding="utf-8").split()
        return f"PID {int(pid)} since {datetime.fromtimestamp(float(since)):%Y-%m-%d %H:%M:%S}"
    except (OSError, ValueError):
        return "another process"


class WriterLock:
    """`lock = WriterLock.acquire(folder, timeout_s)` ... `lock.release()`; also a context manager."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, folder: Path, timeout_s: float = 0.0) -> "WriterLock":
        """Take the folder's writer lock, waiting up to `timeout_s` seconds for another writer to finish;
        then a BertkitError names the holder."""
        path = Path(folder) / LOCK_FILE
        try:   # O_NOFOLLOW: a lock file that is a symlink (in a folder from elsewhere) must not be written through
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        except OSError as err:
            raise BertkitError(f"{path}: cannot open the index's lock file ({err.strerror}); it must be a plain "
                               "file bertkit can write") from None
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                os.close(fd)
                waited = f" (waited {timeout_s:g} s)" if timeout_s > 0 else ""
                raise BertkitError(f"index {Path(folder)} is locked by {_holder(path)}, a writer that has not "
                                   f"saved yet{waited}; let it finish, or pass --lock-timeout SECONDS to wait")
            time.sleep(POLL_S)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()} {time.time():.3f}\n".encode())
        return cls(path, fd)

    def release(self) -> None:
        if self._fd is None:
            return
        os.close(self._fd)   # closing the descriptor drops the lock
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "WriterLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
