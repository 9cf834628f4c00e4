"""Progress bars on the long non-training commands (issue 17): a tqdm bar on stderr when stderr is a terminal,
none when it is not (logs, pipes, CI). Each command runs twice on 1,200 texts (above progress.MIN_TEXTS) with
stderr a terminal and not; the bar's own counter ("1200/1200" or "1200doc"/"1200text") must show exactly once."""
from __future__ import annotations

import io
import json
import sys

import pytest

from bertkit.cli import main
from bertkit.progress import MIN_TEXTS

COUNT = 1200


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def files(tmp_path_factory, make_sentences):
    assert COUNT >= MIN_TEXTS
    folder = tmp_path_factory.mktemp("progress")
    texts = make_sentences(COUNT, seed=5)
    (folder / "texts.txt").write_text("\n".join(texts), encoding="utf-8")
    (folder / "docs.jsonl").write_text("\n".join(json.dumps({"id": i, "text": t}) for i, t in enumerate(texts)),
                                       encoding="utf-8")
    (folder / "labeled.jsonl").write_text(
        "\n".join(json.dumps({"text": t, "label": t.split()[0]}) for t in texts), encoding="utf-8")
    (folder / "pairs.jsonl").write_text(
        "\n".join(json.dumps({"text_a": t, "text_b": t}) for t in texts), encoding="utf-8")
    return folder


def commands(model: str, data, out) -> dict[str, tuple[list[str], str]]:
    """command -> (argv, the counter its bar prints)."""
    return {
        "encode": (["encode", "--model", model, "--input", str(data / "texts.txt"), "--output",
                    str(out / "v.npy")], f"{COUNT}/{COUNT}"),
        "index build": (["index", "build", "--model", model, "--input", str(data / "docs.jsonl"), "--index",
                         str(out / "index")], f"{COUNT}doc"),
        "whiten": (["whiten", "--model", model, "--corpus", str(data / "texts.txt"), "--output",
                    str(out / "white")], f"{COUNT}text"),
        "evaluate-embeddings": (["evaluate-embeddings", "--model", model, "--pairs", str(data / "pairs.jsonl")],
                                f"{COUNT}/{COUNT}"),
        "plot-embeddings": (["plot-embeddings", "--model", model, "--input", str(data / "labeled.jsonl"),
                             "--output", str(out / "plot.png"), "--method", "pca"], f"{COUNT}/{COUNT}"),
    }


@pytest.mark.parametrize("name", ["encode", "index build", "whiten", "evaluate-embeddings", "plot-embeddings"])
def test_bar_on_a_terminal_only(name, files, tiny_model_dir, tmp_path, monkeypatch, capsys):
    if name == "plot-embeddings":
        pytest.importorskip("matplotlib")
    if name == "index build":
        pytest.importorskip("faiss")
    argv, counter = commands(str(tiny_model_dir), files, tmp_path)[name]
    terminal = Terminal()
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stderr", terminal)
        assert main(argv + (["--overwrite"] if name == "index build" else [])) == 0
    assert counter in terminal.getvalue(), terminal.getvalue()[-500:]
    capsys.readouterr()
    assert main(argv + (["--overwrite"] if name == "index build" else [])) == 0   # stderr captured: not a TTY
    err = capsys.readouterr().err
    assert counter not in err and "it/s" not in err and "|" not in err, err[-500:]


def test_index_add_shows_a_bar_on_a_terminal(files, tiny_model_dir, tmp_path, monkeypatch, make_sentences):
    pytest.importorskip("faiss")
    index = tmp_path / "index"
    assert main(["index", "build", "--model", str(tiny_model_dir), "--input", str(files / "docs.jsonl"),
                 "--index", str(index)]) == 0
    more = tmp_path / "more.jsonl"
    more.write_text("\n".join(json.dumps({"id": f"m{i}", "text": t}) for i, t in enumerate(make_sentences(COUNT, seed=6))),
                    encoding="utf-8")
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["index", "add", "--index", str(index), "--input", str(more)]) == 0
    assert f"{COUNT}doc" in terminal.getvalue()
