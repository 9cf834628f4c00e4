"""Hugging Face XLNet folders, both ways: config.json keys and parameter names (the folder-family protocol that
checkpoints/io.py calls; see families.py).

HF keeps each attention projection as one (C, H, D) tensor used through einsum (`layer.0.rel_attn.q`); bertkit
keeps nn.Linear weights (H * D, C), so q, k, v and r are reshaped and transposed, o only reshaped. Head models
prefix the body with `transformer.`. Heads: XLNetLMHeadModel's `lm_loss` (weight tied to the word embeddings,
checked, not loaded), XLNetForSequenceClassification's `sequence_summary.summary` + `logits_proj`, and
XLNetForTokenClassification's `classifier`.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.checkpoints.hf import SplitState, config_integer, config_number
from bertkit.errors import BertkitWarning, CheckpointError
from bertkit.model.head_registry import head_from_state
from bertkit.model.xlnet import XLNetConfig, XLNetModel
from bertkit.tokenizer.xlnet import SPIECE_FILE, XLNetTokenizer

_ACTIVATION_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
_ACTIVATION_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
ARCHITECTURES = {(): "XLNetModel", ("lm",): "XLNetLMHeadModel", ("classifier",): "XLNetForSequenceClassification",
                 ("token_classifier",): "XLNetForTokenClassification"}
# bertkit.json "encoder": what config.json has no key for
EXTRA_FIELDS = ("max_length",)

# --- config.json ------------------------------------------------------------------------------------------


def config_from_hf(data: Any, source: str, extra: dict[str, Any] | None = None) -> XLNetConfig:
    """Every value is checked before anything is built from it (the file is untrusted), as hf.config_from_hf does."""
    if not isinstance(data, dict) or data.get("model_type") != "xlnet":
        raise CheckpointError(f"{source}: not an XLNet config.json (model_type xlnet)")
    if data.get("pruned_heads"):
        raise CheckpointError(f"{source}: pruned_heads is not supported for XLNet")
    for key, supported in (("attn_type", "bi"), ("bi_data", False)):
        if data.get(key, supported) != supported:
            raise CheckpointError(f"{source}: {key}={data[key]!r} is not supported (XLNet fine-tuning and inference "
                                  f"use {supported!r})")
    act = data.get("ff_activation", "gelu")
    if not isinstance(act, str) or act not in _ACTIVATION_FROM_HF:
        raise CheckpointError(f"{source}: ff_activation {act!r} is not supported; use one of "
                              f"{', '.join(_ACTIVATION_FROM_HF)}")
    summary_type, activation = data.get("summary_type", "last"), data.get("summary_activation", "tanh")
    if summary_type not in ("last", "first") or activation not in ("tanh", None) \
            or data.get("summary_proj_to_labels"):
        raise CheckpointError(f"{source}: sequence summary {summary_type!r} / activation {activation!r} / "
                              "proj_to_labels is not supported; XLNet's is last / tanh / false")
    sizes = {key: config_integer(data, key, source, minimum=1) for key in
             ("vocab_size", "d_model", "n_layer", "n_head", "d_inner")}
    hidden, heads = sizes["d_model"], sizes["n_head"]
    if hidden % heads or data.get("d_head") not in (None, hidden // heads):
        raise CheckpointError(f"{source}: d_model {hidden} / n_head {heads} does not give d_head "
                              f"{data.get('d_head')}")
    pad = config_integer(data, "pad_token_id", source, minimum=0, default=5)
    if pad >= sizes["vocab_size"]:
        raise CheckpointError(f"{source}: pad_token_id {pad} is outside the vocabulary of {sizes['vocab_size']}")
    memory = {key: None if data.get(key) is None else config_integer(data, key, source, minimum=0)
              for key in ("mem_len", "reuse_len")}
    fields = dict(
        vocab_size=sizes["vocab_size"], hidden_size=hidden, num_layers=sizes["n_layer"], num_heads=heads,
        intermediate_size=sizes["d_inner"], activation=_ACTIVATION_FROM_HF[act],
        layer_norm_eps=config_number(data, "layer_norm_eps", 1e-12, source, 0.0, 1.0, open_low=True),
        dropout=config_number(data, "dropout", 0.1, source, 0.0, 1.0),
        initializer_range=config_number(data, "initializer_range", 0.02, source, 0.0, float("inf")),
        clamp_len=config_integer(data, "clamp_len", source, minimum=-1, default=-1), **memory, pad_token_id=pad,
        summary_type=summary_type, summary_use_proj=data.get("summary_use_proj", True) is not False,
        summary_activation=activation,
        summary_first_dropout=config_number(data, "summary_first_dropout", 0.0, source, 0.0, 1.0),
        summary_last_dropout=config_number(data, "summary_last_dropout", 0.1, source, 0.0, 1.0))
    if isinstance(extra, dict) and "max_length" in extra:
        fields["max_length"] = config_integer(extra, "max_length", source.rsplit("/", 1)[0] + "/bertkit.json",
                                              minimum=1)
    try:
        return XLNetConfig(**fields)
    except ValueError as err:
        raise CheckpointError(f"{source}: {err}") from None


def folder_config(config: XLNetConfig, head_keys: tuple[str, ...]) -> dict[str, Any]:
    if head_keys not in ARCHITECTURES:
        raise CheckpointError(f"cannot save XLNet heads {head_keys} together; HF has no class with that combination")
    return {
        "architectures": [ARCHITECTURES[head_keys]], "model_type": "xlnet", "vocab_size": config.vocab_size,
        "d_model": config.hidden_size, "n_layer": config.num_layers, "n_head": config.num_heads,
        "d_head": config.head_dim, "d_inner": config.intermediate_size,
        "ff_activation": _ACTIVATION_TO_HF[config.activation], "untie_r": True, "attn_type": "bi",
        "initializer_range": config.initializer_range, "layer_norm_eps": config.layer_norm_eps,
        "dropout": config.dropout, "mem_len": config.mem_len, "reuse_len": config.reuse_len, "bi_data": False,
        "clamp_len": config.clamp_len, "same_length": False, "summary_type": config.summary_type,
        "summary_use_proj": config.summary_use_proj, "summary_activation": config.summary_activation,
        "summary_first_dropout": config.summary_first_dropout, "summary_last_dropout": config.summary_last_dropout,
        "pad_token_id": config.pad_token_id, "tie_word_embeddings": True,
    }


def folder_meta(config: XLNetConfig, head_keys: tuple[str, ...]) -> dict[str, Any]:
    return {"encoder": {k: getattr(config, k) for k in EXTRA_FIELDS}}


def check_sizes(config: XLNetConfig, state: dict[str, torch.Tensor], source: str) -> None:
    """config.json's sizes against the weights, before a model of that size is allocated (the file is untrusted)."""
    token = state.get("embeddings.token.weight")
    for key, value, tensor, dim in (("vocab_size", config.vocab_size, token, 0),
                                    ("d_model", config.hidden_size, token, 1),
                                    ("d_inner", config.intermediate_size, state.get("blocks.0.ffn.up.weight"), 0)):
        if tensor is not None and tensor.dim() > dim and tensor.shape[dim] != value:
            raise CheckpointError(f"{source}: {key} is {value} but the weights hold {tensor.shape[dim]} "
                                  f"(shape {tuple(tensor.shape)}); config.json does not describe these weights")
    layers = {int(name.split(".")[1]) for name in state if name.startswith("blocks.")}
    if not layers and token is None:
        raise CheckpointError(f"{source}: model_type is 'xlnet' but the weights hold no XLNet names "
                              "(word_embedding, layer.N.rel_attn.*): they are another model's")
    if len(layers) != config.num_layers:
        raise CheckpointError(f"{source}: n_layer is {config.num_layers} but the weights hold {len(layers)} layers")
    C, I = config.hidden_size, config.intermediate_size
    implied = (config.vocab_size + 1) * C + config.num_layers * (5 * C * C + 2 * C * I + I + 10 * C)
    held = sum(t.numel() for t in state.values())
    if implied > 2 * held + 1_000_000:
        raise CheckpointError(f"{source}: its sizes imply {implied:,} parameters but the weight file holds {held:,}; "
                              "config.json does not describe these weights")


