"""wordpiece.py: vocab files, casing inference, building and reading the Rust pipeline."""
from __future__ import annotations

import pytest

from bertkit.errors import CheckpointError
from bertkit.tokenizer.wordpiece import build_wordpiece, read_vocab_file, vocab_is_cased, write_vocab_file

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_vocab_file_round_trip(tmp_path):
    vocab = {token: i for i, token in enumerate(SPECIALS + ["[unused0]", "hello", "##s", "你"])}
    write_vocab_file(vocab, tmp_path / "vocab.txt")
    assert read_vocab_file(tmp_path / "vocab.txt") == vocab
    (tmp_path / "crlf.txt").write_bytes(b"[PAD]\r\n[UNK]\r\nx\r\n")
    assert read_vocab_file(tmp_path / "crlf.txt") == {"[PAD]": 0, "[UNK]": 1, "x": 2}
    with pytest.raises(CheckpointError, match="not found"):
        read_vocab_file(tmp_path / "missing.txt")


def test_vocab_casing_inference(minilm_dir):
    assert not vocab_is_cased(read_vocab_file(minilm_dir / "vocab.txt"))  # 30522 pieces, none uppercase
    assert vocab_is_cased({t: i for i, t in enumerate(SPECIALS + ["Hello", "hello", "world"])})
    assert not vocab_is_cased({t: i for i, t in enumerate(SPECIALS + ["[unused0]", "hello"])})


def test_vocab_without_special_tokens_is_refused():
    with pytest.raises(CheckpointError, match=r"\[MASK\]"):
        build_wordpiece({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "x": 4}, lowercase=True)


def test_built_pipeline_adds_bert_template():
    vocab = {t: i for i, t in enumerate(SPECIALS + ["[unused0]", "hello", "world"])}
    rust = build_wordpiece(vocab, lowercase=True)
    assert rust.encode("Hello [unused0] world").tokens == ["[CLS]", "hello", "[unused0]", "world", "[SEP]"]
