"""Names read from a folder, and folders a run writes into: both may come from someone else (a model folder from a
colleague, a shared run folder), so neither may lead bertkit outside the folder.

- `member`: a file or subfolder name that a file in the folder records (modules.json's paths, a shard index's
  file names, a search index's store, a token-shard manifest). It must be a relative path with no `..` part; an
  absolute path or one that climbs out is refused with a one-line error naming the file and field. (Symbolic links
  inside model folders are left alone: the Hugging Face cache is made of them.)
- `refuse_links`: a folder that bertkit writes, appends to and deletes in (a run's `run/` record and training
  state, pre-training's token shards) must hold its own files: a symbolic link there, to the folder itself or
  anything in it, would make a run write through it or delete what it points at.
"""
from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from bertkit.errors import BertkitError, CheckpointError


def member(folder: str | os.PathLike, name: object, where: str | os.PathLike, field: str,
           error: type[BertkitError] = CheckpointError) -> Path:
    """`folder / name` for a `name` read from `where` (the file, in `folder`, that records it) under `field`."""
    if not isinstance(name, str) or not name.strip():
        raise error(f"{where}: {field} must be a non-empty file name, got {name!r}")
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if PureWindowsPath(name).drive or name.startswith(("/", "\\")) or ".." in parts:
        raise error(f"{where}: {field} {name!r} must name a file inside {folder} (a relative path without '..')")
    return Path(folder) / name


def refuse_links(folder: str | os.PathLike) -> None:
    """A one-line error when `folder`, or anything under it, is a symbolic link (nothing when it does not exist)."""
    folder = Path(folder)
    if folder.is_symlink():
        raise BertkitError(f"{folder} is a symbolic link; a run writes and deletes files there, so it must be a "
                           "folder of its own (remove the link)")
    if not folder.is_dir():
        return
    for root, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            path = Path(root) / name
            if path.is_symlink():
                raise BertkitError(f"{path} is a symbolic link; a run writes and deletes files in {folder}, so it "
                                   "must hold its own files (remove the link)")