# --- parameter names --------------------------------------------------------------------------------------

# (HF name, bertkit name, how the tensor changes): "in" for (C, H, D) -> (H * D, C), "out" for (C, H, D) -> (C, H * D)
_LAYER = [("rel_attn.q", "attention.query.weight", "in"), ("rel_attn.k", "attention.key.weight", "in"),
          ("rel_attn.v", "attention.value.weight", "in"), ("rel_attn.r", "attention.position.weight", "in"),
          ("rel_attn.o", "attention.out.weight", "out"), ("rel_attn.r_w_bias", "attention.content_bias", None),
          ("rel_attn.r_r_bias", "attention.position_bias", None), ("rel_attn.r_s_bias", "attention.segment_bias", None),
          ("rel_attn.seg_embed", "attention.segment_embed", None),
          *((f"rel_attn.layer_norm.{p}", f"attention.norm.{p}", None) for p in ("weight", "bias")),
          *((f"ff.layer_1.{p}", f"ffn.up.{p}", None) for p in ("weight", "bias")),
          *((f"ff.layer_2.{p}", f"ffn.down.{p}", None) for p in ("weight", "bias")),
          *((f"ff.layer_norm.{p}", f"ffn.norm.{p}", None) for p in ("weight", "bias"))]
HEAD_NAMES = {"lm": [("lm_loss.bias", "bias")],
              "classifier": [("sequence_summary.summary.weight", "summary.weight"),
                             ("sequence_summary.summary.bias", "summary.bias"),
                             ("logits_proj.weight", "linear.weight"), ("logits_proj.bias", "linear.bias")],
              "token_classifier": [("classifier.weight", "linear.weight"), ("classifier.bias", "linear.bias")]}
_LAYER_NAME = re.compile(r"layer\.(\d+)\.(.+)")


def _to_ours(tensor: torch.Tensor, change: str | None) -> torch.Tensor:
    if change is None:
        return tensor
    C = tensor.shape[0]
    flat = tensor.reshape(C, -1)                                      # (C, H * D)
    return flat.t() if change == "in" else flat


