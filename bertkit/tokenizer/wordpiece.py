"""The BERT WordPiece pipeline in the Rust `tokenizers` library, built from a vocab or read from tokenizer.json.

The pipeline is the one Google's BERT and Hugging Face's BertTokenizer use: BertNormalizer (clean control
characters, put spaces around CJK characters, lowercase + strip accents when uncased), BertPreTokenizer
(split on whitespace and punctuation), greedy longest-match WordPiece with "##" continuations, and a
[CLS] A [SEP] (B [SEP]) template. The special tokens and [unusedN] are "added tokens": matched in the raw
text before normalization, so they are never split (a literal "[MASK]" in text is the mask id).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from tokenizers import AddedToken, Tokenizer as RustTokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

from bertkit.errors import CheckpointError
from bertkit.tokenizer.tokenizer_json import TokenizerJson

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
UNUSED_TOKEN = re.compile(r"\[unused\d+\]")
# Google's BERT gives up on words longer than this and emits one [UNK] (HF: max_input_chars_per_word).
MAX_CHARS_PER_WORD = 100


def read_vocab_file(path: str | Path) -> dict[str, int]:
    """vocab.txt: one token per line, the line number is the id (a trailing newline adds no token)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: vocab file not found")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}); a "
                              "vocab.txt holds one token per line") from None
    if "\x00" in text:
        raise CheckpointError(f"{path}: holds NUL bytes (offset {text.index(chr(0))}), so it is a binary file, not "
                              "a vocab.txt of one token per line")
    tokens = text.split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token.rstrip("\r"), index)  # the first id wins, as in Google's load_vocab
    return vocab


def write_vocab_file(vocab: dict[str, int], path: str | Path) -> None:
    tokens = sorted(vocab, key=vocab.__getitem__)
    ids = [vocab[token] for token in tokens]
    if ids != list(range(len(ids))):
        raise CheckpointError(f"{path}: cannot write vocab.txt, token ids are not 0..{len(ids) - 1} without gaps")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(token + "\n" for token in tokens))


def vocab_is_cased(vocab: dict[str, int]) -> bool:
    """True when the vocab holds uppercase word pieces (an uncased vocab was built from lowercased text).

    A few stray uppercase-only symbols appear in uncased vocabs, so more than 0.1% of the pieces must change
    under lower() for the vocab to count as cased. Bracketed tokens ([CLS], [unused0]) are not word pieces.
    """
    pieces = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
    uppercase = sum(1 for t in pieces if t.lower() != t)
    return uppercase * 1000 > len(pieces)


def bert_normalizer(lowercase: bool, handle_chinese_chars: bool = True) -> normalizers.BertNormalizer:
    # strip_accents=None follows lowercase, as in the original BERT (uncased models strip accents).
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=handle_chinese_chars,
                                      strip_accents=None, lowercase=lowercase)


def build_wordpiece(vocab: dict[str, int], lowercase: bool) -> RustTokenizer:
    """A complete BERT tokenizer over `vocab` (token -> id)."""
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise CheckpointError(f"the vocab lacks the special token(s) {', '.join(missing)}; a BERT vocab needs "
                              f"{', '.join(SPECIAL_TOKENS)}")
    rust = RustTokenizer(WordPiece(vocab, unk_token=UNK, max_input_chars_per_word=MAX_CHARS_PER_WORD))
    rust.normalizer = bert_normalizer(lowercase)
    rust.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    rust.decoder = decoders.WordPiece(prefix="##")
    prepare_bert_backend(rust)
    return rust


def prepare_bert_backend(rust: RustTokenizer) -> None:
    """Make any WordPiece backend behave as bertkit expects: reserved tokens whole, no implicit pad/truncate.

    tokenizer.json files from the Hub often carry fixed padding/truncation settings (MiniLM's pads every text
    to 128); bertkit truncates explicitly and pads per batch, so both are switched off.
    """
    vocab = rust.get_vocab()
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise CheckpointError(f"the tokenizer lacks the special token(s) {', '.join(missing)}")
    rust.no_padding()
    rust.no_truncation()
    rust.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    unused = sorted((t for t in vocab if UNUSED_TOKEN.fullmatch(t)), key=vocab.__getitem__)
    # Not "special": decode() keeps them, since users repurpose [unusedN] as markers or new words.
    rust.add_tokens([AddedToken(t, special=False, normalized=False) for t in unused])
    rust.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0", pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])])


def load_tokenizer_json(tokenizer_json: TokenizerJson) -> tuple[RustTokenizer, bool | None]:
    """An HF tokenizer.json holding a WordPiece model (read once: tokenizer_json.py); returns the backend and its
    lowercase setting."""
    if tokenizer_json.model_type != "WordPiece":
        raise CheckpointError(f"{tokenizer_json.path}: holds a {tokenizer_json.model_type} tokenizer; bertkit reads "
                              "WordPiece (BERT) tokenizers so far")
    rust = tokenizer_json.backend()
    prepare_bert_backend(rust)
    return rust, _normalizer_lowercase(tokenizer_json.state.get("normalizer"))


def _normalizer_lowercase(normalizer: dict | None) -> bool | None:
    """The lowercase setting in a normalizer's JSON state, or None when it does not say."""
    if not normalizer:
        return None
    if normalizer.get("type") == "BertNormalizer":
        return bool(normalizer.get("lowercase"))
    if normalizer.get("type") == "Lowercase":
        return True
    if normalizer.get("type") == "Sequence":
        found = [_normalizer_lowercase(n) for n in normalizer.get("normalizers", [])]
        return True if True in found else (False if False in found else None)
    return None


def set_lowercase(rust: RustTokenizer, lowercase: bool) -> None:
    """Replace the normalizer with BERT's for this casing, keeping its CJK setting (HF does the same)."""
    state = json.loads(rust.normalizer.__getstate__()) if rust.normalizer is not None else {}
    handle_chinese_chars = state.get("handle_chinese_chars", True) if state.get("type") == "BertNormalizer" \
        else True
    rust.normalizer = bert_normalizer(lowercase, handle_chinese_chars)
