"""`bertkit index ...` and `bertkit search` end to end on a tiny model."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings

from bertkit.cli import main
from bertkit.cli.search_commands import parse_filters

DOCS = [
    {"id": "d1", "text": "the cat sat on the mat", "kind": "animal", "year": 2001},
    {"id": 2, "text": "red apple and blue pear", "kind": "fruit", "year": 2002},
    {"id": "d3", "text": "the old king of the city", "kind": "person", "year": "2001"},
    {"id": "d4", "text": "a bird song by the river", "kind": "animal", "year": 2003},
]


def _write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def _search(capsys, index, query, *extra):
    capsys.readouterr()
    assert main(["search", "--index", str(index), "--query", query, *extra]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_parse_filters_keeps_numbers_and_their_strings():
    assert parse_filters(["kind=animal", "year=2001", "kind=fruit"]) == {
        "kind": ["animal", "fruit"], "year": [2001, "2001"]}


def test_build_search_update_delete(tmp_path, tiny_model_dir, capsys):
    docs = _write(tmp_path / "docs.jsonl", DOCS)
    index = tmp_path / "idx"
    assert main(["index", "build", "--model", str(tiny_model_dir), "--input", str(docs), "--index", str(index)]) == 0
    assert "indexed 4 documents" in capsys.readouterr().err
    hits = _search(capsys, index, "the cat sat on the mat", "-k", "2")
    assert hits[0]["id"] == "d1" and hits[0]["kind"] == "animal" and set(hits[0]) >= {"id", "score", "text"}
    hits = _search(capsys, index, "the cat sat on the mat", "--filter", "kind=fruit")
    assert [h["id"] for h in hits] == ["2"]
    hits = _search(capsys, index, "king", "--filter", "year=2001")
    assert {h["id"] for h in hits} == {"d1", "d3"}     # 2001 as a number and as a string

    _write(tmp_path / "more.jsonl", [{"id": "d5", "text": "blue sky over the sea", "kind": "place"}])
    assert main(["index", "add", "--index", str(index), "--input", str(tmp_path / "more.jsonl")]) == 0
    assert main(["index", "add", "--index", str(index), "--input", str(tmp_path / "more.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "bertkit: added 1 document: " in err                  # "added 1 documents"
    assert "already in the index ('d5'); use `bertkit index update` (Index.upsert) to replace them" in err
    _write(tmp_path / "upd.jsonl", [{"id": "d5", "text": "the cat sat on the mat", "kind": "copy"}])
    assert main(["index", "update", "--index", str(index), "--input", str(tmp_path / "upd.jsonl")]) == 0
    assert {h["id"] for h in _search(capsys, index, "the cat sat on the mat", "-k", "2")} == {"d1", "d5"}

    assert main(["index", "delete", "--index", str(index), "d1", "nope"]) == 0
    assert "1 ids were not in the index: nope" in capsys.readouterr().err
    assert "d1" not in {h["id"] for h in _search(capsys, index, "the cat sat on the mat", "-k", "10")}
    assert main(["index", "info", "--index", str(index)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["documents"] == 4 and info["kind"] == "flat" and info["encoder"]["pooling"] == "mean"


def test_bad_documents_file_names_the_line(tmp_path, tiny_model_dir, capsys):
    docs = _write(tmp_path / "docs.jsonl", [{"id": "a", "text": "x"}, {"text": "no id"}])
    code = main(["index", "build", "--model", str(tiny_model_dir), "--input", str(docs), "--index",
                 str(tmp_path / "idx")])
    assert code == 2 and "docs.jsonl:2: missing 'id'" in capsys.readouterr().err


def test_index_records_its_precision_and_add_can_change_it(tmp_path, tiny_model_dir, capsys):
    docs = _write(tmp_path / "docs.jsonl", DOCS)
    index = tmp_path / "idx"
    assert main(["index", "build", "--model", str(tiny_model_dir), "--input", str(docs), "--index", str(index),
                 "--precision", "bf16"]) == 0
    assert "bertkit: precision bf16" in capsys.readouterr().err
    assert main(["index", "info", "--index", str(index)]) == 0
    assert json.loads(capsys.readouterr().out)["encoder"]["precision"] == "bf16"
    assert _search(capsys, index, "the cat sat on the mat", "-k", "1")[0]["id"] == "d1"   # queries in bf16 too
    _write(tmp_path / "more.jsonl", [{"id": "d5", "text": "blue sky over the sea"}])
    assert main(["index", "add", "--index", str(index), "--input", str(tmp_path / "more.jsonl"),
                 "--precision", "fp32"]) == 0
    assert main(["index", "info", "--index", str(index)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["documents"] == 5 and info["encoder"]["precision"] == "fp32"


def test_index_info_into_a_closed_pipe_ends_quietly(tmp_path, tiny_model_dir):
    """`bertkit index info | head` closed the pipe and ended in a BrokenPipeError traceback (issue 17)."""
    index = tmp_path / "idx"
    assert main(["index", "build", "--model", str(tiny_model_dir), "--input", str(_write(tmp_path / "d.jsonl", DOCS)),
                 "--index", str(index)]) == 0
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes, as `head` after its lines
    try:
        result = subprocess.run([sys.executable, "-m", "bertkit", "index", "info", "--index", str(index)],
                                stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert result.stderr == "" and result.returncode == 1


def _build_options() -> set[str]:
    from bertkit.cli import build_parser

    index_parser = build_parser()._subparsers._group_actions[0].choices["index"]
    build = index_parser._subparsers._group_actions[0].choices["build"]
    return {flag for action in build._actions for flag in action.option_strings}


def test_index_build_truncation_hint_names_flags_index_build_has(tmp_path, tiny_model_dir):
    """The truncation hint on `index build` named --long-texts, which index build did not have (issue 17)."""
    long_doc = [{"id": "long", "text": "the cat sat on the mat " * 40}]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["index", "build", "--model", str(tiny_model_dir), "--index", str(tmp_path / "idx"),
                     "--input", str(_write(tmp_path / "d.jsonl", long_doc))]) == 0
    hints = [str(w.message) for w in caught if "truncated" in str(w.message)]
    named = {flag for hint in hints for flag in re.findall(r"--[a-z][a-z-]+", hint)}
    assert "--long-texts" in named and named <= _build_options()


def test_index_build_long_texts_is_recorded_and_used_for_queries(tmp_path, tiny_model_dir):
    import numpy as np

    import bertkit
    from bertkit.search import ModelTextEncoder
    from bertkit.search.generations import read_manifest

    text = "the cat sat on the mat " * 20 + "red apple and blue pear " * 20
    index = tmp_path / "idx"
    assert main(["index", "build", "--model", str(tiny_model_dir), "--index", str(index), "--long-texts",
                 "sliding-window", "--stride", "16",
                 "--input", str(_write(tmp_path / "d.jsonl", [{"id": 1, "text": text}]))]) == 0
    spec = read_manifest(index)["encoder"]
    assert spec["long_texts"] == "sliding-window" and spec["stride"] == 16
    model = bertkit.load(tiny_model_dir)
    windows = model.encode([text], long_texts="sliding-window", stride=16)
    truncated = model.encode([text])
    recorded = ModelTextEncoder.from_spec(spec, bertkit.load).encode([text])
    np.testing.assert_allclose(recorded, windows, atol=1e-5)
    assert np.abs(windows - truncated).max() > 1e-3


def test_index_build_refuses_an_empty_document_naming_its_line(tmp_path, tiny_model_dir, capsys):
    docs = _write(tmp_path / "d.jsonl", [DOCS[0], {"id": "blank", "text": "  "}])
    assert main(["index", "build", "--model", str(tiny_model_dir), "--input", str(docs),
                 "--index", str(tmp_path / "idx")]) == 2
    assert capsys.readouterr().err.strip() == (f"bertkit: error: {docs}:2: 'text' is empty or whitespace-only; "
                                               "remove it or send some text")


def test_cli_warning_is_one_line_naming_the_flag(tmp_path, tiny_model_dir):
    """A bertkit warning in the CLI prints as one `bertkit: warning:` line with no source path or source line
    (it printed as a raw UserWarning, `.../features.py:NN: UserWarning: ...` and the warn() call under it:
    issue 17)."""
    docs = [{"id": "long", "text": "the cat sat on the mat " * 40}, {"id": "short", "text": "hello world"}]
    result = subprocess.run([sys.executable, "-m", "bertkit", "index", "build", "--model", str(tiny_model_dir),
                             "--index", str(tmp_path / "idx"), "--input", str(_write(tmp_path / "d.jsonl", docs)),
                             "--max-length", "16"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert [line for line in lines if "truncated" in line] == [
        "bertkit: warning: 1 of 2 texts were longer than 16 tokens and were truncated; encode with "
        "long_texts='sliding-window' (the encode and index build commands: --long-texts sliding-window) to keep all "
        "of them"], lines
    assert not [line for line in lines if ".py:" in line or "Warning" in line], lines


def test_a_document_with_nan_metadata_is_refused_naming_its_line(tmp_path, tiny_model_dir, capsys):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"id": "a", "text": "the cat", "kind": "animal"}\n{"id": "b", "text": "a dog", "w": NaN}\n')
    index = tmp_path / "idx"
    code = main(["index", "build", "--model", str(tiny_model_dir), "--input", str(docs), "--index", str(index)])
    assert code == 2 and "docs.jsonl:2: metadata field 'w' cannot be stored as JSON" in capsys.readouterr().err
    assert not (index / "index.json").exists()   # it was saved, and every filtered search then failed


def test_an_empty_query_is_named_as_the_flag(tmp_path, tiny_model_dir, capsys):
    docs = _write(tmp_path / "docs.jsonl", DOCS)
    index = tmp_path / "idx"
    assert main(["index", "build", "--model", str(tiny_model_dir), "--input", str(docs), "--index", str(index)]) == 0
    capsys.readouterr()
    assert main(["search", "--index", str(index), "--query", "cat", "--query", "  "]) == 2
    # it said "text 0 is empty", naming neither the flag nor which query (here the second)
    assert "--query '  ' (query 2 of 2) is empty or whitespace-only" in capsys.readouterr().err


def test_adding_an_id_already_indexed_names_the_file_and_line(tmp_path, tiny_model_dir, capsys):
    docs = _write(tmp_path / "docs.jsonl", DOCS)
    index = tmp_path / "idx"
    assert main(["index", "build", "--model", str(tiny_model_dir), "--input", str(docs), "--index", str(index)]) == 0
    more = _write(tmp_path / "more.jsonl", [{"id": "new", "text": "a red bird"}, {"id": "d3", "text": "a king"}])
    capsys.readouterr()
    assert main(["index", "add", "--index", str(index), "--input", str(more)]) == 2
    # it named the id only, not where it came from
    assert "more.jsonl:2: 1 id is already in the index ('d3'); use `bertkit index update`" in capsys.readouterr().err
    assert main(["index", "info", "--index", str(index)]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == 4                 # nothing of the file was added


def test_a_document_the_encoder_refuses_is_named_by_file_and_line(tmp_path, tiny_model_dir, capsys):
    docs = _write(tmp_path / "docs.jsonl", [{"id": "a", "text": "the cat"},
                                            {"id": "b", "text": "the cat sat on the mat"}])
    build = ["index", "build", "--model", str(tiny_model_dir), "--input", str(docs), "--index", str(tmp_path / "i")]
    assert main([*build, "--max-length", "5", "--long-texts", "error"]) == 2
    # it said "text 1 has 8 tokens ...": the position in an encoding chunk, not the file's line
    assert "docs.jsonl:2: document 'b' has 8 tokens, over the limit of 5; pass --long-texts truncate" \
        in capsys.readouterr().err
    with open(docs, "a", encoding="utf-8") as f:
        f.write(json.dumps({"id": "c", "text": "bad \ud800 text"}) + "\n")
    assert main(build) == 2
    assert "docs.jsonl:3: 'text' of document 'c' holds a lone UTF-16 surrogate" in capsys.readouterr().err


def test_a_stride_without_sliding_windows_is_one_line(tmp_path, tiny_model_dir, capsys):
    """--stride is the sliding-window overlap: with --long-texts truncate (the default) it did nothing, silently."""
    docs = _write(tmp_path / "docs.jsonl", [{"id": "a", "text": "the cat"}])
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat\n", encoding="utf-8")
    for command in (["index", "build", "--model", str(tiny_model_dir), "--input", str(docs), "--index",
                     str(tmp_path / "i"), "--stride", "8"],
                    ["encode", "--model", str(tiny_model_dir), "--input", str(texts), "--output",
                     str(tmp_path / "v.npy"), "--stride", "8"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "--stride 8 is the overlap of --long-texts sliding-window, not of --long-texts truncate" in err, err
    assert not (tmp_path / "i").exists() and not (tmp_path / "v.npy").exists()
    assert main(["encode", "--model", str(tiny_model_dir), "--input", str(texts), "--output", str(tmp_path / "v.npy"),
                 "--stride", "8", "--long-texts", "sliding-window", "--max-length", "32"]) == 0


def test_metadata_named_like_a_hit_field_is_kept_in_search_output(tmp_path, tiny_model_dir, capsys):
    """A document's own "score" (a rating, say) was dropped from `bertkit search` lines: the hit's score hid it."""
    docs = _write(tmp_path / "docs.jsonl", [{"id": "a", "text": "the cat", "score": 5, "query": "q", "kind": "x"}])
    index = str(tmp_path / "i")
    assert main(["index", "build", "--model", str(tiny_model_dir), "--input", str(docs), "--index", index]) == 0
    capsys.readouterr()
    assert main(["search", "--index", index, "--query", "the cat", "--query", "a cat", "-k", "1"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["query"] for row in rows] == ["the cat", "a cat"]
    assert rows[0]["metadata.score"] == 5 and rows[0]["metadata.query"] == "q" and rows[0]["kind"] == "x"
    assert rows[0]["score"] != 5 and rows[0]["id"] == "a"
