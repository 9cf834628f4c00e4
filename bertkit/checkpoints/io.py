"""Our checkpoint folder: an HF BERT folder (config.json, model.safetensors, vocab.txt, tokenizer.json) plus
bertkit.json for what HF has no key for. Loading also reads plain HF folders and Google BERT folders.

Loading checks what it reads and says what is wrong: git-lfs pointers, truncated files, shape mismatches,
missing weights, a vocabulary larger than the embedding table. Saving is atomic and durable: the folder
appears whole or not at all, an existing folder is replaced only once the new one is complete and on disk,
and what a save killed between its two renames left is put right by the next load or save
(bertkit/atomic_write.py).
"""
from __future__ import annotations

import json
import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertkit.atomic_write import recover_folder, replace_folder, temp_folder
from bertkit.checkpoints import families, google, hf, sentence_transformers
from bertkit.checkpoints.bert import build_head
from bertkit.checkpoints.json_files import read_json
from bertkit.checkpoints.sentence import read_sentence_pipeline, write_sentence_pipeline
from bertkit.checkpoints.weights import INDEX_FILES, INT8_WEIGHTS_FILE, WEIGHT_FILES, read_weights
from bertkit.errors import CheckpointError
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.precision import apply_precision, has_int8, shape_int8
from bertkit.model.sentence import SentencePipeline
from bertkit.model.xlnet import XLNetConfig, XLNetModel
from bertkit.runtime import PrecisionChoice, choose_precision
from bertkit.tokenizer import Tokenizer

META_FILE = "bertkit.json"
FORMAT_VERSION = 1
SENTENCE_KEYS = ("encode", "whitening")
FAMILY_KEYS = ("encoder", "hf_compatible")  # bertkit.json entries the folder family writes (families.py)    # bertkit.json entries only the sentence pipeline writes


