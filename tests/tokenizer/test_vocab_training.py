"""train_wordpiece: a tiny English + Chinese corpus made in code, streamed from .txt and .gz files."""
from __future__ import annotations

import gzip

import pytest

from bertkit.errors import BertkitError, InputFileError
from bertkit.tokenizer import Tokenizer, train_wordpiece
from bertkit.tokenizer.wordpiece import SPECIAL_TOKENS, read_vocab_file

ENGLISH = ["The quick brown fox jumps over the lazy dog.", "Tokenizers split words into word pieces.",
           "Training a vocabulary on a small corpus is quick.", "", "The dog sleeps; the fox runs."] * 4
CHINESE = ["我爱北京天安门。", "今天天气很好，我们去公园。", "中文文本按字切分成单个汉字。"] * 4


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "en.txt").write_text("\n".join(ENGLISH) + "\n", encoding="utf-8")
    with gzip.open(folder / "zh.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(CHINESE) + "\n")
    return [folder / "en.txt", folder / "zh.txt.gz"]


@pytest.fixture(scope="module")
def trained(corpus_files, tmp_path_factory) -> tuple[Tokenizer, object]:
    tokenizer = train_wordpiece(corpus_files, vocab_size=300, lowercase=True, min_frequency=2, num_unused=3)
    folder = tmp_path_factory.mktemp("trained")
    tokenizer.save(folder)
    return tokenizer, folder


def test_vocab_starts_with_special_then_unused_tokens(trained):
    _, folder = trained
    tokens = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")[:8]
    assert tokens == [*SPECIAL_TOKENS, "[unused0]", "[unused1]", "[unused2]"]


def test_chinese_characters_are_single_tokens(trained):
    tokenizer, folder = trained
    vocab = read_vocab_file(folder / "vocab.txt")
    for char in set("".join(CHINESE)) - set("。，"):
        assert char in vocab, char
    chinese_pieces = [t for t in vocab if any("\u4e00" <= c <= "\u9fff" for c in t)]
    assert all(len(t.removeprefix("##")) == 1 for t in chinese_pieces)
    assert tokenizer.tokenize("我爱北京") == ["我", "爱", "北", "京"]


def test_trained_tokenizer_encodes_and_decodes(trained):
    tokenizer, folder = trained
    assert tokenizer.lowercase and tokenizer.vocab_size <= 300
    batch = tokenizer.encode_batch(["The QUICK brown fox.", "我爱北京天安门。"])
    assert tokenizer.unk_rate(batch) == 0.0
    assert tokenizer.decode(batch.input_ids[0]) == "the quick brown fox."
    assert tokenizer.decode(batch.input_ids[1]).replace(" ", "") == "我爱北京天安门。"
    assert "the" in tokenizer.backend.get_vocab()  # frequent words merge into whole-word pieces
    reloaded = Tokenizer.from_folder(folder)
    assert reloaded.encode_batch(["The QUICK brown fox."]).input_ids == batch.input_ids[:1]


def test_cased_training_keeps_case(corpus_files):
    tokenizer = train_wordpiece(corpus_files, vocab_size=300, lowercase=False, min_frequency=2, num_unused=0)
    assert not tokenizer.lowercase and "T" in tokenizer.backend.get_vocab()
    assert tokenizer.tokenize("The")[0].startswith("T")


def test_bad_inputs(corpus_files, tmp_path):
    with pytest.raises(InputFileError, match="missing.txt: file not found"):
        train_wordpiece([tmp_path / "missing.txt"], vocab_size=100, num_unused=0)
    (tmp_path / "blank.txt").write_text("\n  \n", encoding="utf-8")
    with pytest.raises(BertkitError, match="corpus is empty"):
        train_wordpiece([tmp_path / "blank.txt"], vocab_size=100, num_unused=0)
    with pytest.raises(BertkitError, match="vocab_size 50 leaves no room"):
        train_wordpiece(corpus_files, vocab_size=50, num_unused=100)
    (tmp_path / "latin1.txt").write_bytes("fine\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(InputFileError, match="latin1.txt:2"):
        train_wordpiece([tmp_path / "latin1.txt"], vocab_size=100, num_unused=0)


def _tied_corpus(path):
    """Seeded random words over 40 letters (accented ones included) and rare CJK characters: many symbols of
    equal frequency, the case where the Rust trainer's own numbering varied from run to run."""
    import random

    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyzéèêàçñöüßøåæœ"
    lines = [" ".join("".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(12))
             for _ in range(300)]
    lines += ["".join(chr(0x4E00 + rng.randrange(3000)) for _ in range(20)) for _ in range(40)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_same_corpus_gives_a_byte_identical_vocab(tmp_path):
    corpus = _tied_corpus(tmp_path / "corpus.txt")
    files = []
    for run in range(3):
        tokenizer = train_wordpiece([corpus], vocab_size=900, lowercase=False, min_frequency=2, num_unused=5,
                                    limit_alphabet=300)
        tokenizer.save(tmp_path / f"run{run}")
        files.append((tmp_path / f"run{run}" / "vocab.txt").read_bytes())
    assert files[0] == files[1] == files[2]
    vocab = read_vocab_file(tmp_path / "run0" / "vocab.txt")
    assert "##é" in vocab and "##a" in vocab and len(vocab) == 900
    # the 300 kept characters are the most frequent ones: every letter of the words is among them
    assert all(char in vocab for char in "abcdefghijklmnopqrstuvwxyzéèêàçñöüßøåæœ")


def test_default_alphabet_keeps_every_repeated_character_while_the_vocab_has_room(tmp_path):
    # 1,500 Chinese characters, each seen 2-4 times: more than the default cap max(1000, 3000 // 4) = 1000, but a
    # 3000-token vocab has room for all of them (each is a word of its own; no merges compete for the slots).
    chars = [chr(0x4E00 + i) for i in range(1500)]
    lines = ["".join(chars[i:i + 30]) for i in range(0, 1500, 30)] * 2 + ["".join(chars[:500])]
    corpus = tmp_path / "zh.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tokenizer = train_wordpiece([corpus], vocab_size=3000)
    vocab = tokenizer.backend.get_vocab()
    assert [char for char in chars if char not in vocab] == []
    assert tokenizer.vocab_size <= 3000
    # an explicit --limit-alphabet is a cap the user chose: kept as given, the most frequent characters first
    capped = train_wordpiece([corpus], vocab_size=3000, limit_alphabet=1000).backend.get_vocab()
    assert sum(char in capped for char in chars) == 1000 and all(char in capped for char in chars[:500])


def test_raising_the_alphabet_never_passes_the_vocab_size(tmp_path):
    # 1,165 Yi syllables, each seen 3 times: a syllable that is no CJK ideograph also brings its ##continuation,
    # two entries for one character; counting one entry each gave 2,295 tokens for --vocab-size 2200
    chars = [chr(0xA000 + i) for i in range(1165)]
    corpus = tmp_path / "yi.txt"
    corpus.write_text("\n".join(" ".join(chars[i:i + 20]) for i in range(0, 1165, 20)) * 3 + "\n", encoding="utf-8")
    for size in (2200, 2300):
        tokenizer = train_wordpiece([corpus], vocab_size=size)
        assert tokenizer.vocab_size <= size
        assert sum(char in tokenizer.backend.get_vocab() for char in chars) > 1000   # the cap was still raised
