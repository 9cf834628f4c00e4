"""Run this checkout's bertkit CLI from a benchmark script, as a user runs it: `bertkit(*args)` -> its stdout.

With `log`, the command line, its stderr and its stdout are appended to that file (long runs, several at once);
without it, stderr is captured and its tail echoed. `threads` sets OMP / MKL threads for the process. A failing
command raises RuntimeError with stderr's tail or the log's path."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

CHECKOUT = Path(__file__).resolve().parent.parent


def checkout_env(threads: Optional[int] = None) -> dict[str, str]:
    """The environment that runs this checkout's bertkit (first on PYTHONPATH), with `threads` OMP / MKL threads."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(CHECKOUT), os.environ.get("PYTHONPATH"))))}
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def bertkit(*args: str, log: Optional[Path] = None, threads: Optional[int] = None,
            entry: tuple[str, ...] = ("-m", "bertkit")) -> str:
    """`entry`: what python runs before the CLI's arguments (a script that patches the CLI and runs it, for one)."""
    env = checkout_env(threads)
    command = [sys.executable, *entry, *args]
    if log is None:
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"bertkit {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        sys.stderr.write(done.stderr[-1500:])
        return done.stdout
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"$ bertkit {' '.join(args)}\n")
        handle.flush()
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=handle, text=True, env=env)
        handle.write(done.stdout)
    if done.returncode != 0:
        raise RuntimeError(f"bertkit {args[0]} failed (exit {done.returncode}); see {log}")
    return done.stdout
