"""Atomic, durable replacement of files and folders: on disk is the old version or the new one, whole.

A file: written under a temporary sibling name, fsynced, renamed over the target with os.replace, and the
folder fsynced so that the rename itself reaches the disk.

A folder: built whole as `.NAME.tmp-PID-XXXX` beside the target, its files and itself fsynced, then two
renames: target -> `.NAME.old-PID-XXXX`, temporary -> target. POSIX cannot swap two non-empty folders
atomically (Linux's renameat2 RENAME_EXCHANGE is not portable), so a crash between the renames leaves
the previous folder under its .old name. `recover_folder`, which every save and load of the target calls,
renames it back; when the new folder is already in place it carries over the files only the old one had
(run logs, metrics) and deletes it. Temporary folders of saves whose process is gone are deleted then too.
Everything is created with the process's umask, like any other file the user's programs write.
"""
from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import time
import warnings
from pathlib import Path
from typing import Callable, Iterable

from bertkit.errors import BertkitError, BertkitWarning

# A temporary folder without a PID in its name (left by earlier versions of bertkit) counts as abandoned once
# it is this old: no save takes an hour between creating its folder and renaming it.
UNOWNED_STALE_S = 3600.0


def fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    """Make renames and new entries in `path` durable (a no-op where folders cannot be opened: Windows)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """fsync a file, or every file and folder under a folder (the folder itself last)."""
    path = Path(path)
    if not path.is_dir():
        fsync_file(path)
        return
    for child in path.iterdir():
        fsync_tree(child)
    fsync_dir(path)


def write_file(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` to fill a temporary sibling of `path`, then make it `path` atomically and durably."""
    path = Path(path)
    if path.is_dir():
        raise BertkitError(f"{path} is a folder; name a file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        mode = _new_file_mode(tmp)
        write(tmp)
        if tmp.stat().st_mode & 0o777 != mode:      # a writer that creates 0600 files (safetensors does)
            tmp.chmod(mode)
        fsync_file(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def _new_file_mode(path: Path) -> int:
    """Create `path` empty, as open() creates files (0666 minus the umask), and return that mode: the umask
    read without os.umask, which sets the process-wide value (a race with threads)."""
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    return path.stat().st_mode & 0o777



def json_text(value, indent: int | None = 2) -> str:
    """The one JSON form bertkit writes: not ASCII-escaped (the file is UTF-8), indented unless `indent` is None,
    ending in a newline. Files inside a folder that is swapped in whole (save_folder) are written with it
    directly; every other JSON file goes through write_json. NaN and infinities (a diverged run's dev loss) are
    written as null: JSON has no such numbers, and other tools refuse a file that holds them."""
    return json.dumps(_finite(value), indent=indent, ensure_ascii=False, allow_nan=False) + "\n"


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """One json_text line (not indented) per row at `path`, atomically and durably (a crash leaves the previous
    file, never half of the new one); returns the number of rows."""
    count = 0

    def write(tmp: Path) -> None:
        nonlocal count
        with open(tmp, "w", encoding="utf-8") as out:
            for row in rows:
                out.write(json_text(row, indent=None))
                count += 1

    write_file(path, write)
    return count


def write_json(path: str | os.PathLike, value, indent: int | None = 2) -> None:
    """`value` as UTF-8 JSON (json_text) at `path`, atomically and durably."""
    text = json_text(value, indent)
    write_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


# --- folders ---------------------------------------------------------------------------------------------

def _sibling_pattern(target: Path, kind: str) -> re.Pattern:
    # .NAME.tmp-PID-HEX (this module), .NAME.old-PID and .NAME.tmp-RANDOM (earlier versions)
    return re.compile(rf"^\.{re.escape(target.name)}\.{kind}-(?:(\d+)(?:-[0-9a-f]+)?|[a-z0-9_]+)$")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if os.name == "nt":   # os.kill would terminate the process there; assume it lives (nothing is deleted)
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:       # it exists but belongs to someone else
        return True
    return True


def _abandoned(path: Path, pid: str | None) -> bool:
    if pid is not None:
        return not _pid_alive(int(pid))
    try:
        return time.time() - path.stat().st_mtime > UNOWNED_STALE_S
    except OSError:
        return False


def check_folder_target(target: str | os.PathLike) -> None:
    """A data file given as a folder output (--output) is never moved aside or written into: one line instead."""
    if Path(target).exists() and not Path(target).is_dir():
        raise BertkitError(f"{target} is a file, not a folder; name a new or existing folder for the output")


def temp_folder(target: str | os.PathLike) -> Path:
    """A new, empty `.NAME.tmp-PID-XXXX` beside `target` (created with the umask's permissions)."""
    target = Path(target)
    check_folder_target(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    tmp.mkdir()
    return tmp


def _follow_umask(folder: Path) -> None:
    """Give every file the mode the umask gives new files (some writers create theirs 0600).

    The folder was made by mkdir with the default 0777, so its mode is 0777 minus the umask; read it
    from there rather than calling os.umask, which sets the process-wide value (a race with threads)."""
    file_mode = folder.stat().st_mode & 0o666
    for child in folder.rglob("*"):
        if child.is_file() and not child.is_symlink() and child.stat().st_mode & 0o777 != file_mode:
            child.chmod(file_mode)


def recover_folder(target: str | os.PathLike, never_carry: tuple[str, ...] = ()) -> None:
    """Finish or undo what a save of `target` that died left beside it (see the module docstring).
    never_carry: names of the old folder's files that must not join the new one (see replace_folder)."""
    target = Path(target)
    parent = target.parent
    if not parent.is_dir():
        return
    old_name, tmp_name = _sibling_pattern(target, "old"), _sibling_pattern(target, "tmp")
    for entry in sorted(parent.iterdir(), key=lambda p: p.name):
        try:
            if (match := old_name.match(entry.name)) and entry.is_dir() and _abandoned(entry, match.group(1)):
                if not target.exists():
                    os.replace(entry, target)      # died between the renames: the previous folder is back
                else:
                    _carry_over(entry, target, never_carry)
                    shutil.rmtree(entry, ignore_errors=True)
                fsync_dir(parent)
            elif (match := tmp_name.match(entry.name)) and entry.is_dir() and _abandoned(entry, match.group(1)):
                shutil.rmtree(entry, ignore_errors=True)
        except OSError as err:   # a read-only parent, say: loading can still go on; say what was left
            warnings.warn(f"{entry}: left by an interrupted save of {target.name} and could not be put right "
                          f"({err}); remove or rename it by hand", BertkitWarning, stacklevel=2)


def _carry_over(old: Path, target: Path, never_carry: tuple[str, ...] = ()) -> None:
    for item in old.iterdir():
        if not (target / item.name).exists() and item.name not in never_carry:
            os.replace(item, target / item.name)


def replace_folder(new: Path, target: str | os.PathLike, never_carry: tuple[str, ...] = ()) -> None:
    """Make the complete folder `new` (from temp_folder) the `target`, durably; files of the old target that
    `new` lacks are carried over, but for those named in `never_carry` (an old weight file beside a new one
    of another name would be read in its place). Call recover_folder(target) before building `new`."""
    target = Path(target)
    _follow_umask(new)
    fsync_tree(new)
    if not target.exists():
        os.replace(new, target)
        fsync_dir(target.parent)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
    os.replace(target, old)
    os.replace(new, target)
    fsync_dir(target.parent)
    _carry_over(old, target, never_carry)
    fsync_dir(target)
    shutil.rmtree(old, ignore_errors=True)
