"""Our checkpoint folder: an HF BERT folder (config.json, model.safetensors, vocab.txt, tokenizer.json) plus
bertkit.json for what HF has no key for. Loading also reads plain HF folders and Google BERT folders.

Loading checks what it reads and says what is wrong: git-lfs pointers, truncated files, shape mismatches,
missing weights, a vocabulary larger than the embedding table. Saving is atomic and durable: the folder
appears whole or not at all, an existing folder is replaced only once the new one is complete and on disk,
and what a save killed between its two renames left is put right by the next load or save
(bertkit/atomic_write.py).
"""
from __future__ import annotations

import os
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from bertkit.atomic_write import json_text, recover_folder, replace_folder, temp_folder
from bertkit.checkpoints import families, google, hf, hf_check, hf_form, sentence_transformers
from bertkit.checkpoints.bert import build_head  # noqa: F401  (kept importable from here)
from bertkit.checkpoints.json_files import META_FILE, read_json
from bertkit.checkpoints.sentence import read_sentence_pipeline, write_sentence_pipeline
from bertkit.checkpoints.weights import INDEX_FILES, INT8_WEIGHTS_FILE, WEIGHT_FILES, read_weight_file, read_weights
from bertkit.errors import BertkitWarning, CheckpointError
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.head_registry import head_keys as ordered_head_keys
from bertkit.model.precision import apply_precision, has_int8, shape_int8
from bertkit.model.sentence import SentencePipeline
from bertkit.model.xlnet import XLNetConfig, XLNetModel
from bertkit.runtime import PrecisionChoice, choose_precision
from bertkit.tokenizer import Tokenizer

FORMAT_VERSION = 1
SENTENCE_KEYS = ("encode", "whitening")    # bertkit.json entries only the sentence pipeline writes
HF_KEYS = ("hf_compatible", "transformers", "sentence_transformers")   # only save_checkpoint writes these
# The pooler of a model saved as an HF class that has none (ForMaskedLM, ForTokenClassification,
# ForQuestionAnswering): kept beside the weights, where transformers does not look, so nothing trained is lost.
POOLER_FILE = "pooler.safetensors"


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
    labels = meta.get("labels")
    if labels is not None and (not isinstance(labels, list) or not all(isinstance(n, str) for n in labels)):
        raise CheckpointError(f"{folder / META_FILE}: \"labels\" must be a list of label names (strings), got "
                              f"{str(labels)[:80]}")
    if (meta.get("quantization") or {}).get("scheme") == "dynamic-int8":
        warnings.warn(f"{folder}: written by an older `bertkit quantize` (fp32 weights + a per-tensor dynamic int8 "
                      "flag, min cosine to fp32 0.77 on real texts); it now loads as the fp32 model it holds. Run "
                      "`bertkit quantize` again for a measured int8 folder", BertkitWarning, stacklevel=2)
    model_folder = sentence_transformers.transformer_folder(folder)
    hf_config: dict[str, Any] = {}
    family = families.bert       # BERT / RoBERTa / ALBERT / bertkit's own: hf_form.py; ELECTRA, XLNet: their modules
    if (model_folder / "config.json").is_file():
        hf_config = read_json(model_folder / "config.json")
        family = families.for_model_type(hf_config.get("model_type"))
        read_config = hf_form.config_from_folder if family is families.bert else family.config_from_hf
        config = read_config(hf_config, str(model_folder / "config.json"), meta.get("encoder"))
        raw_state = read_weights(model_folder)
    elif (folder / "bert_config.json").is_file():
        config, raw_state = google.load_google_folder(folder)
    else:
        raise CheckpointError(f"{folder}: no config.json (Hugging Face / bertkit) or bert_config.json (Google "
                              "BERT) found; is this a model folder?")
    architectures = hf_config.get("architectures") or []
    token_head = any(name.endswith("ForTokenClassification") for name in architectures) or meta.get("task") == "ner"
    try:
        split = (hf_form.split_folder_state(hf_config, config, raw_state, token_head, str(model_folder))
                 if family is families.bert else family.split_state(raw_state, architectures, meta.get("task")))
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
    if getattr(config, "use_pooler", False) and "pooler.dense.weight" not in split.encoder and (model_folder / POOLER_FILE).is_file():
        split.encoder.update(read_weight_file(model_folder / POOLER_FILE))
    int8_names = sorted({name.rsplit(".", 1)[0] for name in split.encoder if name.endswith(".weight_scale")})
    try:
        shape_int8(encoder, int8_names)
    except KeyError as err:
        raise CheckpointError(f"{folder}: int8 scales for {err.args[0]!r}, which is not a Linear or Embedding "
                              "layer of the model config.json describes") from None
    _load_encoder_state(encoder, split.encoder, folder, architectures)
    heads = {}
    for key, state in split.heads.items():
        head = family.build_head(key, config, state)
        _load_strict(head, state, f"{folder}: head {key!r}")
        heads[key] = head
    tokenizer = _load_tokenizer(model_folder, config, family)
    sentence = read_sentence_pipeline(folder, meta, config, tokenizer.model_max_length if tokenizer else None)
    if split.skipped:
        warnings.warn(f"{folder}: skipped {len(split.skipped)} entries that are not model weights: "
                      f"{', '.join(split.skipped[:5])}{' ...' if len(split.skipped) > 5 else ''}", BertkitWarning, stacklevel=2)
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


