"""Folder replacement that survives a crash at any instant, cleans up after killed saves, follows the umask
and fsyncs before it renames."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from bertkit import atomic_write
from bertkit.atomic_write import write_jsonl
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.model import Encoder


def weights(folder) -> dict[str, torch.Tensor]:
    return load_checkpoint(folder).encoder.state_dict()


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# Saves a model with other weights over `target`, and dies (like kill -9: no clean-up) just before the n-th
# os.replace of the swap: 2 = between the two renames, 3 = after both, before the carried-over files moved.
_DYING_SAVE = """
import os, sys, torch
from bertkit import atomic_write
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.model import Encoder
target, die_at = sys.argv[1], int(sys.argv[2])
checkpoint = load_checkpoint(target)
real_replace, calls = os.replace, [0]
def replace(src, dst):
    calls[0] += 1
    if calls[0] == die_at:
        os._exit(9)
    real_replace(src, dst)
atomic_write.os.replace = replace
torch.manual_seed(1)
save_checkpoint(target, Encoder(checkpoint.config), checkpoint.tokenizer)
"""


@pytest.mark.parametrize("die_at", [2, 3])
def test_a_save_killed_during_the_swap_is_put_right_by_the_next_load(tmp_path, tiny_model_dir, die_at):
    target = tmp_path / "model"
    original = load_checkpoint(tiny_model_dir)
    save_checkpoint(target, original.encoder, original.tokenizer)
    (target / "run").mkdir()
    (target / "run" / "log.jsonl").write_text('{"step": 1}\n')
    died = subprocess.run([sys.executable, "-c", textwrap.dedent(_DYING_SAVE), str(target), str(die_at)],
                          capture_output=True, text=True, timeout=120)
    assert died.returncode == 9, died.stderr
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".model.old-")]
    assert len(leftovers) == 1
    if die_at == 2:
        assert not target.exists()          # the crash left no folder under the target's name
    loaded = weights(target)               # the next load recovers
    if die_at == 2:
        assert same_weights(loaded, original.encoder.state_dict())    # the previous model, as it was
    else:
        assert not same_weights(loaded, original.encoder.state_dict())  # the new model was already in place
    assert (target / "run" / "log.jsonl").read_text() == '{"step": 1}\n'   # files only the old folder had
    assert [p.name for p in tmp_path.iterdir()] == ["model"]             # no .old-*, no .tmp-* left


def test_temp_folders_of_dead_saves_are_removed_and_live_ones_kept(tmp_path, tiny_model_dir):
    target = tmp_path / "model"
    dead = tmp_path / f".model.tmp-{dead_pid()}-0123abcd"
    live = tmp_path / f".model.tmp-{os.getppid()}-0123abcd"     # our parent: alive, maybe saving right now
    other = tmp_path / f".other.tmp-{dead_pid()}-0123abcd"      # another target's: not ours to judge
    for folder in (dead, live, other):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x" * 1000)
    checkpoint = load_checkpoint(tiny_model_dir)
    save_checkpoint(target, checkpoint.encoder, checkpoint.tokenizer)
    assert not dead.exists() and live.exists() and other.exists()
    assert same_weights(weights(target), checkpoint.encoder.state_dict())


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_saved_folders_and_files_follow_the_umask(tmp_path, tiny_model_dir, umask):
    checkpoint = load_checkpoint(tiny_model_dir)
    previous = os.umask(umask)
    try:
        save_checkpoint(tmp_path / "model", checkpoint.encoder, checkpoint.tokenizer)
        save_checkpoint(tmp_path / "model", checkpoint.encoder, checkpoint.tokenizer)   # a replacement too
    finally:
        os.umask(previous)
    assert (tmp_path / "model").stat().st_mode & 0o777 == 0o777 & ~umask
    for child in (tmp_path / "model").iterdir():
        assert child.stat().st_mode & 0o777 == 0o666 & ~umask, child.name


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_single_files_follow_the_umask_whoever_writes_them(tmp_path, umask):
    """write_file's writer may create its file 0600 (safetensors does: training_state.safetensors and GPT-2's
    model.safetensors were 0600); the published file has the mode open() gives (0666 minus the umask)."""
    from safetensors.torch import save_file

    previous = os.umask(umask)
    try:
        atomic_write.write_file(tmp_path / "state.safetensors", lambda tmp: save_file({"a": torch.zeros(2)}, str(tmp)))
        atomic_write.write_json(tmp_path / "meta.json", {"a": 1})
    finally:
        os.umask(previous)
    for name in ("state.safetensors", "meta.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask, name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json", "state.safetensors"]   # no temporaries left


def test_every_file_is_fsynced_before_the_rename_that_publishes_it(tmp_path, tiny_model_dir, monkeypatch):
    checkpoint = load_checkpoint(tiny_model_dir)
    target = tmp_path / "model"
    save_checkpoint(target, checkpoint.encoder, checkpoint.tokenizer)
    events = []
    real_file, real_dir, real_replace = atomic_write.fsync_file, atomic_write.fsync_dir, os.replace
    monkeypatch.setattr(atomic_write, "fsync_file", lambda p: (events.append(("file", os.path.basename(p))),
                                                                real_file(p)))
    monkeypatch.setattr(atomic_write, "fsync_dir", lambda p: (events.append(("dir", str(p))), real_dir(p)))
    monkeypatch.setattr(atomic_write.os, "replace", lambda a, b: (events.append(("rename", str(b))),
                                                                  real_replace(a, b)))
    save_checkpoint(target, Encoder(checkpoint.config), checkpoint.tokenizer)
    publish = events.index(("rename", str(target)))
    synced = {name for kind, name in events[:publish] if kind == "file"}
    assert synced == {p.name for p in target.iterdir()}
    assert ("dir", str(tmp_path)) in events[publish:]       # the rename itself is made durable


def test_write_jsonl_that_fails_midway_keeps_the_previous_file(tmp_path):
    path = tmp_path / "predictions.jsonl"
    assert write_jsonl(path, ({"i": i, "text": "café"} for i in range(3))) == 3
    before = path.read_text(encoding="utf-8")
    assert [json.loads(line) for line in before.splitlines()] == [{"i": i, "text": "café"} for i in range(3)]

    def rows():
        yield {"i": 0}
        raise RuntimeError("killed while predicting")

    with pytest.raises(RuntimeError):
        write_jsonl(path, rows())
    assert path.read_text(encoding="utf-8") == before          # not half of the new file
    assert [p.name for p in tmp_path.iterdir()] == ["predictions.jsonl"]   # no temporary file left


def test_json_files_hold_null_where_a_run_gave_nan(tmp_path):
    """A diverged run's dev loss is NaN; JSON has no NaN, and other tools refuse a file that holds one."""
    atomic_write.write_json(tmp_path / "m.json", {"dev": {"loss": float("nan"), "accuracy": 0.5},
                                                  "curve": [1.0, float("inf"), -float("inf")]})
    text = (tmp_path / "m.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"dev": {"loss": None, "accuracy": 0.5}, "curve": [1.0, None, None]}