@dataclass
class Checkpoint:
    config: EncoderConfig | XLNetConfig
    encoder: Encoder | XLNetModel           # the same forward signature and output fields
    tokenizer: Tokenizer | None             # XLNet folders: tokenizer.xlnet.XLNetTokenizer
    heads: dict[str, nn.Module] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)     # bertkit.json: task, labels, pooling, whitening, ...
    skipped: list[str] = field(default_factory=list)        # names in the weight file that are not model weights
    path: Path | None = None
    sentence: SentencePipeline = field(default_factory=SentencePipeline)   # how it makes sentence vectors
    precision: PrecisionChoice | None = None                # what the weights were put into at load


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu",
                    precision: str | None = None) -> Checkpoint:
    """precision: fp32 | bf16 | int8 | auto (runtime.choose_precision); None keeps what the folder stores (fp32,
    or int8 for a folder written by `bertkit quantize`)."""
    folder = Path(path)
    recover_folder(folder, WEIGHT_FILES + INDEX_FILES)
    if not folder.exists():
        raise CheckpointError(f"model folder {folder} does not exist")
    if not folder.is_dir():
        raise CheckpointError(f"{folder} is a file; pass the model folder that holds config.json and the weights")
    meta = read_json(folder / META_FILE) if (folder / META_FILE).is_file() else {}
    if (meta.get("quantization") or {}).get("scheme") == "dynamic-int8":
        warnings.warn(f"{folder}: written by an older `bertkit quantize` (fp32 weights + a per-tensor dynamic int8 "
                      "flag, min cosine to fp32 0.77 on real texts); it now loads as the fp32 model it holds. Run "
                      "`bertkit quantize` again for a measured int8 folder", stacklevel=2)
    model_folder = sentence_transformers.transformer_folder(folder)
    hf_config: dict[str, Any] = {}
    family = families.bert
    if (model_folder / "config.json").is_file():
        hf_config = read_json(model_folder / "config.json")
        family = families.for_model_type(hf_config.get("model_type"))      # BERT / RoBERTa, ELECTRA or XLNet
        config = family.config_from_hf(hf_config, str(model_folder / "config.json"), meta.get("encoder"))
        raw_state = read_weights(model_folder)
    elif (folder / "bert_config.json").is_file():
        config, raw_state = google.load_google_folder(folder)
    else:
        raise CheckpointError(f"{folder}: no config.json (Hugging Face / bertkit) or bert_config.json (Google "
                              "BERT) found; is this a model folder?")
    architectures = hf_config.get("architectures") or []
    try:
        split = family.split_state(raw_state, architectures, meta.get("task"))
    except CheckpointError as err:
        raise CheckpointError(f"{model_folder}: {err}") from None
    family.check_sizes(config, split.encoder, str(model_folder / "config.json"))
    if hf_config and not split.encoder and split.skipped:      # e.g. ELECTRA weights under model_type 'bert'
        raise CheckpointError(f"{model_folder / 'config.json'}: model_type {hf_config.get('model_type')!r} reads none "
                              f"of the weights (they hold names like {split.skipped[0]!r}); config.json does not "
                              "describe these weights")
    encoder = family.new_encoder(config)
    if hf_config.get("pruned_heads"):
        encoder.shape_pruned(_pruned_heads(hf_config["pruned_heads"], config, model_folder / "config.json"))
    int8_names = sorted({name.rsplit(".", 1)[0] for name in split.encoder if name.endswith(".weight_scale")})
    try:
        shape_int8(encoder, int8_names)
    except KeyError as err:
        raise CheckpointError(f"{folder}: int8 scales for {err.args[0]!r}, which is not a Linear or Embedding "
                              "layer of the model config.json describes") from None
    _load_encoder_state(encoder, split.encoder, folder)
    heads = {}
    for key, state in split.heads.items():
        head = family.build_head(key, config, state)
        _load_strict(head, state, f"{folder}: head {key!r}")
        heads[key] = head
    tokenizer = _load_tokenizer(model_folder, config, family)
    sentence = read_sentence_pipeline(folder, meta, config, tokenizer.model_max_length if tokenizer else None)
    if split.skipped:
        warnings.warn(f"{folder}: skipped {len(split.skipped)} entries that are not model weights: "
                      f"{', '.join(split.skipped[:5])}{' ...' if len(split.skipped) > 5 else ''}", stacklevel=2)
    device = torch.device(device)
    encoder.to(device).eval()
    for module in (*heads.values(), *sentence.dense, sentence.whitening):
        if module is not None:
            module.to(device).eval()
    choice = choose_precision(precision, device, "int8" if int8_names else "fp32")
    if choice.precision != "fp32" or int8_names:
        apply_precision(encoder, heads, choice)    # the sentence steps (dense, whitening) stay in fp32
    return Checkpoint(config, encoder, tokenizer, heads, meta, split.skipped, folder, sentence, choice)


def _pruned_heads(record: Any, config: EncoderConfig, source: Path) -> dict[int, list[int]]:
    """config.json "pruned_heads": {"layer": [head, ...]}, checked against the layer and head counts."""
    try:
        removed = {int(layer): sorted({int(h) for h in heads}) for layer, heads in record.items()}
    except (AttributeError, TypeError, ValueError):
        raise CheckpointError(f"{source}: pruned_heads must map layer numbers to lists of head numbers") from None
    for layer, heads in removed.items():
        if not 0 <= layer < config.num_layers or any(not 0 <= h < config.num_heads for h in heads) \
                or len(heads) >= config.num_heads:
            raise CheckpointError(f"{source}: pruned_heads {layer}: {heads} does not fit {config.num_layers} "
                                  f"layers of {config.num_heads} heads (a layer keeps at least one head)")
    return removed


def _load_encoder_state(encoder: Encoder, state: dict[str, torch.Tensor], folder: Path) -> None:
    expected = encoder.state_dict()
    if encoder.pooler is not None and "pooler.dense.weight" not in state:
        # Checkpoints saved without a pooler (e.g. from BertForMaskedLM): keep a random one, say so.
        warnings.warn(f"{folder}: no pooler weights; the pooler (used only by pooling='pooler') is random",
                      stacklevel=3)
        state = {**state, **{k: v for k, v in expected.items() if k.startswith("pooler.")}}
    # With shared layers every layer's copy is in the file (HF has no sharing); loading them in order
    # writes the same values into the one shared tensor.
    _load_strict(encoder, state, str(folder))