def _load_encoder_state(encoder: Encoder, state: dict[str, torch.Tensor], folder: Path,
                        architectures: list[str]) -> None:
    if encoder.pooler is not None and "pooler.dense.weight" not in state:
        # Saved without a pooler: a random one, the same on every load (initializer_range, seed 0), as the HF
        # classes built without one (ForMaskedLM, ForTokenClassification, ForQuestionAnswering) have; said
        # where the folder's class would have had one.
        if not any(name in hf_form.NO_POOLER_CLASSES for name in architectures):
            warnings.warn(f"{folder}: no pooler weights; the pooler (used only by pooling='pooler') is random",
                          stacklevel=3)
        generator = torch.Generator().manual_seed(0)
        weight = torch.randn(encoder.pooler.dense.weight.shape, generator=generator) * encoder.config.initializer_range
        state = {**state, "pooler.dense.weight": weight, "pooler.dense.bias": torch.zeros(weight.shape[0])}
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
                    hf_config_extra: dict[str, Any] | None = None, sentence: SentencePipeline | None = None,
                    check: Callable[[Path], None] | None = None,
                    write_extra: Callable[[Path], None] | None = None) -> Path:
    """Write one folder that the transformers class it names (hf_form.py) loads with identical outputs, or, for
    a model no transformers class computes, one that says why in bertkit.json and that transformers refuses.
    A folder that promises a class is checked against that class's loading rules (hf_check.check_structure)
    before it replaces anything; `check(tmp)` may check more (convert compares outputs with transformers).

    hf_config_extra: more config.json keys (id2label/label2id, problem_type) for the HF head classes.
    sentence: the sentence-embedding steps to save (a writer that starts from a folder passes that folder's,
    `checkpoint.sentence`, or `.after_training()` of it when it changed the encoder); "encode" and "whitening"
    entries in `meta` are ignored, since only the pipeline writes them together with their files.
    write_extra: writes more files into the new folder before it replaces the old one (a linear layer
    saved with its encoder), so that they appear together or not at all.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    heads = heads or {}
    config = encoder.config
    family = families.for_config(config)
    if family is families.bert:    # BERT, RoBERTa, ALBERT, or a variant no transformers class computes
        hf_config, state, form = hf_form.hf_folder_contents(encoder, heads, (meta or {}).get("labels"),
                                                            (meta or {}).get("task"))
        family_meta = {"encoder": {k: getattr(config, k) for k in hf.EXTRA_FIELDS}}
    else:                          # ELECTRA, XLNet: their own modules (families.py)
        hf_config, state, family_meta, form = _family_folder(family, encoder, heads, meta)
    hf_config.update(hf_config_extra or {})
    full_meta = {"format": "bertkit", "format_version": FORMAT_VERSION, **family_meta,
                 **{k: v for k, v in (meta or {}).items() if k not in SENTENCE_KEYS + HF_KEYS + ("encoder",)}}
    # what loads the folder besides bertkit: the transformers class, or why none computes this model
    int8 = has_int8(encoder)
    loads = form.loads_in_transformers and not int8
    why_not = ("int8 weights and per-row scales (model.int8.safetensors, which transformers does not look for): "
               "bertkit.load only; `bertkit convert` writes the dequantized fp32 folder" if int8 else form.reason)
    full_meta["hf_compatible"] = loads
    full_meta["transformers"] = {"class": form.architecture} if loads else {"class": None, "why_not": why_not}

    def write(tmp: Path) -> None:
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()},
                  str(tmp / (INT8_WEIGHTS_FILE if int8 else "model.safetensors")), metadata={"format": "pt"})
        if getattr(encoder, "pooler", None) is not None and form.architecture in hf_form.NO_POOLER_CLASSES:
            save_file({f"pooler.dense.{k}": v.detach().cpu().contiguous()
                       for k, v in encoder.pooler.dense.state_dict().items()}, str(tmp / POOLER_FILE))
        if sentence is not None:
            full_meta.update(write_sentence_pipeline(tmp, sentence))
            if loads and family is families.bert:     # (held against sentence-transformers for this family)
                full_meta.update(sentence_transformers.write_modules(tmp, sentence, config.hidden_size,
                                                                     config.max_length))
        (tmp / "config.json").write_text(json_text(hf_config), encoding="utf-8")
        (tmp / META_FILE).write_text(json_text(full_meta), encoding="utf-8")
        if tokenizer is not None:
            tokenizer.save(tmp)
        if write_extra is not None:
            write_extra(tmp)
        if loads and family is families.bert:
            hf_check.check_structure(tmp)
        if check is not None:
            check(tmp)

    return save_folder(folder, write, WEIGHT_FILES + INDEX_FILES)   # never an old weight file beside the new one


def save_folder(folder: str | os.PathLike, write: Callable[[Path], None], never_carry: tuple[str, ...] = ()) -> Path:
    """Fill a temporary sibling of `folder` with `write(tmp)`, then swap it into place (atomic_write.py): the
    folder appears whole or not at all; never_carry: the old folder's files that must not join the new one.
    Every kind of model folder is saved through here."""
    folder = Path(folder)
    recover_folder(folder, never_carry)
    tmp = temp_folder(folder)
    try:
        write(tmp)
        replace_folder(tmp, folder, never_carry)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def _family_folder(family, encoder, heads: dict[str, nn.Module], meta: dict[str, Any] | None):
    """(config.json, weights, bertkit.json entries, form) of an ELECTRA or XLNet folder, from its module."""
    head_keys = ordered_head_keys(heads)
    config = encoder.config
    hf_config = family.folder_config(config, head_keys)
    state = family.state_to_hf(encoder, heads)
    hf_config.update(hf.heads_label_config(heads, (meta or {}).get("labels"), (meta or {}).get("task")))
    family_meta = family.folder_meta(config, head_keys)
    architecture = (hf_config.get("architectures") or [None])[0]
    reason = None if family_meta.pop("hf_compatible", True) and architecture else \
        f"no transformers class computes this {config.family} model"
    return hf_config, state, family_meta, hf_form.HfForm(hf_config.get("model_type"), architecture, reason)
