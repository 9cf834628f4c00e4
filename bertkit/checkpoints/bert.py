"""The BERT family's modules and tokenizer (the family protocol of families.py, as far as ELECTRA shares it).

Reading and writing BERT, RoBERTa and ALBERT folders, and folders of variants no transformers class computes,
goes through hf_form.py (which class holds a model, or why none does) and hf_names.py / albert.py (the names);
checkpoints/io.py calls those for this family and the ELECTRA / XLNet modules for theirs.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from bertkit.checkpoints import hf
from bertkit.errors import BertkitWarning, CheckpointError
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.head_registry import HEADS, head_from_state
from bertkit.tokenizer import Tokenizer

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model")   # spiece.model alone is named


def new_encoder(config: EncoderConfig) -> Encoder:
    return Encoder(config)


def build_head(key: str, config: EncoderConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """A head module of the right shape for the weights found under `key` (model/head_registry.py HEADS)."""
    if key not in HEADS:
        raise CheckpointError(f"unknown head {key!r}; heads are {', '.join(HEADS)}")
    return head_from_state(key, config, state)


def load_tokenizer(folder: Path) -> Tokenizer | None:
    """WordPiece (vocab.txt or tokenizer.json) or RoBERTa's byte-level BPE, chosen by Tokenizer.from_folder."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        warnings.warn(f"{folder}: no vocab.txt, tokenizer.json or vocab.json + merges.txt; the model loads "
                      "without a tokenizer", BertkitWarning, stacklevel=3)
        return None
    return Tokenizer.from_folder(folder)


def check_sizes(config: EncoderConfig, state: dict[str, torch.Tensor], source: str) -> None:
    hf.check_sizes(config, state, source)