def _load_strict(module: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing:
        raise CheckpointError(f"{where}: missing weights {', '.join(missing[:6])}"
                              f"{f' and {len(missing) - 6} more' if len(missing) > 6 else ''}")
    if unexpected:
        raise CheckpointError(f"{where}: unexpected weights {', '.join(unexpected[:6])}; the config.json does "
                              "not describe these weights")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"{where}: {name} has shape {tuple(tensor.shape)} in the file but "
                                  f"{tuple(expected[name].shape)} in the model its config.json describes")
    module.load_state_dict({k: v.to(expected[k].dtype) for k, v in state.items()})


def _load_tokenizer(folder: Path, config: EncoderConfig | XLNetConfig, family) -> Tokenizer | None:
    tokenizer = family.load_tokenizer(folder)
    if tokenizer is None:
        return None
    if tokenizer.vocab_size > config.vocab_size:
        raise CheckpointError(f"{folder}: the tokenizer has {tokenizer.vocab_size} tokens but the model's "
                              f"embedding table only {config.vocab_size}; vocabulary and weights do not match")
    return tokenizer


# --- saving ------------------------------------------------------------------------------------------------

def save_checkpoint(folder: str | os.PathLike, encoder: Encoder, tokenizer: Tokenizer | None,
                    heads: dict[str, nn.Module] | None = None, meta: dict[str, Any] | None = None,
                    hf_config_extra: dict[str, Any] | None = None, sentence: SentencePipeline | None = None) -> Path:
    """Write one folder that `transformers.AutoModel.from_pretrained` loads with identical outputs.

    hf_config_extra: more config.json keys (id2label/label2id, problem_type) for the HF head classes.
    sentence: the sentence-embedding steps to save (a writer that starts from a folder passes that folder's,
    `checkpoint.sentence`, or `.after_training()` of it when it changed the encoder); "encode" and "whitening"
    entries in `meta` are ignored, since only the pipeline writes them together with their files.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    heads = heads or {}
    config = encoder.config
    family = families.for_config(config)
    unknown = sorted(set(heads) - set(families.HEAD_ORDER))
    if unknown:
        raise CheckpointError(f"unknown head {unknown[0]!r}; heads are {', '.join(families.HEAD_ORDER)}")
    head_keys = tuple(sorted(heads, key=families.HEAD_ORDER.index))
    hf_config = family.folder_config(config, head_keys)
    state = family.state_to_hf(encoder, heads)
    for key in ("classifier", "token_classifier"):
        if key in heads:
            hf_config.update(hf.label_config(heads[key].num_labels, (meta or {}).get("labels"),
                                             (meta or {}).get("task")))
    pruned = encoder.pruned_heads() if isinstance(encoder, Encoder) else {}
    if pruned:
        hf_config["pruned_heads"] = {str(layer): heads for layer, heads in pruned.items()}
    hf_config.update(hf_config_extra or {})
    # the family's own entries ("encoder", "hf_compatible") describe this encoder, not the folder it came from
    full_meta = {"format": "bertkit", "format_version": FORMAT_VERSION,
                 **{k: v for k, v in (meta or {}).items() if k not in SENTENCE_KEYS + FAMILY_KEYS},
                 **family.folder_meta(config, head_keys)}

    int8 = has_int8(encoder)
    if int8:
        full_meta["hf_compatible"] = False   # int8 values and scales: bertkit.load only

    recover_folder(folder, WEIGHT_FILES + INDEX_FILES)
    tmp = temp_folder(folder)
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()},
                  str(tmp / (INT8_WEIGHTS_FILE if int8 else "model.safetensors")), metadata={"format": "pt"})
        if sentence is not None:
            full_meta.update(write_sentence_pipeline(tmp, sentence))
        (tmp / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n", encoding="utf-8")
        (tmp / META_FILE).write_text(json.dumps(full_meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if tokenizer is not None:
            tokenizer.save(tmp)
        replace_folder(tmp, folder, WEIGHT_FILES + INDEX_FILES)   # never an old weight file beside the new one
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder
