"""Atomic saves for an index folder: numbered generations switched by one rename.

An index folder holds `index.json` (the manifest) and the files of the generation it names:
`store.<g>.sqlite` and the backend's `vectors.<g>.*`. A save writes every file of generation g+1 beside
the current ones, flushes them to disk, then replaces `index.json` with `os.replace` (atomic on POSIX and
Windows). A crash at any point before that rename leaves `index.json` naming generation g, whose files
were never touched, so the reopened index answers exactly as before; leftovers of the unfinished
generation are deleted by the next writer, which holds the writer lock (writer_lock.py), so the files
it deletes can belong to no live writer.
"""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

from bertkit.atomic_write import fsync_tree, write_json
from bertkit.errors import BertkitError
from bertkit.folder_names import member

MANIFEST = "index.json"
FORMAT_VERSION = 1
_GENERATION_FILE = re.compile(r"^(store|vectors)\.(\d+)\.")


def read_manifest(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise BertkitError(f"{folder}: not a bertkit index (no {MANIFEST}); build one with `bertkit index build`")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BertkitError(f"{path}: unreadable index manifest ({err})") from err
    if not isinstance(manifest, dict):
        raise BertkitError(f"{path}: an index manifest is a JSON object, got {type(manifest).__name__}")
    if manifest.get("format") != FORMAT_VERSION:
        raise BertkitError(f"{path}: index format {manifest.get('format')!r}, this bertkit reads {FORMAT_VERSION}")
    _check_fields(folder, path, manifest)
    return manifest


def _check_fields(folder: Path, path: Path, manifest: dict) -> None:
    """The manifest may come from anyone who could write the folder: its types are checked and every file it
    names must lie inside the folder."""
    generation = manifest.get("generation")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise BertkitError(f"{path}: generation must be a whole number >= 0, got {generation!r}")
    for key in ("settings", "info"):
        if not isinstance(manifest.get(key), dict):
            raise BertkitError(f"{path}: {key} must be an object, got {manifest.get(key)!r}")
    if not is_probe(manifest.get("probe")):
        raise BertkitError(f"{path}: probe must be a list of finite numbers, got {str(manifest.get('probe'))[:80]}")
    files = manifest.get("backend_files")
    if not isinstance(files, list):      # empty for a Milvus server's collection, which lives on the server
        raise BertkitError(f"{path}: backend_files must be a list of file names, got {files!r}")
    for i, name in enumerate([manifest.get("store"), *files]):
        member(folder, name, path, "store" if i == 0 else f"backend_files[{i - 1}]", BertkitError)


def is_probe(value) -> bool:
    """index.json's "probe" (search/encoding.py's PROBE_TEXT): absent (null) or a list of finite numbers."""
    return value is None or (isinstance(value, list) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value))


def commit_manifest(folder: Path, manifest: dict, new_files: list[str]) -> None:
    """Make `manifest` the index's current state: flush its files, then atomically replace index.json."""
    folder = Path(folder)
    for name in new_files:
        fsync_tree(folder / name)
    manifest = dict(manifest, format=FORMAT_VERSION)
    write_json(folder / MANIFEST, manifest)


def remove_other_generations(folder: Path, keep: set[int]) -> None:
    """Delete the files of generations not in `keep` (old generations, or leftovers of a crashed save)."""
    _remove_generations(folder, lambda generation: generation not in keep)


def remove_generation(folder: Path, generation: int) -> None:
    _remove_generations(folder, lambda g: g == generation)


def _remove_generations(folder: Path, doomed) -> None:
    for path in Path(folder).iterdir():
        match = _GENERATION_FILE.match(path.name)
        if match and doomed(int(match.group(2))):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def copy_generation_file(folder: Path, source: str, target: str) -> None:
    source_path, target_path = Path(folder) / source, Path(folder) / target
    if source_path.is_dir():
        shutil.copytree(source_path, target_path)
    else:
        shutil.copyfile(source_path, target_path)
