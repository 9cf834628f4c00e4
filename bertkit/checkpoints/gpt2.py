"""Hugging Face GPT-2 folders, both ways: config.json keys and `transformer.*` parameter names.

GPT-2 stores its projections as Conv1D, whose weight is (in, out), the transpose of nn.Linear's; the
LM head is tied to wte and is not written (transformers re-ties it on load). The causal-mask buffers
older transformers versions saved (`attn.bias`, `attn.masked_bias`) are ignored on load.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple, Optional

import torch

from bertkit.atomic_write import write_file, write_json
from bertkit.checkpoints.weights import read_weights
from bertkit.errors import CheckpointError
from bertkit.model.causal_lm import CausalLM, gpt_config
from bertkit.model.config import EncoderConfig
from bertkit.tokenizer.bpe import BPETokenizer

_ACTIVATION_TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
_ACTIVATION_FROM_HF = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                       "gelu": "gelu", "relu": "relu"}
# config.json flags of GPT-2 variants the encoder does not implement: value GPT-2 itself uses.
_UNSUPPORTED_FLAGS = {"scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
                      "add_cross_attention": False}
_IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")


class GPT2Checkpoint(NamedTuple):
    model: CausalLM
    tokenizer: Optional[BPETokenizer]     # None when the folder has no tokenizer files
    config: EncoderConfig


# --- config.json ------------------------------------------------------------------------------------------

def config_to_gpt2(config: EncoderConfig, eos_id: int) -> dict[str, Any]:
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": config.vocab_size, "n_embd": config.hidden_size, "n_layer": config.num_layers,
        "n_head": config.num_heads, "n_inner": config.intermediate_size, "n_positions": config.max_position_embeddings,
        "n_ctx": config.max_position_embeddings, "activation_function": _ACTIVATION_TO_HF[config.activation],
        "resid_pdrop": config.hidden_dropout, "embd_pdrop": config.hidden_dropout,
        "attn_pdrop": config.attention_dropout, "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_range": config.initializer_range, "bos_token_id": eos_id, "eos_token_id": eos_id,
        "scale_attn_weights": True, "tie_word_embeddings": True, "use_cache": True,
    }


def config_from_gpt2(data: dict[str, Any], source: str) -> EncoderConfig:
    if data.get("model_type", "gpt2") != "gpt2":
        raise CheckpointError(f"{source}: model_type {data.get('model_type')!r} is not gpt2")
    for key, expected in _UNSUPPORTED_FLAGS.items():
        if data.get(key, expected) != expected:
            raise CheckpointError(f"{source}: {key}={data[key]} is not supported (GPT-2 uses {expected})")
    if not data.get("scale_attn_weights", True):
        raise CheckpointError(f"{source}: scale_attn_weights=false is not supported")
    act = data.get("activation_function", "gelu_new")
    if act not in _ACTIVATION_FROM_HF:
        raise CheckpointError(f"{source}: activation_function {act!r} is not supported; use one of "
                              f"{', '.join(_ACTIVATION_FROM_HF)}")
    try:
        hidden = int(data["n_embd"])
        return gpt_config(
            vocab_size=int(data["vocab_size"]), hidden_size=hidden, num_layers=int(data["n_layer"]),
            num_heads=int(data["n_head"]), max_position_embeddings=int(data.get("n_positions", 1024)),
            intermediate_size=int(data.get("n_inner") or 4 * hidden), activation=_ACTIVATION_FROM_HF[act],
            layer_norm_eps=float(data.get("layer_norm_epsilon", 1e-5)),
            hidden_dropout=float(data.get("resid_pdrop", 0.1)), attention_dropout=float(data.get("attn_pdrop", 0.1)),
            initializer_range=float(data.get("initializer_range", 0.02)))
    except KeyError as err:
        raise CheckpointError(f"{source}: config.json lacks the GPT-2 key {err.args[0]!r}") from None
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{source}: invalid GPT-2 config ({err})") from None


# --- parameter names --------------------------------------------------------------------------------------

def _name_pairs(config: EncoderConfig) -> list[tuple[str, str, bool]]:
    """(bertkit name, HF name, transposed) for every parameter; HF names without the `transformer.` prefix."""
    pairs = [("embeddings.token.weight", "wte.weight", False), ("embeddings.position.weight", "wpe.weight", False),
             ("final_norm.weight", "ln_f.weight", False), ("final_norm.bias", "ln_f.bias", False)]
    for i in range(config.num_layers):
        ours, theirs = f"blocks.{i}.", f"h.{i}."
        for mine, hf, transposed in [("attention_norm", "ln_1", False), ("attention.qkv", "attn.c_attn", True),
                                     ("attention.out", "attn.c_proj", True), ("ffn_norm", "ln_2", False),
                                     ("ffn.up", "mlp.c_fc", True), ("ffn.down", "mlp.c_proj", True)]:
            pairs.append((f"{ours}{mine}.weight", f"{theirs}{hf}.weight", transposed))
            pairs.append((f"{ours}{mine}.bias", f"{theirs}{hf}.bias", False))
    return pairs


def state_to_gpt2(model: CausalLM) -> dict[str, torch.Tensor]:
    ours = model.encoder.state_dict()
    out = {}
    for mine, hf, transposed in _name_pairs(model.config):
        tensor = ours[mine]
        out[f"transformer.{hf}"] = (tensor.t() if transposed else tensor).contiguous().clone()
    return out


def state_from_gpt2(state: dict[str, torch.Tensor], config: EncoderConfig, source: str) -> dict[str, torch.Tensor]:
    # GPT2LMHeadModel writes `transformer.h.0...`, GPT2Model `h.0...`: accept both.
    plain = {(k[len("transformer."):] if k.startswith("transformer.") else k): v for k, v in state.items()}
    out = {}
    for mine, hf, transposed in _name_pairs(config):
        if hf not in plain:
            raise CheckpointError(f"{source}: weight transformer.{hf} is missing; the folder is not a complete "
                                  "GPT-2 checkpoint")
        tensor = plain.pop(hf)
        out[mine] = tensor.t() if transposed else tensor
    head = plain.pop("lm_head.weight", None)
    if head is not None and not torch.equal(head, out["embeddings.token.weight"]):
        raise CheckpointError(f"{source}: lm_head.weight differs from transformer.wte.weight; bertkit's GPT "
                              "ties them (as GPT-2 does), so an untied head cannot be loaded")
    leftover = [k for k in plain if not k.endswith(_IGNORED_SUFFIXES)]
    if leftover:
        raise CheckpointError(f"{source}: unexpected weights {', '.join(sorted(leftover)[:5])}; not a GPT-2 model")
    return out


# --- folders ----------------------------------------------------------------------------------------------

def is_gpt2_folder(folder: str | Path) -> bool:
    path = Path(folder) / "config.json"
    if not path.is_file():
        return False
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("model_type") == "gpt2"
    except json.JSONDecodeError:
        return False


def load_gpt2(folder: str | Path) -> GPT2Checkpoint:
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{folder}: no config.json; is this a GPT-2 model folder?")
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{config_path}: invalid JSON ({err})") from None
    config = config_from_gpt2(data, str(config_path))
    state = state_from_gpt2(read_weights(folder), config, str(folder))
    model = CausalLM(config)
    try:
        model.encoder.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{folder}: weights do not fit config.json ({err})") from None
    model.eval()
    has_tokenizer = any((folder / name).is_file() for name in ("tokenizer.json", "vocab.json"))
    tokenizer = BPETokenizer.from_folder(folder) if has_tokenizer else None
    return GPT2Checkpoint(model, tokenizer, config)


def save_gpt2(folder: str | Path, model: CausalLM, tokenizer: Optional[BPETokenizer] = None) -> None:
    """Write an HF GPT-2 folder (config.json, model.safetensors, tokenizer files) that
    transformers.GPT2LMHeadModel loads. Files are written under temporary names and renamed."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    eos = tokenizer.eos_id if tokenizer is not None else model.config.vocab_size - 1
    if tokenizer is not None and tokenizer.vocab_size != model.config.vocab_size:
        raise CheckpointError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model "
                              f"{model.config.vocab_size}; they do not belong together")
    tensors = {k: v.detach().cpu() for k, v in state_to_gpt2(model).items()}
    write_file(folder / "model.safetensors", lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"}))
    write_json(folder / "config.json", config_to_gpt2(model.config, eos))
    if tokenizer is not None:
        tokenizer.save(folder)
