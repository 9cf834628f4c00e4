"""Extend a WordPiece model's vocabulary with the characters of a corpus that it maps to [UNK].

An English vocab (all-MiniLM-L6-v2's, bert-base-uncased's) lacks most CJK characters, and BERT's tokenizer
isolates each CJK character before WordPiece, so every missing one silently becomes [UNK]: 62% of the
characters of chnsenticorp_like for MiniLM. The fix practitioners use: append the missing characters to the
vocab as whole tokens, give each a new embedding row (the mean of the existing rows, as for tokens added to
transformers' resize_token_embeddings with mean initialisation), then continue MLM pre-training so the new rows
learn. Existing ids and their rows are untouched, so text the old vocab covered tokenizes and encodes bit for
bit as before; only the new characters (and the width of an MLM head's output) change.

Only characters the tokenizer's pre-tokenizer isolates (CJK ideographs, punctuation) are added: a character
inside a word would need a "##" piece and changes how words split, which this does not attempt.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import torch
from torch import nn

from bertkit.checkpoints.io import load_checkpoint, save_checkpoint
from bertkit.checkpoints.weights import holds_model
from bertkit.data.corpus import check_corpus_files
from bertkit.data.text import iter_lines
from bertkit.errors import BertkitError
from bertkit.tokenizer.tokenizer import Tokenizer
from bertkit.tokenizer.wordpiece import build_wordpiece

INIT_CHOICES = ("mean", "unk")


@dataclass(frozen=True)
class VocabExtension:
    added: list[str]          # the new tokens, in id order (ids old_size, old_size + 1, ...)
    old_size: int
    new_size: int
    unknown_before: float     # share of the corpus's non-space characters that were [UNK]
    unknown_after: float


def missing_characters(tokenizer: Tokenizer, lines: Iterable[str], min_count: int = 1) -> tuple[list[str], float, float]:
    """(characters to add, most frequent first; [UNK] share of non-space characters before; after adding them).

    A character counts when the tokenizer's normalizer keeps it, its pre-tokenizer isolates it, it is not in the
    vocab, and it occurs at least min_count times."""
    if tokenizer.byte_level or tokenizer.sentencepiece:
        raise BertkitError("vocab extend: only WordPiece (BERT) vocabularies can be extended; this model's "
                           "tokenizer is " + ("byte-level BPE" if tokenizer.byte_level else "SentencePiece"))
    counts: Counter = Counter()
    for line in lines:
        counts.update(ch for ch in line if not ch.isspace())
    backend = tokenizer.backend
    vocab = backend.get_vocab()
    added: dict[str, int] = Counter()
    unknown = 0
    for char, count in counts.items():
        # (the BERT normalizer pads a CJK character with spaces: " 差 ")
        normalized = (backend.normalizer.normalize_str(char) if backend.normalizer else char).strip()
        if len(normalized) != 1 or normalized in vocab:
            continue
        if not _isolated(backend, normalized):
            unknown += count if tokenizer.tokenize(char) == [tokenizer.specials.unk] else 0
            continue
        unknown += count
        added[normalized] += count
    kept = [char for char, count in sorted(added.items(), key=lambda kv: (-kv[1], kv[0])) if count >= min_count]
    total = max(sum(counts.values()), 1)
    still = unknown - sum(added[char] for char in kept)
    return kept, unknown / total, still / total


def _isolated(backend, char: str) -> bool:
    """Whether normalizer + pre-tokenizer make `char` a word of its own between two letters ("a" char "a"): the
    BERT normalizer spaces out CJK characters, the pre-tokenizer splits off punctuation."""
    text = backend.normalizer.normalize_str(f"a{char}a") if backend.normalizer else f"a{char}a"
    pieces = [piece for piece, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
    return char in pieces


def extend_vocab(model_dir: str | Path, corpus_lines: Iterable[str], output: str | Path, min_count: int = 1,
                 init: str = "mean") -> VocabExtension:
    """Write `output` (a copy when no character is missing; nothing when that copy would be `model_dir` itself):
    the model of `model_dir` with the corpus's missing characters appended to its vocab and new embedding rows
    (init "mean": the mean of the existing rows; "unk": a copy of [UNK]'s row). An MLM head's output bias grows
    with the same rule. Everything else (weights, heads, task metadata) is carried over."""
    if init not in INIT_CHOICES:
        raise BertkitError(f"vocab extend: --init {init!r} is not one of {', '.join(INIT_CHOICES)}")
    output = Path(output)
    if holds_model(output) and output.resolve() != Path(model_dir).resolve():
        raise BertkitError(f"vocab extend: --output {output} holds another model, which the extended one would "
                           "replace; name a new folder (or --model's own, to extend it in place)")
    checkpoint = load_checkpoint(model_dir)
    tokenizer = checkpoint.tokenizer
    if tokenizer is None:
        raise BertkitError(f"vocab extend: {model_dir} has no vocab.txt / tokenizer.json to extend")
    added, before, after = missing_characters(tokenizer, corpus_lines, min_count)
    old_size = tokenizer.vocab_size
    if not added and output.resolve() == Path(model_dir).resolve():   # in place with nothing to add: not rewritten
        return VocabExtension(added, old_size, old_size, before, after)
    encoder = checkpoint.encoder
    if encoder.config.vocab_size != old_size:
        raise BertkitError(f"vocab extend: {model_dir}: config.json vocab_size {encoder.config.vocab_size} != the "
                           f"tokenizer's {old_size} tokens; the new ids would not line up with embedding rows")
    vocab = tokenizer.backend.get_vocab()
    for offset, char in enumerate(added):
        vocab[char] = old_size + offset
    new_tokenizer = Tokenizer(build_wordpiece(vocab, tokenizer.lowercase), tokenizer.lowercase,
                              tokenizer.model_max_length)
    unk_id = tokenizer.unk_id
    encoder.embeddings.token = _grown_embedding(encoder.embeddings.token, len(added), init, unk_id)
    encoder.config = dataclasses.replace(encoder.config, vocab_size=old_size + len(added))
    for head in checkpoint.heads.values():
        bias = getattr(head, "bias", None)
        if isinstance(bias, nn.Parameter) and bias.shape == (old_size,):     # MLM heads: one logit per token
            head.bias = nn.Parameter(torch.cat([bias.data, _new_rows(bias.data, len(added), init, unk_id)]))
    save_checkpoint(output, encoder, new_tokenizer, checkpoint.heads, checkpoint.meta,
                    sentence=checkpoint.sentence)
    return VocabExtension(added, old_size, old_size + len(added), before, after)


def _new_rows(table: torch.Tensor, count: int, init: str, unk_id: int) -> torch.Tensor:
    """(count, ...) rows for new tokens: the mean of the table's rows, or copies of [UNK]'s."""
    row = table.mean(dim=0) if init == "mean" else table[unk_id]
    return row.unsqueeze(0).expand(count, *table.shape[1:]).clone()


def _grown_embedding(old: nn.Embedding, count: int, init: str, unk_id: int) -> nn.Embedding:
    """A copy of `old` with `count` rows appended; old rows bit for bit."""
    weight = old.weight.data
    grown = nn.Embedding(weight.shape[0] + count, weight.shape[1], padding_idx=old.padding_idx)
    grown.weight.data = torch.cat([weight, _new_rows(weight, count, init, unk_id)]).to(weight.dtype)
    return grown


def corpus_text(paths: Sequence[str], encoding: str = "utf-8") -> Iterable[str]:
    """The lines of the corpus files (.gz accepted), after the pre-training corpus checks; a corpus with no
    non-blank line is an error (an extension of nothing said 'added 0 tokens' and wrote a copy)."""
    files, text = check_corpus_files(paths), False
    for path in files:
        for _, line in iter_lines(path, encoding):
            text = text or bool(line.strip())
            yield line
    if not text:
        raise BertkitError(f"the corpus is empty: no non-blank lines in {', '.join(map(str, files))}")
