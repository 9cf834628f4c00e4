"""Does the vocabulary cover the text? The [UNK] rate where text meets a vocabulary, with a one-line warning.

A vocabulary for another language (Chinese text through an English WordPiece vocab) or a casing mismatch
turns much of the text into [UNK]: the model then trains or encodes on nothing, silently. Measured with
all-MiniLM-L6-v2's vocabulary: English BBC news and the English corpus give 0.0% [UNK] tokens, Chinese reviews
64.5% and People's Daily sentences 60.7% (benchmarks/unknown_rate.py). UNKNOWN_WARN_RATE = 5% sits far from
both: real English text with rare symbols or emoji stays well under 1%, while a wrong vocabulary is tens of
percent. Above it, one warning per tokenizer names the rate, the commonest unknown words or characters, and
the likely cause: the script the vocabulary lacks, or case that lowercasing would fix.
"""
from __future__ import annotations

import unicodedata
import warnings
import weakref
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from bertkit.errors import BertkitWarning

UNKNOWN_WARN_RATE = 0.05
# A vocabulary whose pieces are this share of the text's script is for that language, only short of characters
# (Chinese vocabularies trained with bertkit: 44-76% CJK pieces); an English one holds a few (MiniLM: 488 of 30,522).
SAME_SCRIPT_SHARE = 0.2
SAMPLE_TEXTS = 2000        # texts the rate is measured on (tokenized here when the caller has no ids at hand)
EXAMPLE_TEXTS = 200        # texts searched for examples of unknown words once the rate is over the line
_WARNED: "weakref.WeakSet" = weakref.WeakSet()    # one warning per loaded tokenizer, not one per batch


@dataclass(frozen=True)
class Coverage:
    rate: float                    # [UNK] tokens / text tokens ([CLS], [SEP], [PAD], [MASK] not counted)
    unknown: tuple[str, ...]       # the commonest unknown words or characters, most frequent first
    cause: str                     # the likely cause, in words


def unknown_rate(tokenizer, rows: Sequence[Sequence[int]]) -> float:
    """Fraction of the text tokens in `rows` of ids that are the tokenizer's unknown token."""
    if tokenizer.unk_id is None:
        return 0.0
    structural = tokenizer.special_ids - {tokenizer.unk_id}
    unknown = sum(list(row).count(tokenizer.unk_id) for row in rows)
    text_tokens = sum(sum(1 for i in row if i not in structural) for row in rows)
    return unknown / text_tokens if text_tokens else 0.0


def texts_of(examples: Sequence[Any]) -> list[str]:
    """The texts of labelled or unlabelled examples: text / text_pair, question / context, or NER tokens."""
    texts: list[str] = []
    for example in examples:
        if isinstance(example, str):
            texts.append(example)
            continue
        for name in ("text", "text_pair", "question", "context"):
            value = getattr(example, name, None)
            if isinstance(value, str) and value:
                texts.append(value)
        tokens = getattr(example, "tokens", None)
        if isinstance(tokens, (list, tuple)) and tokens:
            texts.append(" ".join(map(str, tokens)))
    return texts


def measure_coverage(tokenizer, texts: Sequence[str], rows: Optional[Sequence[Sequence[int]]] = None) -> Coverage:
    """The [UNK] rate of `texts` (from `rows`, their ids, when given), its commonest unknown pieces and cause."""
    texts = list(texts)
    if rows is None:
        sample = texts[:SAMPLE_TEXTS]
        rows = [e.ids for e in tokenizer.backend.encode_batch(sample, add_special_tokens=False)] if sample else []
    rate = unknown_rate(tokenizer, rows[:SAMPLE_TEXTS])   # a sample either way: the count is a Python loop
    if rate <= UNKNOWN_WARN_RATE:
        return Coverage(rate, (), "")
    spans = _unknown_spans(tokenizer, texts[:EXAMPLE_TEXTS])
    return Coverage(rate, tuple(s for s, _ in spans.most_common(6)), _cause(tokenizer, spans))


