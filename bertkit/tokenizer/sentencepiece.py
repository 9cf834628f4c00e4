"""SentencePiece (Unigram) tokenizers from HF folders: ALBERT's (and T5-style) tokenizer.json, with <pad> <unk>
[CLS] [SEP] [MASK] as special tokens, framed [CLS] A [SEP] B [SEP] with two segments as BERT is.

The tokenizer.json carries its own normalizer (NFKD, accents, lowercase) and Metaspace pre-tokenizer, so ids
equal HF's AlbertTokenizer. A folder with only spiece.model (the SentencePiece protobuf) is refused with the
one-line conversion that writes tokenizer.json: reading protobuf needs sentencepiece, which bertkit avoids.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from tokenizers import Tokenizer as RustTokenizer

from bertkit.atomic_write import json_text
from bertkit.errors import CheckpointError
from bertkit.tokenizer.roberta import SpecialTokens, special_tokens
from bertkit.tokenizer.tokenizer_json import TokenizerJson

ALBERT_SPECIALS = SpecialTokens("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")


def is_unigram_folder(folder: Path, tokenizer_json: Optional[TokenizerJson]) -> bool:
    """A Unigram tokenizer.json (`tokenizer_json`, read once by the caller), or a SentencePiece model without one
    (refused when loaded, with what to do)."""
    if tokenizer_json is not None:
        return tokenizer_json.model_type == "Unigram"
    return (folder / "spiece.model").is_file() and not (folder / "vocab.txt").is_file()


def load_unigram_backend(folder: Path, tokenizer_json: Optional[TokenizerJson]
                         ) -> tuple[RustTokenizer, SpecialTokens, bool]:
    """(backend, special tokens, lowercase) of a SentencePiece folder."""
    if tokenizer_json is None:
        raise CheckpointError(f"{folder}: spiece.model without tokenizer.json; write one once with transformers: "
                              f"AutoTokenizer.from_pretrained('{folder}').save_pretrained('{folder}')")
    backend = tokenizer_json.backend()
    specials = special_tokens(folder, ALBERT_SPECIALS)
    missing = [t for t in specials if backend.token_to_id(t) is None]
    if missing:
        raise CheckpointError(f"{tokenizer_json.path}: the vocabulary lacks the special token(s) {', '.join(missing)}")
    backend.no_padding()
    backend.no_truncation()
    normalizer = tokenizer_json.state.get("normalizer") or {}
    return backend, specials, '"Lowercase"' in json.dumps(normalizer)


def save_unigram_files(backend: RustTokenizer, specials: SpecialTokens, lowercase: bool, model_max_length: int,
                       folder: Path) -> None:
    """tokenizer.json, tokenizer_config.json and special_tokens_map.json, as AlbertTokenizer writes them."""
    backend.save(str(folder / "tokenizer.json"))
    tokens = {"pad_token": specials.pad, "unk_token": specials.unk, "cls_token": specials.cls,
              "sep_token": specials.sep, "mask_token": specials.mask, "bos_token": specials.cls,
              "eos_token": specials.sep}
    config = {"tokenizer_class": "AlbertTokenizer", "do_lower_case": lowercase, "keep_accents": False,
              "model_max_length": model_max_length, **tokens}
    for name, value in (("tokenizer_config.json", config), ("special_tokens_map.json", tokens)):
        (folder / name).write_text(json_text(value), encoding="utf-8")
