"""Hugging Face ELECTRA folders, both ways (the folder-family protocol of checkpoints/io.py, see families.py).

An ELECTRA body is the BERT encoder with `electra.` in place of `bert.`, the factorized-embedding projection
called `embeddings_project`, and no pooler; config.json adds `embedding_size`. Everything else goes through
hf.py's BERT names. Heads (HF class -> bertkit head key):
  ElectraForPreTraining               discriminator_predictions.dense / .dense_prediction  -> "discriminator"
  ElectraForMaskedLM (the generator)  generator_predictions.dense / .LayerNorm, generator_lm_head (tied) -> "mlm"
  ElectraForSequenceClassification    classifier.dense / .out_proj (an MLP over [CLS])     -> "classifier"
  ElectraForTokenClassification       classifier                                           -> "token_classifier"
  ElectraForQuestionAnswering         qa_outputs                                           -> "qa"
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.checkpoints import bert, hf
from bertkit.errors import CheckpointError
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead
from bertkit.tokenizer import Tokenizer

ARCHITECTURES = {(): "ElectraModel", ("discriminator",): "ElectraForPreTraining", ("mlm",): "ElectraForMaskedLM",
                 ("classifier",): "ElectraForSequenceClassification",
                 ("token_classifier",): "ElectraForTokenClassification", ("qa",): "ElectraForQuestionAnswering"}


def _pairs(hf_prefix: str, ours: str, parts: tuple[str, ...] = ("weight", "bias")) -> list[tuple[str, str]]:
    return [(f"{hf_prefix}.{p}", f"{ours}.{p}") for p in parts]


HEAD_NAMES: dict[str, list[tuple[str, str]]] = {
    "discriminator": _pairs("discriminator_predictions.dense", "dense")
    + _pairs("discriminator_predictions.dense_prediction", "linear"),
    "mlm": _pairs("generator_predictions.dense", "dense") + _pairs("generator_predictions.LayerNorm", "norm")
    + [("generator_lm_head.bias", "bias")],
    "classifier": _pairs("classifier.dense", "dense") + _pairs("classifier.out_proj", "linear"),
    "token_classifier": _pairs("classifier", "linear"),
    "qa": _pairs("qa_outputs", "linear"),
}
_PROJECTION = ("embeddings_project.", "encoder.embedding_hidden_mapping_in.")   # ELECTRA's name, hf.py's (ALBERT)
_TIED = "generator_lm_head.weight"

# --- config.json ------------------------------------------------------------------------------------------


def config_from_hf(data: dict[str, Any], source: str, extra: dict[str, Any] | None = None) -> EncoderConfig:
    if data.get("model_type") != "electra":
        raise CheckpointError(f"{source}: model_type {data.get('model_type')!r} is not electra")
    if data.get("is_decoder") or data.get("add_cross_attention"):
        raise CheckpointError(f"{source}: an ELECTRA decoder (is_decoder / add_cross_attention) is not supported")
    config = hf.config_from_hf({**data, "model_type": "bert"}, source)     # the same BERT keys
    embedding_size = hf.config_integer(data, "embedding_size", source, minimum=1, default=128)  # HF's default
    return config.replace(family="electra", use_pooler=False,
                          embedding_size=embedding_size if embedding_size != config.hidden_size else None)


def folder_config(config: EncoderConfig, head_keys: tuple[str, ...]) -> dict[str, Any]:
    if head_keys not in ARCHITECTURES:
        raise CheckpointError(f"cannot save ELECTRA heads {head_keys} together; HF has no class with that "
                              "combination")
    variants = [f"{name}={getattr(config, name)!r}" for name, plain in
                (("share_layers", "none"), ("norm_position", "post"), ("causal", False), ("embedding_norm", True),
                 ("use_pooler", False), ("position_offset", 0)) if getattr(config, name) != plain]
    if variants:
        raise CheckpointError(f"an ELECTRA folder cannot hold an encoder with {', '.join(variants)}; HF's "
                              "ElectraModel has no such variant")
    return {**hf.config_to_hf(config), "model_type": "electra", "embedding_size": config.token_embedding_size,
            "architectures": [ARCHITECTURES[head_keys]]}


def folder_meta(config: EncoderConfig, head_keys: tuple[str, ...]) -> dict[str, Any]:
    return {}            # config.json says everything


check_sizes = hf.check_sizes         # the same internal names as BERT's


# --- parameter names --------------------------------------------------------------------------------------

def split_state(state: dict[str, torch.Tensor], architectures: list[str], task: str | None) -> hf.SplitState:
    renamed, tied = {}, None
    for name, tensor in state.items():
        plain = name[len("electra."):] if name.startswith("electra.") else name
        if plain == _TIED:
            tied = tensor
            continue
        if plain.startswith(_PROJECTION[0]):
            plain = _PROJECTION[1] + plain[len(_PROJECTION[0]):]
        renamed[plain] = tensor
    split = hf.split_hf_state(renamed, token_head="ElectraForTokenClassification" in architectures or task == "ner",
                              head_names=HEAD_NAMES)
    words = split.encoder.get("embeddings.token.weight")
    if tied is not None and words is not None and not torch.equal(tied, words):
        raise CheckpointError("generator_lm_head.weight differs from the word embeddings; bertkit's generator ties "
                              "them (as ELECTRA does), so an untied head cannot be loaded")
    return split


def state_to_hf(encoder: Encoder, heads: dict[str, nn.Module]) -> dict[str, torch.Tensor]:
    prefix = "electra." if heads else ""
    state = {}
    for name, tensor in hf.encoder_state_to_hf(encoder.state_dict(), prefix).items():
        if name.startswith(prefix + _PROJECTION[1]):
            name = prefix + _PROJECTION[0] + name[len(prefix + _PROJECTION[1]):]
        state[name] = tensor
    state.update(hf.heads_state_to_hf({k: v.state_dict() for k, v in heads.items()}, HEAD_NAMES))
    if "mlm" in heads:   # tied to the word embeddings; stored so transformers needs no re-tying to be exact
        state[_TIED] = encoder.embeddings.token.weight.detach().clone()
    return state


# --- modules ----------------------------------------------------------------------------------------------

new_encoder = bert.new_encoder


def build_head(key: str, config: EncoderConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    if key == "mlm":
        return MaskedLMHead(config, activation="gelu")      # HF ElectraGeneratorPredictions: gelu, always
    return bert.build_head(key, config, state)   # HEADS: the classifier is the family's MLP (SEQUENCE_HEADS)


def load_tokenizer(folder: Path) -> Tokenizer | None:
    return bert.load_tokenizer(folder)        # ELECTRA ships BERT's WordPiece vocab.txt
