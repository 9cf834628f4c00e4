"""Training a BERT WordPiece vocabulary on text files, streamed line by line through the Rust trainer."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

from tokenizers import Tokenizer as RustTokenizer, pre_tokenizers
from tokenizers.models import WordPiece
from tokenizers.trainers import WordPieceTrainer

from bertkit.data.text import iter_lines
from bertkit.errors import BertkitError, InputFileError
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
    limit_alphabet caps the single characters kept (the rarest are dropped); by default it is
    max(1000, vocab_size // 4), which leaves room for the thousands of characters Chinese text needs.
    """
    paths = [_check_file(path) for path in files]
    if not paths:
        raise BertkitError("no input files given for vocabulary training")
    reserved = [*SPECIAL_TOKENS, *(f"[unused{i}]" for i in range(num_unused))]
    if vocab_size <= len(reserved):
        raise BertkitError(f"vocab_size {vocab_size} leaves no room for word pieces after the {len(reserved)} "
                           "special and [unusedN] tokens; raise vocab_size (--vocab-size) or lower num_unused "
                           "(--unused)")
    backend = RustTokenizer(WordPiece(unk_token=UNK))
    backend.normalizer = bert_normalizer(lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=reserved,
        limit_alphabet=limit_alphabet if limit_alphabet is not None else max(1000, vocab_size // 4),
        continuing_subword_prefix="##", show_progress=show_progress)
    corpus = _Corpus(paths, encoding)
    backend.train_from_iterator(corpus.batches(), trainer=trainer)
    if corpus.error is not None:  # raised inside Rust's iteration: re-raise the original, not Rust's wrapper
        raise corpus.error
    if corpus.num_lines == 0:
        raise BertkitError(f"the corpus is empty: no non-blank lines in {', '.join(map(str, paths))}")
    return Tokenizer.from_vocab(backend.get_vocab(), lowercase)


class _Corpus:
    """Streams non-blank lines of the files in batches, counting them and keeping any read error."""

    def __init__(self, paths: list[Path], encoding: str):
        self.paths, self.encoding = paths, encoding
        self.num_lines = 0
        self.error: BertkitError | None = None

    def batches(self) -> Iterator[list[str]]:
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


def _check_file(path: str | Path) -> Path:
    path = Path(path)
    if not path.exists():
        raise InputFileError(path, "file not found")
    if path.is_dir():
        raise InputFileError(path, "is a folder; pass text files (one sentence or paragraph per line)")
    return path
