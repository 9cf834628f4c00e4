import pytest

from bertkit.errors import BertkitError, CheckpointError
from bertkit.tokenizer.bpe import EOS, BPETokenizer, train_bpe


def test_round_trips_any_text_and_puts_eos_last(bpe):
    assert bpe.vocab_size == 300
    assert bpe.eos_id == 299 and bpe.id_to_token(299) == EOS
    for text in ["the cat sat", " leading space", "naïve 東京 🙂 unseen bytes\ttab"]:
        assert bpe.decode(bpe.encode(text)) == text
    assert bpe.tokenize("the cat")[1].startswith("Ġ")          # spaces ride on the next word, as in GPT-2
    assert bpe.decode(bpe.encode("a") + [bpe.eos_id]) == "a"   # special tokens skipped


def test_save_and_load_folder_both_ways(bpe, tmp_path):
    bpe.save(tmp_path / "tok")
    names = {p.name for p in (tmp_path / "tok").iterdir()}
    assert {"vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json"} <= names
    text = "the dog met a cat on the log"
    assert BPETokenizer.from_folder(tmp_path / "tok").encode(text) == bpe.encode(text)
    (tmp_path / "tok" / "tokenizer.json").unlink()
    from_files = BPETokenizer.from_folder(tmp_path / "tok")
    assert from_files.encode(text) == bpe.encode(text) and from_files.eos_id == bpe.eos_id


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(BertkitError, match="file not found"):
        train_bpe([tmp_path / "missing.txt"], vocab_size=300)
    (tmp_path / "a.txt").write_text("abc\n", encoding="utf-8")
    with pytest.raises(BertkitError, match="vocab_size"):
        train_bpe([tmp_path / "a.txt"], vocab_size=100)
    with pytest.raises(CheckpointError, match="vocab.json"):
        BPETokenizer.from_folder(tmp_path)
