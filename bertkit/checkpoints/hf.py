"""Hugging Face BERT and RoBERTa config.json keys, both ways, and the checks on what a folder's config says.

Parameter names are in hf_names.py (with the BERT-name helpers at the end of this file, which ELECTRA's
reader shares), ALBERT's config and names in albert.py; which transformers class holds a
model is decided in hf_form.py. A model no transformers class computes is written with model_type "bertkit"
(BERT's keys otherwise), so transformers refuses it instead of loading something else.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from bertkit.checkpoints.hf_names import BERT_HEADS, BERT_NAMES, Names, SplitState
from bertkit.errors import CheckpointError
from bertkit.model.head_registry import HEADS
from bertkit.model.config import EncoderConfig

# --- config.json -----------------------------------------------------------------------------------------

_ACTIVATION_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
_ACTIVATION_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                       "gelu_fast": "gelu_tanh", "relu": "relu"}
# Our config fields that HF BERT has no key for; they travel in bertkit.json["encoder"].
EXTRA_FIELDS = ("share_layers", "norm_position", "use_pooler", "causal", "embedding_size", "embedding_norm",
                "scaled_residual_init", "position_offset")
# config.json model_type of a folder no transformers class computes (hf_form.py says why, in bertkit.json)
BERTKIT_MODEL_TYPE = "bertkit"

ARCHITECTURES = {
    (): "BertModel",
    ("classifier",): "BertForSequenceClassification",
    ("token_classifier",): "BertForTokenClassification",
    ("qa",): "BertForQuestionAnswering",
    ("mlm",): "BertForMaskedLM",
    ("mlm", "pair"): "BertForPreTraining",
    ("pair",): "BertForNextSentencePrediction",
}
ROBERTA_ARCHITECTURES = {
    (): "RobertaModel",
    ("classifier",): "RobertaForSequenceClassification",
    ("token_classifier",): "RobertaForTokenClassification",
    ("qa",): "RobertaForQuestionAnswering",
    ("mlm",): "RobertaForMaskedLM",
}


def is_roberta(config: EncoderConfig) -> bool:
    """RoBERTa numbers positions from pad_token_id + 1; config.json says so with model_type "roberta"."""
    return config.position_offset > 0 and config.position_offset == (config.pad_token_id or 0) + 1


def config_to_hf(config: EncoderConfig) -> dict[str, Any]:
    if config.position_offset and not is_roberta(config):
        raise CheckpointError(f"position_offset {config.position_offset} with pad_token_id {config.pad_token_id} "
                              "has no config.json form (RoBERTa's offset is pad_token_id + 1)")
    return {
        "model_type": "roberta" if is_roberta(config) else "bert",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": _ACTIVATION_TO_HF[config.activation],
        "hidden_dropout_prob": config.hidden_dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "layer_norm_eps": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
    }


def config_from_hf(data: Any, source: str, extra: dict[str, Any] | None = None) -> EncoderConfig:
    """Build an EncoderConfig from a config.json (HF) or bert_config.json (Google) dict.

    Every value is checked before anything is built from it: the file is untrusted, and a string size, a zero
    head count or a NaN epsilon would otherwise surface as a traceback or as NaN vectors much later.
    """
    if not isinstance(data, dict):
        raise CheckpointError(f"{source}: expected a JSON object of model settings, got a {type(data).__name__}")
    model_type = data.get("model_type", "bert")
    if model_type not in ("bert", "roberta", "xlm-roberta", "camembert", BERTKIT_MODEL_TYPE):
        raise CheckpointError(f"{source}: model_type {model_type!r} is not a BERT-family encoder bertkit loads "
                              "(bert, roberta, albert, electra, xlnet)")
    if data.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{source}: position_embedding_type {data['position_embedding_type']!r} is not "
                              "supported; only absolute positions")
    act = data.get("hidden_act", "gelu")
    if not isinstance(act, str) or act not in _ACTIVATION_FROM_HF:
        raise CheckpointError(f"{source}: hidden_act {act!r} is not supported; use one of "
                              f"{', '.join(_ACTIVATION_FROM_HF)}")
    sizes = {key: config_integer(data, key, source, minimum=1) for key in
             ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")}
    if sizes["hidden_size"] % sizes["num_attention_heads"]:
        raise CheckpointError(f"{source}: hidden_size {sizes['hidden_size']} is not divisible by "
                              f"num_attention_heads {sizes['num_attention_heads']}")
    pad = data.get("pad_token_id")
    pad = 0 if pad is None else config_integer(data, "pad_token_id", source, minimum=0)
    if pad >= sizes["vocab_size"]:
        raise CheckpointError(f"{source}: pad_token_id {pad} is outside the vocabulary of {sizes['vocab_size']}")
    fields = dict(
        vocab_size=sizes["vocab_size"], hidden_size=sizes["hidden_size"], num_layers=sizes["num_hidden_layers"],
        num_heads=sizes["num_attention_heads"], intermediate_size=sizes["intermediate_size"],
        activation=_ACTIVATION_FROM_HF[act],
        hidden_dropout=config_number(data, "hidden_dropout_prob", 0.1, source, 0.0, 1.0),
        attention_dropout=config_number(data, "attention_probs_dropout_prob", 0.1, source, 0.0, 1.0),
        max_position_embeddings=config_integer(data, "max_position_embeddings", source, minimum=1, default=512),
        type_vocab_size=config_integer(data, "type_vocab_size", source, minimum=0, default=2),
        layer_norm_eps=config_number(data, "layer_norm_eps", 1e-12, source, 0.0, 1.0, open_low=True),
        initializer_range=config_number(data, "initializer_range", 0.02, source, 0.0, float("inf")),
        pad_token_id=pad,
        # HF RoBERTa numbers positions from padding_idx + 1.
        position_offset=pad + 1 if model_type not in ("bert", BERTKIT_MODEL_TYPE) else 0,
    )
    fields.update(extra_fields(extra, source))
    if fields["position_offset"] >= fields["max_position_embeddings"] - 1:
        raise CheckpointError(f"{source}: max_position_embeddings {fields['max_position_embeddings']} leaves no "
                              f"positions after the RoBERTa offset of {fields['position_offset']}")
    try:
        return EncoderConfig(**fields)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{source}: {err}") from None


_EXTRA_CHOICES = {"share_layers": ("none", "all", "attention", "ffn"), "norm_position": ("post", "pre"),
                  "use_pooler": (True, False), "causal": (True, False), "embedding_norm": (True, False),
                  "scaled_residual_init": (True, False)}


def extra_fields(extra: Any, source: str) -> dict[str, Any]:
    """bertkit.json "encoder": the variant fields HF has no key for, checked like config.json's."""
    if not extra:
        return {}
    where = source.rsplit("/", 1)[0] + "/bertkit.json"
    if not isinstance(extra, dict):
        raise CheckpointError(f"{where}: \"encoder\" must be an object")
    fields = {k: v for k, v in extra.items() if k in EXTRA_FIELDS}
    for key, value in fields.items():
        if key == "embedding_size":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise CheckpointError(f"{where}: encoder.embedding_size must be null or a positive integer, "
                                      f"got {value!r}")
        elif key == "position_offset":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CheckpointError(f"{where}: encoder.position_offset must be a non-negative integer, "
                                      f"got {value!r}")
        elif not any(value is choice if isinstance(choice, bool) else value == choice
                     for choice in _EXTRA_CHOICES[key]):
            raise CheckpointError(f"{where}: encoder.{key} {value!r} is not one of {list(_EXTRA_CHOICES[key])}")
    return fields


