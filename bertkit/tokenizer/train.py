"""Training a BERT WordPiece vocabulary on text files, streamed line by line through the Rust trainer.

The same corpus gives a byte-identical vocab.txt on every run. The Rust trainer alone does not: it numbers the
"##x" continuation symbols in the iteration order of a randomly seeded hash map of words, and breaks ties
between equally frequent merges by those numbers, so ties (and the merges after them) came out in a different
order each run; with a character limit, ties at the cut also dropped different characters. So bertkit counts
the (normalized) characters first, picks the alphabet by (count, code point), and hands the trainer that
alphabet and every "##x" symbol up front, in code-point order: then every id, and so every tie, is fixed.
"""
from __future__ import annotations

import unicodedata
from collections import Counter
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from tokenizers import Tokenizer as RustTokenizer, pre_tokenizers
from tokenizers.models import WordPiece
from tokenizers.trainers import WordPieceTrainer

from bertkit.data.corpus import check_corpus_files
from bertkit.data.text import iter_lines
from bertkit.errors import BertkitError
from bertkit.tokenizer.tokenizer import Tokenizer
from bertkit.tokenizer.wordpiece import SPECIAL_TOKENS, UNK, bert_normalizer

# Lines go to Rust in batches: one Python -> Rust crossing per batch instead of per line.
LINES_PER_BATCH = 1000


def train_wordpiece(files: Sequence[str | Path], vocab_size: int = 30522, lowercase: bool = True,
                    min_frequency: int = 2, num_unused: int = 100, limit_alphabet: int | None = None,
                    encoding: str = "utf-8", show_progress: bool = False) -> Tokenizer:
    """A BERT WordPiece tokenizer trained on text files (.gz too), one sentence or paragraph a line.

    The vocab starts with [PAD] [UNK] [CLS] [SEP] [MASK], then [unused0]..[unused{num_unused-1}] (slots to
    swap for domain words later without resizing the model, as in Google's BERT vocabs), then the learned
    pieces. CJK characters are split apart before training, so Chinese text yields one token per character.
    limit_alphabet caps the single characters kept (the rarest are dropped). By default it is
    max(1000, vocab_size // 4), raised while the vocab has room: when the trained vocab comes out smaller than
    vocab_size, the characters left out that the corpus holds at least min_frequency times are added and the
    vocab trained again (a Chinese corpus has thousands of characters, each a word of its own: a cap of 2000
    left frequent ones as [UNK] in a vocab that had room for them).
    """
    paths = check_corpus_files(files)
    reserved = [*SPECIAL_TOKENS, *(f"[unused{i}]" for i in range(num_unused))]
    if vocab_size <= len(reserved):
        raise BertkitError(f"vocab_size {vocab_size} leaves no room for word pieces after the {len(reserved)} "
                           "special and [unusedN] tokens; raise vocab_size (--vocab-size) or lower num_unused "
                           "(--unused)")
    corpus = _Corpus(paths, encoding)
    counts = _char_counts(corpus, bert_normalizer(lowercase))
    limit = limit_alphabet if limit_alphabet is not None else max(1000, vocab_size // 4)
    settings = dict(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress)
    vocab = _train(corpus, lowercase, reserved, _alphabet(counts, limit), **settings)
    if limit_alphabet is None:
        extra = _characters_with_room(counts, limit, vocab_size - len(vocab), min_frequency)
        if extra:
            wider = _train(corpus, lowercase, reserved, _alphabet(counts, limit + extra), **settings)
            vocab = wider if len(wider) <= vocab_size else vocab
    return Tokenizer.from_vocab(vocab, lowercase)


def _characters_with_room(counts: Counter, limit: int, room: int, min_frequency: int) -> int:
    """How many of the characters past the first `limit` (most frequent first, seen min_frequency times or
    more) fit in `room` vocab entries: a CJK character or punctuation is one entry, any other character two
    (itself and its ##continuation)."""
    extra = 0
    for char in sorted(counts, key=lambda char: (-counts[char], ord(char)))[limit:]:
        cost = 1 if _is_punctuation(char) or is_cjk(char) else 2
        if counts[char] < max(min_frequency, 1) or cost > room:
            break
        room, extra = room - cost, extra + 1
    return extra


def _train(corpus: "_Corpus", lowercase: bool, reserved: list[str], alphabet: list[str], vocab_size: int,
           min_frequency: int, show_progress: bool) -> dict[str, int]:
    """One run of the Rust trainer over the corpus with a fixed alphabet; the vocab it learned."""
    backend = RustTokenizer(WordPiece(unk_token=UNK))
    backend.normalizer = bert_normalizer(lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    continuations = [f"##{char}" for char in alphabet if not (_is_punctuation(char) or is_cjk(char))]
    trainer = WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[*reserved, *continuations],
        limit_alphabet=len(alphabet), initial_alphabet=alphabet, continuing_subword_prefix="##",
        show_progress=show_progress)
    backend.train_from_iterator(corpus.batches(), trainer=trainer)
    if corpus.error is not None:  # raised inside Rust's iteration: re-raise the original, not Rust's wrapper
        raise corpus.error
    return backend.get_vocab()


def _alphabet(counts: Counter, limit: int) -> list[str]:
    """The `limit` most frequent characters (ties: lower code point first), sorted."""
    kept = sorted(counts, key=lambda char: (-counts[char], ord(char)))
    return sorted(kept[:limit])


def _char_counts(corpus: "_Corpus", normalizer) -> Counter:
    """How often each character of the normalized corpus occurs, whitespace left out.

    Whitespace is not a character of any word (the pre-tokenizer splits on it); all else is counted as the
    trainer counts it. The BERT normalizer works character by character (cleaning, CJK spacing, NFD and accent
    removal, lowercasing; NFD's reordering of marks keeps their counts), so the raw characters are counted in
    a first pass (numpy over code points) and each distinct one is normalized once."""
    raw: Counter[int] = Counter()
    for batch in corpus.batches():
        codes, counts = np.unique(np.frombuffer("".join(batch).encode("utf-32-le"), dtype=np.uint32),
                                  return_counts=True)
        raw.update(dict(zip(codes.tolist(), counts.tolist())))
    if corpus.error is not None:
        raise corpus.error
    if corpus.num_lines == 0:
        raise BertkitError(f"the corpus is empty: no non-blank lines in {', '.join(map(str, corpus.paths))}")
    counts: Counter[str] = Counter()
    for code, count in raw.items():
        for char in normalizer.normalize_str(chr(code)):
            if not char.isspace():
                counts[char] += count
    return counts


def _is_punctuation(char: str) -> bool:
    """BERT's punctuation (BertPreTokenizer splits it into words of its own, so it never continues a word):
    ASCII symbols and the Unicode P* categories, as in Google BERT's tokenization.py."""
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_cjk(char: str) -> bool:
    """CJK ideographs, which the BERT normalizer surrounds with spaces (each is a word of its own)."""
    code = ord(char)
    return any(low <= code <= high for low, high in _CJK_RANGES)


_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


class _Corpus:
    """Streams non-blank lines of the files in batches, counting them and keeping any read error."""

    def __init__(self, paths: list[Path], encoding: str):
        self.paths, self.encoding = paths, encoding
        self.num_lines = 0
        self.error: BertkitError | None = None

    def batches(self) -> Iterator[list[str]]:
        """One pass over the files (each call starts a new one)."""
        self.num_lines = 0
        batch: list[str] = []
        try:
            for path in self.paths:
                for _, line in iter_lines(path, self.encoding):
                    if line.strip():
                        batch.append(line)
                    if len(batch) == LINES_PER_BATCH:
                        self.num_lines += len(batch)
                        yield batch
                        batch = []
        except BertkitError as err:
            self.error = err
            return
        if batch:
            self.num_lines += len(batch)
            yield batch
