"""Hugging Face names: the only place that knows them. config.json keys and parameter names, both ways.

Internally the encoder uses short names and one fused QKV projection; on disk a folder uses HF BERT
names (`bert.encoder.layer.0.attention.self.query.weight`), so `transformers` loads it as is.
"""
from __future__ import annotations

import re
from typing import Any

import torch

from bertkit.errors import CheckpointError
from bertkit.model.config import EncoderConfig

# --- config.json -----------------------------------------------------------------------------------------

_ACTIVATION_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
_ACTIVATION_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                       "gelu_fast": "gelu_tanh", "relu": "relu"}
# Our config fields that HF BERT has no key for; they travel in bertkit.json["encoder"].
EXTRA_FIELDS = ("share_layers", "norm_position", "use_pooler", "causal", "embedding_size", "embedding_norm",
                "scaled_residual_init")

ARCHITECTURES = {
    (): "BertModel",
    ("classifier",): "BertForSequenceClassification",
    ("token_classifier",): "BertForTokenClassification",
    ("qa",): "BertForQuestionAnswering",
    ("mlm",): "BertForMaskedLM",
    ("mlm", "pair"): "BertForPreTraining",
    ("pair",): "BertForNextSentencePrediction",
}


def config_to_hf(config: EncoderConfig, model_type: str = "bert") -> dict[str, Any]:
    return {
        "model_type": model_type,
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


def config_from_hf(data: dict[str, Any], source: str, extra: dict[str, Any] | None = None) -> EncoderConfig:
    """Build an EncoderConfig from a config.json (HF) or bert_config.json (Google) dict."""
    model_type = data.get("model_type", "bert")
    if model_type not in ("bert", "roberta", "xlm-roberta", "camembert"):
        raise CheckpointError(f"{source}: model_type {model_type!r} is not a BERT-family encoder bertkit loads "
                              "(bert, roberta, electra, xlnet)")
    if data.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{source}: position_embedding_type {data['position_embedding_type']!r} is not "
                              "supported; only absolute positions")
    act = data.get("hidden_act", "gelu")
    if act not in _ACTIVATION_FROM_HF:
        raise CheckpointError(f"{source}: hidden_act {act!r} is not supported; use one of "
                              f"{', '.join(_ACTIVATION_FROM_HF)}")
    try:
        pad = int(data.get("pad_token_id") if data.get("pad_token_id") is not None else 0)
        fields = dict(
            vocab_size=int(data["vocab_size"]), hidden_size=int(data["hidden_size"]),
            num_layers=int(data["num_hidden_layers"]), num_heads=int(data["num_attention_heads"]),
            intermediate_size=int(data["intermediate_size"]), activation=_ACTIVATION_FROM_HF[act],
            hidden_dropout=float(data.get("hidden_dropout_prob", 0.1)),
            attention_dropout=float(data.get("attention_probs_dropout_prob", 0.1)),
            max_position_embeddings=int(data.get("max_position_embeddings", 512)),
            type_vocab_size=int(data.get("type_vocab_size", 2)),
            layer_norm_eps=float(data.get("layer_norm_eps", 1e-12)),
            initializer_range=float(data.get("initializer_range", 0.02)),
            pad_token_id=pad,
            # HF RoBERTa numbers positions from padding_idx + 1.
            position_offset=pad + 1 if model_type != "bert" else 0,
        )
    except KeyError as err:
        raise CheckpointError(f"{source}: missing key {err.args[0]!r}") from None
    fields.update({k: v for k, v in (extra or {}).items() if k in EXTRA_FIELDS})
    try:
        return EncoderConfig(**fields)
    except ValueError as err:
        raise CheckpointError(f"{source}: {err}") from None


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


# --- parameter names -------------------------------------------------------------------------------------

# (HF name, internal name) templates: {i} is a layer index, {p} weight or bias. QKV are handled apart:
# HF stores three matrices where we keep one fused projection.
_ENCODER_NAMES = [
    ("embeddings.word_embeddings.{p}", "embeddings.token.{p}"),
    ("embeddings.position_embeddings.{p}", "embeddings.position.{p}"),
    ("embeddings.token_type_embeddings.{p}", "embeddings.segment.{p}"),
    ("embeddings.LayerNorm.{p}", "embeddings.norm.{p}"),
    ("encoder.embedding_hidden_mapping_in.{p}", "embeddings.project.{p}"),     # ALBERT factorization
    ("encoder.layer.{i}.attention.output.dense.{p}", "blocks.{i}.attention.out.{p}"),
    ("encoder.layer.{i}.attention.output.LayerNorm.{p}", "blocks.{i}.attention_norm.{p}"),
    ("encoder.layer.{i}.intermediate.dense.{p}", "blocks.{i}.ffn.up.{p}"),
    ("encoder.layer.{i}.output.dense.{p}", "blocks.{i}.ffn.down.{p}"),
    ("encoder.layer.{i}.output.LayerNorm.{p}", "blocks.{i}.ffn_norm.{p}"),
    ("encoder.final_layer_norm.{p}", "final_norm.{p}"),                         # pre-LN only: no HF BERT key
    ("pooler.dense.{p}", "pooler.dense.{p}"),
]


