"""RoBERTa's tokenizer: GPT-2 byte-level BPE (vocab.json + merges.txt, or a BPE tokenizer.json) with <s> </s>
<pad> <unk> <mask> as special tokens, read from and written to HF folders.

Which tokenizer a folder gets is decided by its files, never its name: a RoBERTa folder holds a BPE vocabulary;
Chinese "RoBERTa-wwm" folders hold a BERT vocab.txt and get WordPiece. Texts are framed <s> A </s> and pairs
<s> A </s></s> B </s> with one segment (encoding.Framing), as HF's RobertaTokenizerFast does.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple, Optional

from tokenizers import AddedToken, Tokenizer as RustTokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

from bertkit.atomic_write import json_text
from bertkit.errors import CheckpointError
from bertkit.tokenizer.tokenizer_json import TokenizerJson


class SpecialTokens(NamedTuple):
    pad: str
    unk: str
    cls: str
    sep: str
    mask: str


ROBERTA_SPECIALS = SpecialTokens("<pad>", "<unk>", "<s>", "</s>", "<mask>")
_CONFIG_KEYS = {"pad": "pad_token", "unk": "unk_token", "cls": "cls_token", "sep": "sep_token", "mask": "mask_token"}


def is_bpe_folder(folder: Path, tokenizer_json: Optional[TokenizerJson]) -> bool:
    """Whether the folder's tokenizer is byte-level BPE: a BPE tokenizer.json (`tokenizer_json`, read once by the
    caller), or vocab.json + merges.txt without a tokenizer.json or vocab.txt."""
    if tokenizer_json is not None:
        return tokenizer_json.model_type == "BPE"
    return not (folder / "vocab.txt").is_file() and (folder / "vocab.json").is_file() \
        and (folder / "merges.txt").is_file()


def special_tokens(folder: Path, defaults: SpecialTokens = ROBERTA_SPECIALS) -> SpecialTokens:
    """Names from tokenizer_config.json / special_tokens_map.json (HF writes them as strings or as
    {"content": ...}), else `defaults` (RoBERTa's)."""
    names = defaults._asdict()
    for file in ("special_tokens_map.json", "tokenizer_config.json"):
        config = _read_config(folder / file)
        for field, key in _CONFIG_KEYS.items():
            value = config.get(key)
            value = value.get("content") if isinstance(value, dict) else value
            if isinstance(value, str):
                names[field] = value
    return SpecialTokens(**names)


def load_roberta_backend(folder: Path, tokenizer_json: Optional[TokenizerJson]) -> tuple[RustTokenizer, SpecialTokens]:
    specials = special_tokens(folder)
    if tokenizer_json is not None:
        backend = tokenizer_json.backend()
    else:
        try:
            backend = RustTokenizer(BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
        except Exception as err:
            raise CheckpointError(f"{folder / 'vocab.json'} / {folder / 'merges.txt'}: not a valid BPE vocabulary "
                                  f"({err})") from None
        add_prefix_space = _read_config(folder / "tokenizer_config.json").get("add_prefix_space", False) is True
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
        backend.decoder = decoders.ByteLevel()
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    missing = [t for t in specials if backend.token_to_id(t) is None]
    if missing:
        raise CheckpointError(f"{folder}: the BPE vocabulary lacks the special token(s) {', '.join(missing)}")
    # Offsets without the leading space of a word, as RobertaTokenizerFast gives them; bertkit adds <s> </s>.
    backend.post_processor = processors.RobertaProcessing(
        (specials.sep, backend.token_to_id(specials.sep)), (specials.cls, backend.token_to_id(specials.cls)),
        trim_offsets=True, add_prefix_space=False)
    backend.no_padding()
    backend.no_truncation()
    return backend, specials


def save_roberta_files(backend: RustTokenizer, specials: SpecialTokens, model_max_length: int, folder: Path) -> None:
    """tokenizer.json, vocab.json + merges.txt, tokenizer_config.json and special_tokens_map.json."""
    backend.save(str(folder / "tokenizer.json"))
    backend.model.save(str(folder))                                  # vocab.json, merges.txt
    tokens = {key: getattr(specials, field) for field, key in _CONFIG_KEYS.items()}
    tokens.update(bos_token=specials.cls, eos_token=specials.sep)
    config = {"tokenizer_class": "RobertaTokenizer", "add_prefix_space": False, "trim_offsets": True,
              "model_max_length": model_max_length, **tokens}
    for name, value in (("tokenizer_config.json", config), ("special_tokens_map.json", tokens)):
        (folder / name).write_text(json_text(value), encoding="utf-8")


def _read_config(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from None
    return value if isinstance(value, dict) else {}
