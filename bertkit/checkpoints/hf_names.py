"""Parameter names on disk, both ways: internal encoder and head names <-> one HF architecture family's.

Internally the encoder keeps one fused QKV projection and short names (`blocks.0.attention.qkv.weight`); on
disk a folder uses the names of the transformers class that loads it (`bert.encoder.layer.0.attention.self.
query.weight`). A family's `Names` lists (HF template, internal template) pairs, where {i} is a layer index
and {p} weight or bias (or weight_scale: the per-row scales of an int8 folder's weights, bertkit.model.int8),
the template of its three query/key/value matrices, and its heads' names. BERT and
RoBERTa are here; ALBERT's table is in albert.py.
"""
from __future__ import annotations

import re

import torch

from bertkit.errors import CheckpointError

_PARAMETER = r"(?P<p>weight|bias|weight_scale)"
_BASE_PREFIXES = ("bert.", "roberta.", "albert.", "model.")
# Buffers and tied weights the model re-derives: not loaded, not reported.
_DERIVED = re.compile(r"(^|\.)(position_ids|token_type_ids)$"
                      r"|^(cls\.predictions|lm_head|predictions)\.decoder\.(weight|bias)$")
# The tied MLM decoder weight per family: stored so that transformers needs no re-tying to be exact.
TIED_DECODER = {"bert": "cls.predictions.decoder.weight", "roberta": "lm_head.decoder.weight",
                "albert": "predictions.decoder.weight"}


def _template_regex(template: str) -> re.Pattern:
    pattern = (re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{p\}", _PARAMETER)
               .replace(r"\{part\}", r"(?P<part>query|key|value)"))
    return re.compile(pattern)


def _rename(name: str, table) -> str | None:
    for pattern, template in table:
        match = pattern.fullmatch(name)
        if match:
            return template.format(**match.groupdict())
    return None


def _legacy_layer_norm(name: str) -> str:
    """Old TF-converted checkpoints call LayerNorm parameters gamma/beta."""
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))


class SplitState:
    """An HF state dict sorted into encoder weights, head weights and what was skipped."""

    def __init__(self):
        self.encoder: dict[str, torch.Tensor] = {}
        self.heads: dict[str, dict[str, torch.Tensor]] = {}
        self.skipped: list[str] = []


