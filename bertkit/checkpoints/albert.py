"""Hugging Face ALBERT folders, both ways (Lan et al. 2020): config.json keys and `albert.*` parameter names.

An ALBERT model is a BERT encoder with factorized embeddings (E-wide tables projected to H by
`encoder.embedding_hidden_mapping_in`) and layers shared in groups: layer i runs group
int(i / (num_hidden_layers / num_hidden_groups)). bertkit's `share_layers="all"` is one group, `"none"` is one
group per layer; sharing only attention or only the feed-forward has no ALBERT form. ALBERT always projects
the embeddings, so a shared-layer model without factorization is written with embedding_size = H and an
identity projection (bertkit.json keeps `embedding_size: null`, and reading it back drops the identity).
Heads: AlbertForMaskedLM's `predictions.*`, AlbertForPreTraining's sentence-order head `sop_classifier.*`.
"""
from __future__ import annotations

from typing import Any

import torch

from bertkit.checkpoints import hf
from bertkit.checkpoints.hf_names import EMBEDDING_NAMES, Names, SplitState, linear_names
from bertkit.errors import CheckpointError
from bertkit.model.config import EncoderConfig

ARCHITECTURES = {
    (): "AlbertModel",
    ("mlm",): "AlbertForMaskedLM",
    ("mlm", "pair"): "AlbertForPreTraining",
    ("classifier",): "AlbertForSequenceClassification",
    ("token_classifier",): "AlbertForTokenClassification",
    ("qa",): "AlbertForQuestionAnswering",
}

_LAYER = "encoder.albert_layer_groups.{i}.albert_layers.0."
ALBERT_NAMES = Names(
    encoder=[
        *EMBEDDING_NAMES,
        (_LAYER + "attention.dense.{p}", "blocks.{i}.attention.out.{p}"),
        (_LAYER + "attention.LayerNorm.{p}", "blocks.{i}.attention_norm.{p}"),
        (_LAYER + "ffn.{p}", "blocks.{i}.ffn.up.{p}"),
        (_LAYER + "ffn_output.{p}", "blocks.{i}.ffn.down.{p}"),
        (_LAYER + "full_layer_layer_norm.{p}", "blocks.{i}.ffn_norm.{p}"),
        ("pooler.{p}", "pooler.dense.{p}"),
    ],
    qkv=_LAYER + "attention.{part}.{p}",
    heads={
        "classifier": linear_names("classifier"),
        "token_classifier": linear_names("classifier"),
        "qa": linear_names("qa_outputs"),
        "mlm": [("predictions.dense.weight", "dense.weight"), ("predictions.dense.bias", "dense.bias"),
                ("predictions.LayerNorm.weight", "norm.weight"), ("predictions.LayerNorm.bias", "norm.bias"),
                ("predictions.bias", "bias")],
        "pair": linear_names("sop_classifier.classifier"),
    },
)


def is_albert(config: EncoderConfig) -> bool:
    """Whether the model is ALBERT-shaped: factorized embeddings or cross-layer sharing."""
    return config.embedding_size is not None or config.share_layers != "none"


def num_groups(config: EncoderConfig) -> int:
    return 1 if config.share_layers == "all" else config.num_layers


def config_to_albert(config: EncoderConfig) -> dict[str, Any]:
    base = hf.config_to_hf(config)
    return {**base, "model_type": "albert", "embedding_size": config.token_embedding_size,
            "num_hidden_groups": num_groups(config), "inner_group_num": 1,
            "classifier_dropout_prob": config.hidden_dropout, "tie_word_embeddings": True}


def config_from_albert(data: dict[str, Any], source: str, extra: dict[str, Any] | None) -> EncoderConfig:
    """An ALBERT config.json, checked like BERT's; group layouts bertkit cannot compute are named."""
    base = hf.config_from_hf({**data, "model_type": "bert"}, source)
    embedding = hf.config_integer(data, "embedding_size", source, minimum=1, default=128)
    groups = hf.config_integer(data, "num_hidden_groups", source, minimum=1, default=1)
    inner = hf.config_integer(data, "inner_group_num", source, minimum=1, default=1)
    if inner != 1:
        raise CheckpointError(f"{source}: inner_group_num {inner} (several different layers per group) is not "
                              "supported; bertkit computes ALBERT with one layer per group")
    if groups not in (1, base.num_layers):
        raise CheckpointError(f"{source}: num_hidden_groups {groups} with {base.num_layers} layers (layers shared "
                              "in several groups) is not supported; bertkit shares all layers (1 group) or none")
    fields = {"embedding_size": embedding, "share_layers": "all" if groups == 1 and base.num_layers > 1 else "none"}
    fields.update(hf.extra_fields(extra, source))
    try:
        return base.replace(**fields)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{source}: {err}") from None


def encoder_to_albert(state: dict[str, torch.Tensor], config: EncoderConfig, prefix: str) -> dict[str, torch.Tensor]:
    """Internal encoder state -> ALBERT names: one layer group per distinct layer (a shared layer is written
    once), and an identity projection where the model has no factorization."""
    groups = num_groups(config)
    kept = {name: tensor for name, tensor in state.items()
            if not name.startswith("blocks.") or int(name.split(".")[1]) < groups}
    if config.embedding_size is None:
        H = config.hidden_size
        kept["embeddings.project.weight"] = torch.eye(H, dtype=state["embeddings.token.weight"].dtype)
        kept["embeddings.project.bias"] = torch.zeros(H, dtype=kept["embeddings.project.weight"].dtype)
    return ALBERT_NAMES.encoder_to_hf(kept, prefix)


def split_albert(state: dict[str, torch.Tensor], config: EncoderConfig, token_head: bool,
                 source: str) -> SplitState:
    """ALBERT names -> internal ones, with each group's weights copied to every layer that runs it."""
    split = ALBERT_NAMES.split(state, token_head)
    groups = num_groups(config)
    layers = {int(name.split(".")[1]) for name in split.encoder if name.startswith("blocks.")}
    if layers and layers != set(range(groups)):
        raise CheckpointError(f"{source}: the weights hold layer groups {sorted(layers)} but config.json says "
                              f"num_hidden_groups {groups}")
    per_group = {name: tensor for name, tensor in split.encoder.items() if name.startswith("blocks.")}
    for name, tensor in per_group.items():
        _, group, rest = name.split(".", 2)
        for layer in range(config.num_layers):
            if int(group) == (layer if groups > 1 else 0):
                split.encoder[f"blocks.{layer}.{rest}"] = tensor
    if config.embedding_size is None:      # bertkit.json says unfactorized: the projection must be the identity
        weight = split.encoder.pop("embeddings.project.weight", None)
        bias = split.encoder.pop("embeddings.project.bias", None)
        H = config.hidden_size
        if weight is None or bias is None or not torch.equal(weight, torch.eye(H, dtype=weight.dtype)) \
                or bool(bias.any()):
            raise CheckpointError(f"{source}: bertkit.json says embedding_size null but "
                                  "encoder.embedding_hidden_mapping_in is not the identity; the two files disagree")
    return split