def warn_unknown(tokenizer, texts: Sequence[str], where: str,
                 rows: Optional[Sequence[Sequence[int]]] = None) -> Optional[str]:
    """Warn once per tokenizer when more than UNKNOWN_WARN_RATE of the text tokens are [UNK]; returns the
    message (None when the vocabulary covers the text, or this tokenizer has warned already)."""
    if tokenizer.unk_id is None or tokenizer in _WARNED:
        return None
    coverage = measure_coverage(tokenizer, texts, rows)
    if coverage.rate <= UNKNOWN_WARN_RATE:
        return None
    _WARNED.add(tokenizer)
    examples = ", ".join(repr(s) for s in coverage.unknown)
    message = (f"{where}: {coverage.rate:.0%} of the text tokens are {tokenizer.id_to_token(tokenizer.unk_id)} "
               f"(over {UNKNOWN_WARN_RATE:.0%}){f', e.g. {examples}' if examples else ''}; likely cause: "
               f"{coverage.cause}")
    warnings.warn(message, BertkitWarning, stacklevel=3)
    return message


def _unknown_spans(tokenizer, texts: Sequence[str]) -> Counter:
    """The text behind each [UNK] token (a whole word in WordPiece, a character in SentencePiece), counted."""
    spans: Counter = Counter()
    for text, encoding in zip(texts, tokenizer.backend.encode_batch(list(texts), add_special_tokens=False)):
        for token_id, (start, end) in zip(encoding.ids, encoding.offsets):
            if token_id == tokenizer.unk_id and end > start:
                spans[text[start:end]] += 1
    return spans


def _script(char: str) -> Optional[str]:
    """The first word of a letter's Unicode name (CJK, HANGUL, CYRILLIC, ARABIC, LATIN, ...); None for others."""
    if not unicodedata.category(char).startswith("L"):
        return None
    name = unicodedata.name(char, "")
    return {"HIRAGANA": "JAPANESE", "KATAKANA": "JAPANESE"}.get(name.split(" ")[0], name.split(" ")[0]) or None


def _cause(tokenizer, spans: Counter) -> str:
    scripts: Counter = Counter()
    for span, count in spans.items():
        for char in span:
            script = _script(char)
            if script is not None:
                scripts[script] += count
    vocab = tokenizer.backend.get_vocab()
    if scripts:
        script, _ = scripts.most_common(1)[0]
        if script != "LATIN":
            pieces = sum(1 for piece in vocab if any(_script(c) == script for c in piece))
            if pieces >= SAME_SCRIPT_SHARE * len(vocab):
                return (f"the text is largely {script} script and so is the vocabulary ({pieces} {script} pieces of "
                        f"{len(vocab)}), but it lacks these characters: a vocabulary trained on too little text or "
                        "with a low --limit-alphabet; train it again on more text, or add the characters with "
                        "`bertkit vocab extend` and continue pre-training (`bertkit pretrain --model`)")
            return (f"the text is largely {script} script and the vocabulary holds {pieces} {script} pieces of "
                    f"{len(vocab)}: a vocabulary for another language; pick a model (--model) pre-trained on this "
                    "language, or a multilingual one, or add the characters with `bertkit vocab extend` and "
                    "continue pre-training (`bertkit pretrain --model`)")
    fixable = [s for s in spans if s != s.lower() and not _has_unknown(tokenizer, s.lower())]
    if fixable and len(fixable) * 2 >= len(spans):
        lowercase = getattr(tokenizer, "lowercase", None)
        return (f"casing: {fixable[0]!r} is known once lowercased; the tokenizer "
                f"{'keeps' if lowercase is False else 'may keep'} case over a vocabulary that lacks it: set "
                "do_lower_case=true in tokenizer_config.json (or pick the cased model with --model)")
    return ("characters the vocabulary never saw (symbols, emoji, accented or rare letters): check the text's "
            "encoding (--encoding), and that the model (--model) was trained on text like this")


def _has_unknown(tokenizer, text: str) -> bool:
    return tokenizer.unk_id in tokenizer.backend.encode(text, add_special_tokens=False).ids
