"""`bertkit vocab train` through bertkit.cli.main."""
from __future__ import annotations

import json

from bertkit.cli import main
from bertkit.tokenizer import Tokenizer

CORPUS = "The quick brown fox jumps over the lazy dog.\n我爱北京天安门。\nThe dog sleeps.\n" * 5


def test_vocab_train_writes_a_loadable_folder(tmp_path, capsys):
    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    out = tmp_path / "vocab"
    code = main(["vocab", "train", "--corpus", str(tmp_path / "corpus.txt"), "--output", str(out),
                 "--vocab-size", "200", "--unused", "2"])
    assert code == 0
    assert {"vocab.txt", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in out.iterdir()}
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "uncased" in lines[0] and str(out) in lines[0]
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is True
    assert Tokenizer.from_folder(out).tokenize("北京 Fox") == ["北", "京", "fox"]


def test_vocab_train_cased(tmp_path, capsys):
    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    out = tmp_path / "cased"
    assert main(["vocab", "train", "--corpus", str(tmp_path / "corpus.txt"), "--output", str(out),
                 "--vocab-size", "200", "--unused", "0", "--cased"]) == 0
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is False
    assert "(cased)" in capsys.readouterr().err


def test_missing_input_file_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "corpus.txt").write_text(CORPUS, encoding="utf-8")
    code = main(["vocab", "train", "--corpus", str(tmp_path / "corpus.txt"), str(tmp_path / "nope.txt"),
                 "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("bertkit: error:") and "nope.txt" in err
    assert not (tmp_path / "out").exists()
