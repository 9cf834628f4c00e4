"""Readable spacing for text decoded from WordPiece ids.

WordPiece splits every punctuation mark off as its own token, so decoding joins them with spaces:
"didn ’ t", "father ’ s", "“ why? ”", "( now )". The tokenizers library's clean-up only re-attaches ASCII
".,?!" and a few English contractions with a straight apostrophe. tidy_spacing() also re-attaches
apostrophes (straight or curly) of contractions and possessives, opening quotes and brackets to the word after them, and
closing ones to the word before. Straight double quotes are left alone: nothing says whether they open or close.
"""
from __future__ import annotations

import re

_APOSTROPHE = re.compile(r"(\w) ?(['’]) ?(s|t|m|d|ll|re|ve)\b")   # didn ’ t -> didn’t, father ' s -> father's
_AFTER_OPENING = re.compile(r"([“‘(\[{]) ")
_BEFORE_CLOSING = re.compile(r" ([”’)\]}.,;:?!])")


def tidy_spacing(text: str) -> str:
    text = _APOSTROPHE.sub(r"\1\2\3", text)
    text = _AFTER_OPENING.sub(r"\1", text)
    return _BEFORE_CLOSING.sub(r"\1", text)
