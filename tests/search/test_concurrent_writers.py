"""Two writers on one index: an exclusive writer lock, no lost saves, readers undisturbed."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.search import Index

DIM = 16


def vector_of(doc_id: str) -> np.ndarray:
    """Each id has its own random direction, so searching with it must find exactly that document."""
    seed = int.from_bytes(doc_id.encode(), "little") % 2**63
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


def add(index: Index, ids: list[str]) -> None:
    index.add(ids, [f"text of {i}" for i in ids], vectors=np.stack([vector_of(i) for i in ids]))


def build(folder, count: int = 10) -> None:
    index = Index.create(folder)
    add(index, [f"base-{i}" for i in range(count)])
    index.save()
    index.close()


def check_consistent(index: Index, expect_ids=None) -> set[str]:
    """Rows and vectors agree, and each document's own vector finds that document first."""
    ids = {document.doc_id for document in index.store.iter_documents()}
    assert len(ids) == len(index) == index.backend.count()
    for doc_id in sorted(ids)[:: max(1, len(ids) // 25)]:
        hit = index.search(vector_of(doc_id), k=1)[0]
        assert hit.id == doc_id and hit.score > 0.999 and hit.text == f"text of {doc_id}"
    if expect_ids is not None:
        assert ids == expect_ids
    return ids


def test_a_second_writer_is_told_who_holds_the_lock(tmp_path):
    build(tmp_path / "idx")
    first, second = Index.open(tmp_path / "idx"), Index.open(tmp_path / "idx")
    add(first, ["a"])
    with pytest.raises(BertkitError, match=rf"idx is locked by PID {os.getpid()} since \d{{4}}-.*--lock-timeout"):
        add(second, ["b"])
    with pytest.raises(BertkitError, match="locked by PID"):
        Index.create(tmp_path / "idx", overwrite=True)
    with Index.open(tmp_path / "idx") as reader:     # readers take no lock and see the saved index
        check_consistent(reader, {f"base-{i}" for i in range(10)})
    first.save()
    add(second, ["b"])                               # the lock is free again
    second.save()
    first.close()
    second.close()
    with Index.open(tmp_path / "idx") as reader:
        check_consistent(reader, {f"base-{i}" for i in range(10)} | {"a", "b"})


def test_a_writer_opened_before_another_save_builds_on_it(tmp_path):
    build(tmp_path / "idx")
    early, late = Index.open(tmp_path / "idx"), Index.open(tmp_path / "idx")
    add(late, ["late"])
    late.save()
    add(early, ["early"])          # opened at generation 1; must not overwrite generation 2 with its own
    early.save()
    assert early.generation == 3
    early.close()
    late.close()
    with Index.open(tmp_path / "idx") as reader:
        check_consistent(reader, {f"base-{i}" for i in range(10)} | {"late", "early"})


def test_close_without_save_drops_the_changes_and_frees_the_lock(tmp_path):
    build(tmp_path / "idx")
    writer = Index.open(tmp_path / "idx")
    add(writer, ["dropped"])
    assert (tmp_path / "idx" / "store.2.sqlite").exists()
    writer.close()
    assert not (tmp_path / "idx" / "store.2.sqlite").exists()
    with Index.open(tmp_path / "idx") as index:
        add(index, ["kept"])
        index.save()
        check_consistent(index, {f"base-{i}" for i in range(10)} | {"kept"})


def test_the_cli_gives_a_one_line_error_when_the_index_is_locked(tmp_path, tiny_model_dir, capsys):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "x", "text": "the cat"}\n', encoding="utf-8")
    build(tmp_path / "idx")
    holder = Index.open(tmp_path / "idx")
    add(holder, ["held"])
    capsys.readouterr()
    assert main(["index", "delete", "--index", str(tmp_path / "idx"), "base-1", "--lock-timeout", "0.2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"locked by PID {os.getpid()}" in err[0] and "waited 0.2 s" in err[0], err
    holder.close()
    assert main(["index", "delete", "--index", str(tmp_path / "idx"), "base-1"]) == 0


_WRITER = """
import sys, time
import numpy as np
sys.path.insert(0, {tests!r})
from test_concurrent_writers import add
from bertkit.search import Index
folder, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
for r in range(rounds):
    with Index.open(folder, lock_timeout_s=120) as index:
        add(index, [f"{{name}}-{{r}}-{{j}}" for j in range(20)])
        time.sleep(0.01)          # hold the lock a moment: the other writer must wait for it
        index.save()
"""


def test_two_processes_adding_at_once_lose_nothing(tmp_path):
    build(tmp_path / "idx", count=50)
    script = textwrap.dedent(_WRITER.format(tests=os.path.dirname(__file__)))
    rounds = 6
    writers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "idx"), name, str(rounds)],
                                stderr=subprocess.PIPE, text=True) for name in ("p", "q")]
    while any(w.poll() is None for w in writers):     # a reader checks every generation it can catch
        with Index.open(tmp_path / "idx") as reader:
            check_consistent(reader)
        time.sleep(0.02)
    for writer in writers:
        assert writer.wait(timeout=120) == 0, writer.stderr.read()
    expected = {f"base-{i}" for i in range(50)} | {f"{n}-{r}-{j}" for n in "pq" for r in range(rounds)
                                                     for j in range(20)}
    with Index.open(tmp_path / "idx") as reader:
        assert reader.generation == 1 + 2 * rounds   # every save committed a generation of its own
        check_consistent(reader, expected)


def test_a_lock_file_that_is_a_symlink_is_not_written_through(tmp_path):
    build(tmp_path / "idx")
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    (tmp_path / "idx" / "writer.lock").unlink()
    (tmp_path / "idx" / "writer.lock").symlink_to(victim)
    with Index.open(tmp_path / "idx") as index, pytest.raises(BertkitError, match="lock file"):
        add(index, ["x"])
    assert victim.read_text() == "keep me"


def test_open_reads_the_manifest_once(tmp_path, monkeypatch):
    from bertkit.search import generations, index as index_module

    build(tmp_path / "idx")
    reads = []
    real = generations.read_manifest
    monkeypatch.setattr(index_module.generations, "read_manifest", lambda folder: reads.append(1) or real(folder))
    with Index.open(tmp_path / "idx") as index:
        check_consistent(index)
    assert len(reads) == 1
