"""Tokenizer: BERT WordPiece (or RoBERTa's byte-level BPE) over the Rust `tokenizers` library, with explicit
truncation and HF folders.

Texts go through the Rust tokenizer in one encode_batch call (parallel, no per-token Python); framing with
[CLS]/[SEP] (RoBERTa: <s>/</s>) and truncation are list slices per text (encoding.py). Ids match HF's
BertTokenizer and RobertaTokenizerFast. A folder's files decide which of the two it gets, never its name.
A text with a lone UTF-16 surrogate ("\ud800", which JSON escapes can produce) is not Unicode; it is refused
with InvalidTextError naming the text, everywhere (the API, the CLI, the server's 422).
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Iterable, Sequence

import torch
from tokenizers import Encoding, Tokenizer as RustTokenizer

from bertkit.atomic_write import json_text
from bertkit.errors import BertkitError, BertkitWarning, CheckpointError
from bertkit.tokenizer import coverage, roberta, sentencepiece, wordpiece
from bertkit.tokenizer.encoding import (TRUNCATION_STRATEGIES, BatchEncoding, Framing, Truncation, WindowedEncoding,
                                        frame_batch, frame_windows)
from bertkit.tokenizer.padding import pad_to_tensors
from bertkit.tokenizer.roberta import SpecialTokens
from bertkit.tokenizer.tokenizer_json import TokenizerJson, folder_tokenizer_json, read_tokenizer_json
from bertkit.tokenizer.wordpiece import CLS, MASK, PAD, SEP, UNK

BERT_SPECIALS = SpecialTokens(PAD, UNK, CLS, SEP, MASK)

DEFAULT_MAX_LENGTH = 512
# HF writes this "no limit" sentinel (int(1e30)) into tokenizer_config.json when a model has none.
HF_NO_LIMIT = 10**9
# Heads of this many characters per kept token usually hold enough tokens (English averages ~4.5 characters
# per BERT token, Chinese one); a head that does not is split again in full, so this only tunes speed.
HEAD_CHARS_PER_TOKEN = 6


EMPTY_TEXT = "is empty or whitespace-only; remove it or send some text"


class InvalidTextError(BertkitError):
    """A text that cannot be encoded: not valid Unicode (a lone UTF-16 surrogate), or, where a vector is asked
    for, empty (reason EMPTY_TEXT): named by its index, never a TypeError. `reason` follows "text N"."""

    def __init__(self, index: int, reason: str):
        self.index, self.reason = index, reason
        super().__init__(f"text {index} {reason}")


class Tokenizer:
    """A BERT WordPiece tokenizer (or RoBERTa's byte-level BPE: byte_level=True). Build with from_folder /
    from_vocab_file / from_tokenizer_json."""

    def __init__(self, backend: RustTokenizer, lowercase: bool, model_max_length: int = DEFAULT_MAX_LENGTH,
                 specials: SpecialTokens = BERT_SPECIALS, byte_level: bool = False, sentencepiece: bool = False):
        self.backend = backend  # the Rust tokenizer, for anything not wrapped here
        self.lowercase = lowercase
        self.model_max_length = model_max_length
        # byte_level: RoBERTa's BPE; sentencepiece: ALBERT's Unigram (framed like BERT); else WordPiece
        self.specials, self.byte_level, self.sentencepiece = specials, byte_level, sentencepiece
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            backend.token_to_id(token) for token in (specials.pad, specials.unk, specials.cls, specials.sep,
                                                     specials.mask))
        self.special_ids = {self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id}
        # RoBERTa: <s> A </s></s> B </s>, one segment
        self.framing = Framing(self.cls_id, self.sep_id, 2, 0) if byte_level else Framing(self.cls_id, self.sep_id)

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def from_vocab(cls, vocab: dict[str, int], lowercase: bool | None = None) -> "Tokenizer":
        """From token -> id; lowercase=None infers the casing from the vocab (cased if it has uppercase)."""
        if lowercase is None:
            lowercase = not wordpiece.vocab_is_cased(vocab)
        return cls(wordpiece.build_wordpiece(vocab, lowercase), lowercase)

    @classmethod
    def from_vocab_file(cls, path: str | Path, lowercase: bool | None = None) -> "Tokenizer":
        """From a BERT vocab.txt; lowercase=None infers the casing from the vocab."""
        vocab = wordpiece.read_vocab_file(path)
        try:
            tokenizer = cls.from_vocab(vocab, lowercase)
        except CheckpointError as err:      # the missing special tokens: name the file that lacks them
            raise CheckpointError(f"{path}: {err}") from None
        tokenizer.check_casing()
        return tokenizer

    @classmethod
    def from_tokenizer_json(cls, path: str | Path | TokenizerJson, lowercase: bool | None = None) -> "Tokenizer":
        """From an HF tokenizer.json (WordPiece; a path, or the file already read); casing from `lowercase`, else its
        normalizer, else the vocab."""
        loaded = path if isinstance(path, TokenizerJson) else read_tokenizer_json(path)
        backend, json_lowercase = wordpiece.load_tokenizer_json(loaded)
        if lowercase is None:
            lowercase = json_lowercase
        if lowercase is None:
            lowercase = not wordpiece.vocab_is_cased(backend.get_vocab())
        if lowercase != json_lowercase:
            wordpiece.set_lowercase(backend, lowercase)
        tokenizer = cls(backend, lowercase)
        tokenizer.check_casing()
        return tokenizer

    @classmethod
    def from_folder(cls, folder: str | Path) -> "Tokenizer":
        """From a model folder's files (never guessed from the folder name): a WordPiece tokenizer.json, else
        vocab.txt; a BPE tokenizer.json, or vocab.json + merges.txt, is RoBERTa's byte-level BPE; a Unigram
        tokenizer.json is SentencePiece (ALBERT).

        Casing comes from tokenizer_config.json (do_lower_case) or bertkit.json, else from tokenizer.json's
        normalizer, else from the vocab; a casing that contradicts the vocab is warned about.
        """
        folder = Path(folder)
        if not folder.is_dir():
            raise CheckpointError(f"{folder}: not a folder (a model folder holds tokenizer.json or vocab.txt)")
        hf_config = _read_json(folder / "tokenizer_config.json")
        tokenizer = cls._from_files(folder, hf_config)
        max_length = hf_config.get("model_max_length")
        if isinstance(max_length, int) and 0 < max_length < HF_NO_LIMIT:
            tokenizer.model_max_length = max_length
        return tokenizer

    @classmethod
    def _from_files(cls, folder: Path, hf_config: dict) -> "Tokenizer":
        tokenizer_json = folder_tokenizer_json(folder)      # read once, whichever kind it turns out to be
        if roberta.is_bpe_folder(folder, tokenizer_json):
            backend, specials = roberta.load_roberta_backend(folder, tokenizer_json)
            return cls(backend, lowercase=False, specials=specials, byte_level=True)
        if sentencepiece.is_unigram_folder(folder, tokenizer_json):
            backend, specials, lowercase = sentencepiece.load_unigram_backend(folder, tokenizer_json)
            return cls(backend, lowercase=lowercase, specials=specials, sentencepiece=True)
        lowercase = hf_config.get("do_lower_case")
        if lowercase is None:
            meta = _read_json(folder / "bertkit.json")
            lowercase = meta.get("do_lower_case", meta.get("lowercase"))
        if tokenizer_json is not None:
            return cls.from_tokenizer_json(tokenizer_json, lowercase)
        if (folder / "vocab.txt").is_file():
            return cls.from_vocab_file(folder / "vocab.txt", lowercase)
        present = ", ".join(sorted(p.name for p in folder.iterdir())) or "nothing"
        raise CheckpointError(f"{folder}: no tokenizer.json or vocab.txt (found: {present})")

    def save(self, folder: str | Path) -> None:
        """Write vocab.txt, tokenizer.json, tokenizer_config.json and special_tokens_map.json, which HF's
        AutoTokenizer and BertTokenizer load as they are."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if self.byte_level:
            roberta.save_roberta_files(self.backend, self.specials, self.model_max_length, folder)
            return
        if self.sentencepiece:
            sentencepiece.save_unigram_files(self.backend, self.specials, self.lowercase, self.model_max_length,
                                             folder)
            return
        wordpiece.write_vocab_file(self.backend.get_vocab(), folder / "vocab.txt")
        self.backend.save(str(folder / "tokenizer.json"))
        special_tokens = {"unk_token": UNK, "sep_token": SEP, "pad_token": PAD, "cls_token": CLS,
                          "mask_token": MASK}
        hf_config = {"tokenizer_class": "BertTokenizer", "do_lower_case": self.lowercase, "strip_accents": None,
                     "tokenize_chinese_chars": True, "model_max_length": self.model_max_length,
                     "clean_up_tokenization_spaces": True, **special_tokens}
        (folder / "tokenizer_config.json").write_text(json_text(hf_config), encoding="utf-8")
        (folder / "special_tokens_map.json").write_text(json_text(special_tokens), encoding="utf-8")

    # ---- vocabulary ---------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        _check_texts([token])
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def check_casing(self, texts: Iterable[str] | None = None) -> str | None:
        """Warn (and return the message) when the casing contradicts the vocab; None when they agree.

        A cased tokenizer over an uncased vocab turns every capitalized word into [UNK] or odd pieces; an
        uncased one over a cased vocab never reaches its uppercase pieces. With `texts`, the first case is
        only reported when the texts contain uppercase letters.
        """
        if self.byte_level or self.sentencepiece:
            return None       # byte-level BPE keeps every character; SentencePiece normalizes in its own file
        vocab_cased = wordpiece.vocab_is_cased(self.backend.get_vocab())
        message = None
        if not self.lowercase and not vocab_cased:
            if texts is None or any(text != text.lower() for text in texts):
                message = ("casing mismatch: the tokenizer keeps case (do_lower_case=false) but the vocab has no "
                           "uppercase pieces, so capitalized words become [UNK] or split badly; set "
                           "do_lower_case=true in tokenizer_config.json (or lowercase=True)")
        elif self.lowercase and vocab_cased:
            message = ("casing mismatch: the tokenizer lowercases (do_lower_case=true) but the vocab is cased, "
                       "so its uppercase pieces are never used; set do_lower_case=false (or lowercase=False)")
        if message:
            warnings.warn(message, BertkitWarning, stacklevel=2)
        return message

    # ---- encoding -----------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[str]:
        """The word pieces of one text, without [CLS]/[SEP]."""
        return self._split([text])[0].tokens

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def encode_batch(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
                     max_length: int | None = DEFAULT_MAX_LENGTH,
                     truncation: Truncation = "longest_first") -> BatchEncoding:
        """[CLS] text [SEP] (pair [SEP]) per text, at most max_length tokens (special tokens counted; None:
        no limit).

        truncation: "longest_first" (cut the longer text of a pair first), "only_first", "only_second", or
        None to raise TextTooLongError for a text that does not fit. Rows are not padded (pad_to_tensors).
        """
        if truncation not in TRUNCATION_STRATEGIES:
            raise ValueError(f"truncation must be one of {TRUNCATION_STRATEGIES}, got {truncation!r}")
        if max_length is not None and max_length < self.framing.specials(pairs is not None):
            raise ValueError(f"max_length {max_length} leaves no room for text after [CLS]/[SEP]")
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"got {len(texts)} texts but {len(pairs)} pair texts")
        if pairs is None and max_length is not None and truncation in ("longest_first", "only_first"):
            firsts = self._split_heads(texts, max_length - 2)
        else:
            firsts = self._split(texts)
        seconds = self._split(pairs) if pairs is not None else None
        return self._frame(firsts, seconds, max_length, truncation)

    def encode_windows(self, texts: str | Sequence[str], max_length: int = DEFAULT_MAX_LENGTH,
                       stride: int = 128) -> WindowedEncoding:
        """Long texts as overlapping windows, each [CLS] ... [SEP] with at most max_length tokens, for
        callers that average window vectors. Consecutive windows of a text share `stride` tokens; a short
        text gives one window. One string or a list; text_index maps each window row back to its text."""
        if isinstance(texts, str):
            texts = [texts]
        return self._frame_windows(self._split(texts), max_length, stride)

    def _frame(self, firsts: list[Encoding], seconds: list[Encoding] | None, max_length: int | None,
               truncation: Truncation) -> BatchEncoding:
        """Cut and add the special tokens as self.framing says. A subclass frames its own family's way."""
        return frame_batch(firsts, seconds, max_length, truncation, self.framing)

    def _frame_windows(self, splits: list[Encoding], max_length: int, stride: int) -> WindowedEncoding:
        return frame_windows(splits, max_length, stride, self.framing)

    def unk_rate(self, encoding: BatchEncoding) -> float:
        """Fraction of the text tokens (all but [CLS]/[SEP]/[PAD]/[MASK]) that are [UNK]; 0.0 if none."""
        return coverage.unknown_rate(self, encoding.input_ids)

    def pad_to_tensors(self, input_ids: Sequence[Sequence[int]] | BatchEncoding,
                       token_type_ids: Sequence[Sequence[int]] | None = None,
                       pad_to_multiple_of: int | None = None) -> dict[str, torch.Tensor]:
        """Pad rows (or a BatchEncoding) with [PAD] to the longest row: input_ids, attention_mask,
        token_type_ids as (B, T) LongTensors."""
        if isinstance(input_ids, BatchEncoding):
            input_ids, token_type_ids = input_ids.input_ids, input_ids.token_type_ids
        return pad_to_tensors(input_ids, self.pad_id, token_type_ids, pad_to_multiple_of)

    def _split(self, texts: Sequence[str]) -> list[Encoding]:
        """Word pieces of every text (no special tokens), in one parallel call into Rust."""
        if isinstance(texts, str):
            raise TypeError("expected a list of texts, got one string; wrap it in a list")
        texts = _check_texts(texts)
        return self.backend.encode_batch(texts, add_special_tokens=False)

    def _split_heads(self, texts: Sequence[str], budget: int) -> list[Encoding]:
        """Like _split, for texts that will be cut to `budget` tokens: a text much longer than that is split
        only up to a space (its head), which saves most of the work on long documents. The pieces of the
        words before a space do not depend on the text after it, so the kept tokens are the same. A head
        with no more than `budget` tokens cannot tell whether the text was cut: that text is split in full."""
        if isinstance(texts, str):
            raise TypeError("expected a list of texts, got one string; wrap it in a list")
        max_chars = budget * HEAD_CHARS_PER_TOKEN
        heads = [_head(text, max_chars) for text in texts]
        encodings = self._split(heads)
        short = [i for i, (head, text) in enumerate(zip(heads, texts)) if head is not text
                 and len(encodings[i]) <= budget]
        for i, encoding in zip(short, self._split([texts[i] for i in short])):
            encodings[i] = encoding
        return encodings

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, lowercase={self.lowercase})"


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")   # a str holding one cannot be encoded to UTF-8


def _check_texts(texts: Sequence[str]) -> list[str]:
    """Strings only, and valid Unicode: checked here, not left to the Rust library (older `tokenizers` releases
    encode a lone surrogate silently, newer ones raise a bare TypeError). ASCII texts take the fast path."""
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise BertkitError(f"text {index} is {type(text).__name__}, not a string")
        if not text.isascii():
            surrogate = _LONE_SURROGATE.search(text)
            if surrogate is not None:
                raise InvalidTextError(index, f"holds a lone UTF-16 surrogate U+{ord(surrogate.group()):04X} at "
                                       f"character {surrogate.start()}, which is not valid Unicode; fix or drop "
                                       "that text")
    return texts


def _head(text: str, max_chars: int) -> str:
    """`text` up to the last space within max_chars, or the whole text (the same object) if it is short."""
    if not isinstance(text, str) or len(text) <= max_chars:
        return text
    cut = text.rfind(" ", 0, max_chars)
    return text[:cut] if cut > 0 else text


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return value