def _template_regex(template: str) -> re.Pattern:
    pattern = re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{p\}", r"(?P<p>weight|bias)")
    return re.compile(pattern)


_FROM_HF = [(_template_regex(hf), internal) for hf, internal in _ENCODER_NAMES]
_TO_HF = [(_template_regex(internal), hf) for hf, internal in _ENCODER_NAMES]


def _rename(name: str, table) -> str | None:
    for pattern, template in table:
        match = pattern.fullmatch(name)
        if match:
            return template.format(**match.groupdict())
    return None


_QKV = re.compile(r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)")

# Heads: our head key -> [(HF name, name inside the head module)].
HEAD_NAMES: dict[str, list[tuple[str, str]]] = {
    "classifier": [("classifier.weight", "linear.weight"), ("classifier.bias", "linear.bias")],
    "token_classifier": [("classifier.weight", "linear.weight"), ("classifier.bias", "linear.bias")],
    "qa": [("qa_outputs.weight", "linear.weight"), ("qa_outputs.bias", "linear.bias")],
    "mlm": [("cls.predictions.transform.dense.weight", "dense.weight"),
            ("cls.predictions.transform.dense.bias", "dense.bias"),
            ("cls.predictions.transform.LayerNorm.weight", "norm.weight"),
            ("cls.predictions.transform.LayerNorm.bias", "norm.bias"),
            ("cls.predictions.bias", "bias")],
    "pair": [("cls.seq_relationship.weight", "linear.weight"), ("cls.seq_relationship.bias", "linear.bias")],
}
# Buffers and tied weights that the model re-derives: not loaded, not reported.
_DERIVED = re.compile(r"(^|\.)(position_ids|token_type_ids)$|^cls\.predictions\.decoder\.(weight|bias)$")
_BASE_PREFIXES = ("bert.", "roberta.", "model.")


def _legacy_layer_norm(name: str) -> str:
    """Old TF-converted checkpoints call LayerNorm parameters gamma/beta."""
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))


def encoder_state_to_hf(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Internal encoder state dict -> HF names (a copy per layer even where layers share weights)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        match = re.fullmatch(r"blocks\.(\d+)\.attention\.qkv\.(weight|bias)", name)
        if match:
            layer, kind = match.groups()
            for part, chunk in zip(("query", "key", "value"), tensor.chunk(3, dim=0)):
                out[f"{prefix}encoder.layer.{layer}.attention.self.{part}.{kind}"] = chunk.clone()
            continue
        hf_name = _rename(name, _TO_HF)
        if hf_name is None:
            raise KeyError(f"no HF name for encoder parameter {name}")
        out[prefix + hf_name] = tensor.clone()
    return out


def heads_state_to_hf(heads: dict[str, dict[str, torch.Tensor]],
                      head_names: dict[str, list[tuple[str, str]]] = HEAD_NAMES) -> dict[str, torch.Tensor]:
    out = {}
    for key, state in heads.items():
        for hf_name, internal in head_names[key]:
            out[hf_name] = state[internal].contiguous()
    return out


class SplitState:
    """An HF state dict sorted into encoder weights, head weights and what was skipped."""

    def __init__(self):
        self.encoder: dict[str, torch.Tensor] = {}
        self.heads: dict[str, dict[str, torch.Tensor]] = {}
        self.skipped: list[str] = []


def split_hf_state(state: dict[str, torch.Tensor], token_head: bool,
                   head_names: dict[str, list[tuple[str, str]]] = HEAD_NAMES) -> SplitState:
    """HF names -> internal encoder names + head states. `token_head` says whether a name both heads use
    (BERT's `classifier.*`) belongs to token classification (BertForTokenClassification) rather than sequence
    classification. head_names: the family's head table (ELECTRA's, checkpoints/electra.py)."""
    result = SplitState()
    qkv: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
    preferred = "token_classifier" if token_head else "classifier"
    head_lookup = {hf: (key, internal) for key in sorted(head_names, key=lambda k: k == preferred)   # it wins
                   for hf, internal in head_names[key]}
    for raw_name, tensor in state.items():
        name = _legacy_layer_norm(raw_name)
        for prefix in _BASE_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix):]
                break
        if _DERIVED.search(name):     # buffers and the tied decoder: rebuilt, not loaded
            continue
        if name in head_lookup:
            key, internal = head_lookup[name]
            result.heads.setdefault(key, {})[internal] = tensor
            continue
        match = _QKV.fullmatch(name)
        if match:
            layer, part, kind = match.groups()
            qkv.setdefault((layer, kind), {})[part] = tensor
            continue
        internal = _rename(name, _FROM_HF)
        if internal is None:
            result.skipped.append(raw_name)
        else:
            result.encoder[internal] = tensor
    for (layer, kind), parts in qkv.items():
        if set(parts) != {"query", "key", "value"}:
            raise CheckpointError(f"layer {layer}: attention {kind} has only {sorted(parts)} of query/key/value")
        result.encoder[f"blocks.{layer}.attention.qkv.{kind}"] = torch.cat(
            [parts["query"], parts["key"], parts["value"]], dim=0)
    return result