class Names:
    """One family's names. heads: our head key -> [(HF name, name inside the head module)], as written;
    also_read: more head names accepted when reading (another family's, for folders older bertkit wrote)."""

    def __init__(self, encoder: list[tuple[str, str]], qkv: str, heads: dict[str, list[tuple[str, str]]],
                 also_read: dict[str, list[tuple[str, str]]] | None = None):
        self.encoder, self.qkv, self.heads = encoder, qkv, heads
        self._from_hf = [(_template_regex(hf), internal) for hf, internal in encoder]
        self._to_hf = [(_template_regex(internal), hf) for hf, internal in encoder]
        self._qkv = _template_regex(qkv)
        self._read_heads = {**heads}
        for key, names in (also_read or {}).items():
            self._read_heads[key] = self._read_heads.get(key, []) + names

    def encoder_to_hf(self, state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
        """Internal encoder state dict -> HF names (a copy per layer even where layers share weights)."""
        out: dict[str, torch.Tensor] = {}
        for name, tensor in state.items():
            match = re.fullmatch(r"blocks\.(\d+)\.attention\.qkv\.(weight|bias|weight_scale)", name)
            if match:
                layer, kind = match.groups()
                for part, chunk in zip(("query", "key", "value"), tensor.chunk(3, dim=0)):
                    out[prefix + self.qkv.format(i=layer, part=part, p=kind)] = chunk.clone()
                continue
            hf_name = _rename(name, self._to_hf)
            if hf_name is None:
                raise KeyError(f"no HF name for encoder parameter {name}")
            out[prefix + hf_name] = tensor.clone()
        return out

    def heads_to_hf(self, heads: dict[str, dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {hf_name: state[internal].contiguous()
                for key, state in heads.items() for hf_name, internal in self.heads[key]}

    def split(self, state: dict[str, torch.Tensor], token_head: bool, roberta_classifier: bool = True) -> SplitState:
        """HF names -> internal encoder names + head states. `token_head` says whether `classifier.*` belongs
        to token classification (ForTokenClassification) rather than sequence classification; roberta_classifier:
        read RoBERTa's classifier.dense / out_proj as pooler + classifier (not for ELECTRA's MLP head)."""
        result = SplitState()
        qkv: dict[tuple[str, str], dict[str, torch.Tensor]] = {}
        head_lookup = {hf: (key, internal) for key, names in self._read_heads.items() for hf, internal in names
                       if key != ("classifier" if token_head else "token_classifier")}
        for raw_name, tensor in (_roberta_classifier_from_hf(state) if roberta_classifier else state).items():
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
            match = self._qkv.fullmatch(name)
            if match:
                qkv.setdefault((match["i"], match["p"]), {})[match["part"]] = tensor
                continue
            internal = _rename(name, self._from_hf)
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


_LINEAR = [("{}.weight", "linear.weight"), ("{}.bias", "linear.bias")]


def linear_names(hf_module: str) -> list[tuple[str, str]]:
    return [(hf.format(hf_module), internal) for hf, internal in _LINEAR]


BERT_HEADS: dict[str, list[tuple[str, str]]] = {
    "classifier": linear_names("classifier"),
    "token_classifier": linear_names("classifier"),
    "qa": linear_names("qa_outputs"),
    "mlm": [("cls.predictions.transform.dense.weight", "dense.weight"),
            ("cls.predictions.transform.dense.bias", "dense.bias"),
            ("cls.predictions.transform.LayerNorm.weight", "norm.weight"),
            ("cls.predictions.transform.LayerNorm.bias", "norm.bias"),
            ("cls.predictions.bias", "bias")],
    "pair": linear_names("cls.seq_relationship"),
}
# RobertaForMaskedLM's lm_head is BERT's transform + decoder under other names. RobertaForSequenceClassification's
# classifier.dense + tanh + classifier.out_proj over [CLS] is, in eval mode, exactly BERT's pooler + classifier:
# classifier.dense is the encoder's pooler on disk (see roberta_classifier_to_hf).
ROBERTA_HEADS = {**BERT_HEADS, "mlm": [("lm_head.dense.weight", "dense.weight"), ("lm_head.dense.bias", "dense.bias"),
                                        ("lm_head.layer_norm.weight", "norm.weight"),
                                        ("lm_head.layer_norm.bias", "norm.bias"), ("lm_head.bias", "bias")]}

# the embeddings, named alike by BERT, RoBERTa and ALBERT (whose factorization projects them to hidden_size)
EMBEDDING_NAMES = [
    ("embeddings.word_embeddings.{p}", "embeddings.token.{p}"),
    ("embeddings.position_embeddings.{p}", "embeddings.position.{p}"),
    ("embeddings.token_type_embeddings.{p}", "embeddings.segment.{p}"),
    ("embeddings.LayerNorm.{p}", "embeddings.norm.{p}"),
    ("encoder.embedding_hidden_mapping_in.{p}", "embeddings.project.{p}"),
]

BERT_NAMES = Names(
    encoder=[
        # (embedding_hidden_mapping_in: factorized embeddings in a folder no transformers class loads, model_type
        # "bertkit")
        *EMBEDDING_NAMES,
        ("encoder.layer.{i}.attention.output.dense.{p}", "blocks.{i}.attention.out.{p}"),
        ("encoder.layer.{i}.attention.output.LayerNorm.{p}", "blocks.{i}.attention_norm.{p}"),
        ("encoder.layer.{i}.intermediate.dense.{p}", "blocks.{i}.ffn.up.{p}"),
        ("encoder.layer.{i}.output.dense.{p}", "blocks.{i}.ffn.down.{p}"),
        ("encoder.layer.{i}.output.LayerNorm.{p}", "blocks.{i}.ffn_norm.{p}"),
        ("encoder.final_layer_norm.{p}", "final_norm.{p}"),   # pre-LN only: in folders no transformers class loads
        ("pooler.dense.{p}", "pooler.dense.{p}"),
    ],
    qkv="encoder.layer.{i}.attention.self.{part}.{p}",
    heads=BERT_HEADS,
    also_read={"mlm": ROBERTA_HEADS["mlm"]},
)
ROBERTA_NAMES = Names(BERT_NAMES.encoder, BERT_NAMES.qkv, ROBERTA_HEADS)


def roberta_classifier_to_hf(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """RobertaForSequenceClassification names: the pooler becomes classifier.dense, the linear classifier.out_proj."""
    out = {}
    for name, tensor in state.items():
        if name.startswith(prefix + "pooler.dense."):
            name = "classifier.dense." + name.rsplit(".", 1)[1]
        elif name.startswith("classifier."):
            name = "classifier.out_proj." + name.rsplit(".", 1)[1]
        out[name] = tensor
    return out


def _roberta_classifier_from_hf(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The reverse of roberta_classifier_to_hf, for folders holding classifier.out_proj."""
    if "classifier.out_proj.weight" not in state:
        return state
    if any(".pooler." in name or name.startswith("pooler.") for name in state):
        raise CheckpointError("the weights hold both a pooler and a RoBERTa classifier.dense; one of them would be "
                              "ignored")
    out = {}
    for name, tensor in state.items():
        if name.startswith("classifier.dense."):
            name = "pooler.dense." + name.rsplit(".", 1)[1]
        elif name.startswith("classifier.out_proj."):
            name = "classifier." + name.rsplit(".", 1)[1]
        out[name] = tensor
    return out