def config_integer(data: dict, key: str, source: str, minimum: int, default: int | None = None) -> int:
    if key not in data and default is not None:
        return default
    if key not in data:
        raise CheckpointError(f"{source}: missing key {key!r}")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointError(f"{source}: {key} must be an integer, got {value!r}")
    if value < minimum:
        raise CheckpointError(f"{source}: {key} must be at least {minimum}, got {value}")
    return value


def config_number(data: dict, key: str, default: float, source: str, low: float, high: float,
            open_low: bool = False) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not (low < value if open_low else low <= value) or not value <= high:
        bound = f"{'>' if open_low else '>='} {low:g} and <= {high:g}"
        raise CheckpointError(f"{source}: {key} must be a finite number {bound}, got {value!r}")
    return float(value)


def check_sizes(config: EncoderConfig, state: dict[str, torch.Tensor], source: str) -> None:
    """The config's sizes against the weights' shapes, before a model of that size is allocated.

    state: internal names (split_hf_state). A size that disagrees with the tensor holding it is named; a config
    that implies far more parameters than the file holds (sizes of 1e9, say) is refused even where the tensors
    that would show it are missing."""
    token = state.get("embeddings.token.weight")
    checks = [("vocab_size", config.vocab_size, token, 0),
              ("hidden_size", config.token_embedding_size, token, 1),
              ("max_position_embeddings", config.max_position_embeddings, state.get("embeddings.position.weight"), 0),
              ("type_vocab_size", config.type_vocab_size, state.get("embeddings.segment.weight"), 0),
              ("hidden_size", config.hidden_size, state.get("blocks.0.attention.out.weight"), 0),
              ("intermediate_size", config.intermediate_size, state.get("blocks.0.ffn.up.weight"), 0)]
    if config.embedding_size is not None:
        checks[1] = ("embedding_size", config.embedding_size, token, 1)
    for key, value, tensor, dim in checks:
        if tensor is not None and tensor.dim() > dim and tensor.shape[dim] != value:
            raise CheckpointError(f"{source}: {key} is {value} but the weights hold {tensor.shape[dim]} "
                                  f"(shape {tuple(tensor.shape)}); config.json does not describe these weights")
    layers = {int(name.split(".")[1]) for name in state if name.startswith("blocks.")}
    if layers and len(layers) != config.num_layers:
        raise CheckpointError(f"{source}: num_hidden_layers is {config.num_layers} but the weights hold "
                              f"{len(layers)} layers")
    held = sum(t.numel() for t in state.values())
    if implied_parameters(config) > 2 * held + 1_000_000:
        raise CheckpointError(f"{source}: its sizes imply {implied_parameters(config):,} parameters but the weight "
                              f"file holds {held:,}; config.json does not describe these weights")