def _to_hf(tensor: torch.Tensor, change: str | None, heads: int) -> torch.Tensor:
    if change is None:
        return tensor
    flat = tensor.t() if change == "in" else tensor                  # (C, H * D)
    return flat.reshape(flat.shape[0], heads, -1)


def split_state(state: dict[str, torch.Tensor], architectures: list[str], task: str | None) -> SplitState:
    result = SplitState()
    by_layer = {hf: (ours, change) for hf, ours, change in _LAYER}
    head_lookup = {hf: (key, ours) for key, names in HEAD_NAMES.items() for hf, ours in names}
    tied = None
    for raw_name, tensor in state.items():
        if not tensor.is_floating_point():
            raise CheckpointError(f"{raw_name} holds {tensor.dtype} values; XLNet folders hold float weights "
                                  "(int8 folders are for BERT-family encoders)")
        name = raw_name[len("transformer."):] if raw_name.startswith("transformer.") else raw_name
        match = _LAYER_NAME.fullmatch(name)
        if name == "word_embedding.weight":
            result.encoder["embeddings.token.weight"] = tensor
        elif name == "mask_emb":
            result.encoder["embeddings.mask"] = tensor.reshape(-1)                 # HF (1, 1, C) -> (C,)
        elif match and match.group(2) in by_layer:
            ours, change = by_layer[match.group(2)]
            result.encoder[f"blocks.{match.group(1)}.{ours}"] = _to_ours(tensor, change)
        elif name in head_lookup:
            key, ours = head_lookup[name]
            result.heads.setdefault(key, {})[ours] = tensor
        elif name == "lm_loss.weight":
            tied = tensor
        else:
            result.skipped.append(raw_name)
    if tied is not None and "embeddings.token.weight" in result.encoder \
            and not torch.equal(tied, result.encoder["embeddings.token.weight"]):
        raise CheckpointError("lm_loss.weight differs from transformer.word_embedding.weight; bertkit's XLNet ties "
                              "them (as XLNet does), so an untied LM head cannot be loaded")
    return result


def state_to_hf(encoder: XLNetModel, heads: dict[str, nn.Module]) -> dict[str, torch.Tensor]:
    prefix = "transformer." if heads else ""
    ours = encoder.state_dict()
    if any(not tensor.is_floating_point() for tensor in ours.values()):
        raise CheckpointError("this XLNet model holds int8 weights; XLNet folders hold float weights only")
    out = {f"{prefix}word_embedding.weight": ours["embeddings.token.weight"],
           f"{prefix}mask_emb": ours["embeddings.mask"].reshape(1, 1, -1)}
    for layer in range(encoder.config.num_layers):
        for hf, name, change in _LAYER:
            out[f"{prefix}layer.{layer}.{hf}"] = _to_hf(ours[f"blocks.{layer}.{name}"], change,
                                                        encoder.config.num_heads)
    for key, head in heads.items():
        head_state = head.state_dict()
        for hf, name in HEAD_NAMES[key]:
            if name in head_state:
                out[hf] = head_state[name]
    if "lm" in heads:    # tied; stored so transformers needs no re-tying to be exact
        out["lm_loss.weight"] = ours["embeddings.token.weight"]
    return {name: tensor.detach().clone().contiguous() for name, tensor in out.items()}


# --- modules ----------------------------------------------------------------------------------------------

def new_encoder(config: XLNetConfig) -> XLNetModel:
    return XLNetModel(config)


def build_head(key: str, config: XLNetConfig, state: dict[str, torch.Tensor]) -> nn.Module:
    """The heads XLNet folders hold (HEAD_NAMES' keys), built from model/head_registry.py's HEADS."""
    if key not in HEAD_NAMES:
        raise CheckpointError(f"unknown XLNet head {key!r}")
    if key == "classifier" and config.summary_use_proj != ("summary.weight" in state):
        raise CheckpointError(f"config.json summary_use_proj={config.summary_use_proj} but the weights "
                              f"{'lack' if config.summary_use_proj else 'hold'} sequence_summary.summary")
    return head_from_state(key, config, state)


def load_tokenizer(folder: Path) -> XLNetTokenizer | None:
    """tokenizer.json or spiece.model; a folder with tokenizer settings but neither is incomplete (an error), a
    folder with no tokenizer files at all is a bare model (a warning, as for BERT folders)."""
    if (folder / "tokenizer.json").is_file() or (folder / SPIECE_FILE).is_file():
        return XLNetTokenizer.from_folder(folder)
    settings = [name for name in ("tokenizer_config.json", "special_tokens_map.json") if (folder / name).is_file()]
    if settings:
        raise CheckpointError(f"{folder}: has {settings[0]} but no {SPIECE_FILE} (or tokenizer.json); copy the "
                              "SentencePiece model of the XLNet it came from into the folder")
    warnings.warn(f"{folder}: no {SPIECE_FILE} or tokenizer.json; the model loads without a tokenizer", BertkitWarning, stacklevel=3)
    return None
