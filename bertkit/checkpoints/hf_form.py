"""Which transformers class holds a model, or why none does; and the folder's config.json and weights in it.

A model goes to the family that computes it exactly: ALBERT (AlbertModel, AlbertForMaskedLM,
AlbertForPreTraining, ...) for factorized embeddings or whole-layer sharing, RoBERTa for positions numbered
from pad_token_id + 1, BERT otherwise. Variants no transformers class computes (pre-LN blocks, sharing only
attention or only the feed-forward, no embedding LayerNorm, a causal mask, ...) get model_type "bertkit" and
no architecture, so transformers refuses the folder instead of loading it as something else, and bertkit.json
says why. Pruned models keep HF's `pruned_heads` layout (physically smaller layers), which transformers 4
applied and transformers 5 ignores (re-initializing those layers): they are bertkit folders too, and
`bertkit convert` or prune-heads' `transformers/` copy gives the full-shape form plain from_pretrained loads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn

from bertkit.checkpoints import albert, hf
from bertkit.checkpoints.hf_names import (BERT_NAMES, ROBERTA_NAMES, TIED_DECODER, SplitState,
                                          roberta_classifier_to_hf)
from bertkit.errors import CheckpointError
from bertkit.model.config import EncoderConfig
from bertkit.model.head_registry import HEADS, head_keys as ordered_head_keys

# Classes built on a model without its pooler (add_pooling_layer=False): they compute the same with or without one.
_NO_POOLER = {(key,) for key, kind in HEADS.items() if kind.reads == "tokens"}
_FAMILIES = {"bert": hf.ARCHITECTURES, "roberta": hf.ROBERTA_ARCHITECTURES, "albert": albert.ARCHITECTURES}
NO_POOLER_CLASSES = {table[keys] for table in _FAMILIES.values() for keys in _NO_POOLER if keys in table}


@dataclass(frozen=True)
class HfForm:
    model_type: str                   # config.json model_type: bert | roberta | albert | bertkit
    architecture: Optional[str]       # the transformers class that loads the folder; None: no class computes it
    reason: Optional[str] = None      # why plain transformers does not load it (None: it does, exactly)

    @property
    def loads_in_transformers(self) -> bool:
        return self.architecture is not None and self.reason is None


def head_keys_of(heads: dict[str, Any]) -> tuple[str, ...]:
    keys = ordered_head_keys(heads)
    if keys not in hf.ARCHITECTURES:
        raise CheckpointError(f"cannot save heads {keys} together; HF has no class with that combination")
    return keys


def family_of(config: EncoderConfig) -> str:
    if albert.is_albert(config):
        return "albert"
    return "roberta" if hf.is_roberta(config) else "bert"


def choose_form(config: EncoderConfig, head_keys: tuple[str, ...], pruned: bool = False) -> HfForm:
    """The transformers class for this model and heads, or the reasons none computes it."""
    family = family_of(config)
    problems = []
    if config.causal:
        problems.append("a causal (GPT-style) model: the GPT-2 writer (checkpoints/gpt2.py) gives the HF form")
    if config.norm_position == "pre":
        problems.append("pre-LN blocks (LayerNorm before attention and feed-forward, then a final LayerNorm): "
                        "transformers' BERT, RoBERTa and ALBERT normalize after each residual add")
    if not config.embedding_norm:
        problems.append("no LayerNorm after the embeddings: transformers' BERT, RoBERTa and ALBERT have one")
    if config.share_layers in ("attention", "ffn"):
        part = "attention" if config.share_layers == "attention" else "feed-forward"
        problems.append(f"only the {part} is shared across layers: ALBERT shares whole layers (num_hidden_groups)")
    if family == "albert" and config.position_offset:
        problems.append("RoBERTa's position numbering with ALBERT's factorization or sharing: no class has both")
    if config.type_vocab_size < 1:
        problems.append("no segment embeddings: transformers' BERT-family classes always have a token_type table")
    architecture = _FAMILIES[family].get(head_keys)
    if architecture is None:
        problems.append(f"transformers' {family.upper() if family == 'bert' else family.capitalize()} has no "
                        f"class with the heads {' + '.join(head_keys)}")
    if not config.use_pooler and head_keys not in _NO_POOLER:
        problems.append(f"the model has no pooler, and {architecture or 'the HF class'} computes one")
    if family == "roberta" and "mlm" in head_keys and config.activation != "gelu":
        problems.append(f"RobertaForMaskedLM's head applies exact GELU; this model's uses {config.activation}")
    if pruned:
        problems.append("pruned heads stored as physically smaller layers (config.json pruned_heads): transformers "
                        "5 ignores that key and would re-initialize those layers at random; prune-heads' "
                        "transformers/ subfolder, or `bertkit convert`, holds the full-shape copy from_pretrained "
                        "loads (pruned heads zeroed)")
    if problems:
        return HfForm(hf.BERTKIT_MODEL_TYPE, None, "; ".join(problems))
    return HfForm(family, architecture)


def hf_folder_contents(encoder: nn.Module, heads: dict[str, nn.Module], labels: Optional[list[str]] = None,
                       task: Optional[str] = None) -> tuple[dict[str, Any], dict[str, torch.Tensor], HfForm]:
    """(config.json, weights with on-disk names, form) for an encoder and its heads."""
    config: EncoderConfig = encoder.config
    keys = head_keys_of(heads)
    pruned = encoder.pruned_heads()
    form = choose_form(config, keys, bool(pruned))
    family = family_of(config) if form.architecture is not None else "bert"
    prefix = f"{family}." if heads else ""
    encoder_state = encoder.state_dict()
    if family == "albert":
        hf_config = albert.config_to_albert(config)
        state = albert.encoder_to_albert(encoder_state, config, prefix)
        names = albert.ALBERT_NAMES
    else:
        hf_config = hf.config_to_hf(config)
        names = ROBERTA_NAMES if family == "roberta" else BERT_NAMES
        state = names.encoder_to_hf(encoder_state, prefix)
    state.update(names.heads_to_hf({k: v.state_dict() for k, v in heads.items()}))
    if family == "roberta" and "classifier" in heads:
        state = roberta_classifier_to_hf(state, prefix)
    if form.architecture in NO_POOLER_CLASSES:
        # the class has no pooler, so its weights would be "unexpected" there: bertkit keeps them in pooler.safetensors
        state = {name: tensor for name, tensor in state.items() if not name.startswith(f"{prefix}pooler.")}
    if "mlm" in heads:   # the tied decoder weight; stored so that transformers needs no re-tying to be exact
        state[TIED_DECODER[family]] = encoder.embeddings.token.weight.detach().clone()
    hf_config["model_type"] = form.model_type
    hf_config["architectures"] = [form.architecture] if form.architecture else []
    if form.architecture is None:
        hf_config["bertkit_note"] = f"no transformers class computes this model ({form.reason}); load it with " \
                                    "bertkit.load"
    hf_config.update(hf.heads_label_config(heads, labels, task))
    if pruned:
        hf_config["pruned_heads"] = {str(layer): removed for layer, removed in pruned.items()}
    return hf_config, state, form


def config_from_folder(hf_config: dict[str, Any], source: str, extra: Optional[dict[str, Any]]) -> EncoderConfig:
    """EncoderConfig from a folder's config.json (BERT, RoBERTa, ALBERT or bertkit's) and bertkit.json "encoder"."""
    if isinstance(hf_config, dict) and hf_config.get("model_type") == "albert":
        return albert.config_from_albert(hf_config, source, extra)
    return hf.config_from_hf(hf_config, source, extra)


def split_folder_state(hf_config: dict[str, Any], config: EncoderConfig, state: dict[str, torch.Tensor],
                       token_head: bool, source: str) -> SplitState:
    """A folder's weights sorted into internal encoder names and head states."""
    if hf_config.get("model_type") == "albert":
        return albert.split_albert(state, config, token_head, source)
    return BERT_NAMES.split(state, token_head)
