"""The BERT / RoBERTa folder family: the protocol checkpoints/io.py calls (families.py), over hf.py's names.

A folder of this family is an HF BERT folder: `bert.*` parameter names (none for the bare BertModel), the
tied MLM decoder stored beside the embeddings, and bertkit.json["encoder"] for the variants (pre-LN, ALBERT's
factorization and sharing, causal) that config.json has no key for; folders of those variants are marked
"hf_compatible": false, since HF's BertModel cannot compute them.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.checkpoints import hf
from bertkit.errors import CheckpointError
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import (MaskedLMHead, QuestionAnsweringHead, SentencePairHead, SequenceClassificationHead,
                                 TokenClassificationHead)
from bertkit.tokenizer import Tokenizer

config_from_hf = hf.config_from_hf


def split_state(state: dict[str, torch.Tensor], architectures: list[str], task: str | None) -> hf.SplitState:
    return hf.split_hf_state(state, token_head="BertForTokenClassification" in architectures or task == "ner")


def new_encoder(config: EncoderConfig) -> Encoder:
    return Encoder(config)


def build_head(key: str, config: EncoderConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """A head module of the right shape for the weights found under `key`."""
    if key == "classifier":
        return SequenceClassificationHead(config, num_labels=state["linear.weight"].shape[0])
    if key == "token_classifier":
        return TokenClassificationHead(config, num_labels=state["linear.weight"].shape[0])
    if key == "qa":
        return QuestionAnsweringHead(config)
    if key == "mlm":
        return MaskedLMHead(config)
    if key == "pair":
        return SentencePairHead(config)
    raise CheckpointError(f"unknown head {key!r}")


def load_tokenizer(folder: Path) -> Tokenizer | None:
    """WordPiece (vocab.txt or tokenizer.json) or RoBERTa's byte-level BPE, chosen by Tokenizer.from_folder."""
    if not any((folder / name).is_file() for name in ("tokenizer.json", "vocab.txt", "vocab.json")):
        warnings.warn(f"{folder}: no vocab.txt, tokenizer.json or vocab.json + merges.txt; the model loads "
                      "without a tokenizer", stacklevel=3)
        return None
    return Tokenizer.from_folder(folder)


def check_sizes(config: EncoderConfig, state: dict[str, torch.Tensor], source: str) -> None:
    hf.check_sizes(config, state, source)


def state_to_hf(encoder: Encoder, heads: dict[str, nn.Module]) -> dict[str, torch.Tensor]:
    roberta = hf.is_roberta(encoder.config)
    prefix = ("roberta." if roberta else "bert.") if heads else ""
    state = hf.encoder_state_to_hf(encoder.state_dict(), prefix)
    state.update(hf.heads_state_to_hf({k: v.state_dict() for k, v in heads.items()}))
    if "mlm" in heads:   # HF's tied decoder weight; stored so HF needs no re-tying to be exact
        state["cls.predictions.decoder.weight"] = encoder.embeddings.token.weight.detach().clone()
    return state


def folder_config(config: EncoderConfig, head_keys: tuple[str, ...]) -> dict[str, Any]:
    if head_keys not in hf.ARCHITECTURES:
        raise CheckpointError(f"cannot save heads {head_keys} together; HF has no class with that combination")
    architecture = "RobertaModel" if hf.is_roberta(config) else hf.ARCHITECTURES[head_keys]
    return {**hf.config_to_hf(config), "architectures": [architecture]}


def folder_meta(config: EncoderConfig, head_keys: tuple[str, ...]) -> dict[str, Any]:
    meta: dict[str, Any] = {"encoder": {k: getattr(config, k) for k in hf.EXTRA_FIELDS}}
    if config.norm_position == "pre" or config.embedding_size or config.causal or (hf.is_roberta(config)
                                                                                   and head_keys):
        # HF BertModel cannot compute these variants; HF's RoBERTa heads differ from these BERT-style heads
        meta["hf_compatible"] = False
    return meta