def implied_parameters(config: EncoderConfig) -> int:
    """Parameters of the encoder a config describes (biases and norms included, no heads), from arithmetic."""
    H, I, E = config.hidden_size, config.intermediate_size, config.token_embedding_size
    embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size + 2) * E
    block = 4 * H * H + 2 * H * I + I + 9 * H
    unique_blocks = 1 if config.share_layers == "all" else config.num_layers
    return embeddings + (H * E + H if config.embedding_size is not None else 0) + unique_blocks * block + H * H + H


def label_config(num_labels: int, labels: list[str] | None, task: str | None) -> dict[str, Any]:
    """config.json keys that size HF's classifier heads (num_labels is derived from id2label)."""
    names = labels if labels and len(labels) == num_labels else [f"LABEL_{i}" for i in range(num_labels)]
    config: dict[str, Any] = {"id2label": {str(i): name for i, name in enumerate(names)},
                              "label2id": {name: i for i, name in enumerate(names)}}
    if task == "regression" or (num_labels == 1 and task is None):
        config["problem_type"] = "regression"
    elif task == "multi-label":
        config["problem_type"] = "multi_label_classification"
    return config


def heads_label_config(heads: dict[str, Any], labels: list[str] | None, task: str | None) -> dict[str, Any]:
    """label_config for whichever of `heads` is sized by labels (HEADS[key].labelled)."""
    config: dict[str, Any] = {}
    for key, head in heads.items():
        if HEADS[key].labelled:
            config.update(label_config(head.num_labels, labels, task))
    return config


# --- BERT parameter names for other families' readers (ELECTRA: checkpoints/electra.py) ------------------------

HEAD_NAMES = BERT_HEADS


def encoder_state_to_hf(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return BERT_NAMES.encoder_to_hf(state, prefix)


def heads_state_to_hf(heads: dict[str, dict[str, torch.Tensor]],
                      head_names: dict[str, list[tuple[str, str]]] = HEAD_NAMES) -> dict[str, torch.Tensor]:
    return Names(BERT_NAMES.encoder, BERT_NAMES.qkv, head_names).heads_to_hf(heads)


def split_hf_state(state: dict[str, torch.Tensor], token_head: bool,
                   head_names: dict[str, list[tuple[str, str]]] = HEAD_NAMES) -> SplitState:
    """BERT encoder names + `head_names` (another family's heads, e.g. ELECTRA's) -> internal names."""
    return Names(BERT_NAMES.encoder, BERT_NAMES.qkv, head_names).split(state, token_head, roberta_classifier=False)
