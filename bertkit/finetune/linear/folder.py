"""A linear model's files in a model folder; nothing in them can run code.

- bertkit.json: `task`, `labels` and a `linear` section: method (tfidf | linear-probe | hybrid), whether
  rows are pairs, and per part its analyzers, how vectors were encoded (or `logits`: K when the part reads the
  folder's fine-tuned head) and its output (softmax | identity), and the stacker's output;
- linear.safetensors: per part j `parts.<j>.weight` (F, K) float32 and `parts.<j>.bias` (K,), its TF-IDF
  blocks' `parts.<j>.tfidf.<i>.idf` (float64), for vectors `parts.<j>.vectors.mean` / `.scale`; a hybrid's
  stacker `stack.weight` / `stack.bias`;
- tfidf_vocabulary.json: {"blocks": [[term of column 0, term of column 1, ...], ...]}, one list per analyzer
  (of every part, in order).
A TF-IDF folder holds only these (and metrics.json); a linear-probe or hybrid folder is also the frozen
encoder's checkpoint folder (config.json, model.safetensors, tokenizer files), so it encodes like any other; a
hybrid over a fine-tuned model is that model's whole folder (encoder and classification head) plus these.
Loading checks every shape against the others and names the file and field that does not fit.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from bertkit.atomic_write import json_text
from bertkit.checkpoints.json_files import META_FILE, read_json
from bertkit.checkpoints.weights import check_not_pointer
from bertkit.errors import CheckpointError
from bertkit.finetune.linear.features import FeatureSpec, VectorBlock
from bertkit.finetune.linear.layer import LinearLayer
from bertkit.finetune.linear.model import LINEAR_TASKS, LinearModel, LinearPart
from bertkit.finetune.linear.tfidf import Analyzer, TfidfBlock

WEIGHTS_FILE = "linear.safetensors"
VOCABULARY_FILE = "tfidf_vocabulary.json"
METHODS = ("tfidf", "linear-probe", "hybrid")
ANALYZER_KINDS = ("word", "char_wb", "char", "jieba")


def linear_section(folder: str | Path) -> Optional[dict]:
    """bertkit.json's `linear` section when `folder` is a linear model's folder, else None."""
    meta_path = Path(folder) / META_FILE
    if not meta_path.is_file():
        return None
    meta = read_json(meta_path, expect=None)
    section = meta.get("linear") if isinstance(meta, dict) else None
    return section if isinstance(section, dict) else None


def is_tfidf_folder(path: str | Path) -> bool:
    """A folder saved by `bertkit baseline` (TF-IDF + linear, no encoder)."""
    section = linear_section(path) if Path(path).is_dir() else None
    return section is not None and section.get("method") == "tfidf"


def linear_meta(model: LinearModel, extra: Optional[dict] = None) -> dict:
    """bertkit.json's task, labels and `linear` section for `model`."""
    parts = []
    for part in model.parts:
        entry = {"analyzers": [vars(b.analyzer) for b in part.features.tfidf], "output": part.layer.output}
        if part.features.vectors is not None:
            v = part.features.vectors
            entry["vectors"] = {"pooling": v.pooling, "normalize": v.normalize, "max_length": v.max_length}
        if part.features.logits:
            entry["logits"] = part.features.logits
        parts.append(entry)
    section = {"method": model.method, "pairs": model.pairs, "parts": parts,
               "stack": None if model.stack is None else {"output": model.stack.output}, **(extra or {})}
    return {"task": model.task, "labels": list(model.label_names), "linear": section}


def write_linear_files(folder: Path, model: LinearModel) -> None:
    """linear.safetensors and (with TF-IDF blocks) tfidf_vocabulary.json into `folder` (a temporary folder
    that is swapped into place whole)."""
    tensors: dict[str, np.ndarray] = {}
    vocabularies = []
    layers = [(f"parts.{j}.", part.layer) for j, part in enumerate(model.parts)]
    layers += [("stack.", model.stack)] if model.stack is not None else []
    for prefix, layer in layers:
        tensors[prefix + "weight"] = np.ascontiguousarray(layer.weight, dtype=np.float32)
        tensors[prefix + "bias"] = np.ascontiguousarray(layer.bias, dtype=np.float64)
    for j, part in enumerate(model.parts):
        for i, block in enumerate(part.features.tfidf):
            tensors[f"parts.{j}.tfidf.{i}.idf"] = np.ascontiguousarray(block.idf, dtype=np.float64)
            terms = [""] * block.width
            for term, column in block.vocabulary.items():
                terms[column] = term
            vocabularies.append(terms)
        if part.features.vectors is not None:
            tensors[f"parts.{j}.vectors.mean"] = np.ascontiguousarray(part.features.vectors.mean, dtype=np.float64)
            tensors[f"parts.{j}.vectors.scale"] = np.ascontiguousarray(part.features.vectors.scale, dtype=np.float64)
    save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": "bertkit-linear"})
    if vocabularies:
        (folder / VOCABULARY_FILE).write_text(json_text({"blocks": vocabularies}, indent=None), encoding="utf-8")


def write_meta(folder: Path, meta: dict) -> None:
    full = {"format": "bertkit", "format_version": 1, **meta}
    (folder / META_FILE).write_text(json_text(full), encoding="utf-8")


def read_meta(folder: Path) -> dict:
    return read_json(folder / META_FILE)


def load_linear_model(folder: Path, meta: dict) -> LinearModel:
    """The linear model saved in `folder` (bertkit.json already read into `meta`), checked for consistency."""
    where = folder / META_FILE
    section = meta.get("linear")
    _check(isinstance(section, dict), where, "linear", "expected an object")
    _check(section.get("method") in METHODS, where, "linear.method", f"must be one of {', '.join(METHODS)}")
    task, labels = meta.get("task"), meta.get("labels") or []
    _check(task in LINEAR_TASKS, where, "task", f"must be one of {', '.join(LINEAR_TASKS)}")
    _check(isinstance(labels, list) and all(isinstance(n, str) for n in labels), where, "labels",
           "expected a list of label names")
    parts_meta = section.get("parts")
    _check(isinstance(parts_meta, list) and parts_meta, where, "linear.parts", "expected a non-empty list")
    weights_path = folder / WEIGHTS_FILE
    if not weights_path.is_file():
        raise CheckpointError(f"{weights_path}: missing; the folder is incomplete (save it again)")
    check_not_pointer(weights_path)
    try:
        tensors = load_file(str(weights_path))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{weights_path}: cannot read ({err}); the file is truncated or corrupt") from None
    _check_finite(weights_path, tensors)
    outputs = 1 if task == "regression" else len(labels)
    vocabularies = _vocabularies(folder, sum(len(p.get("analyzers") or []) for p in parts_meta
                                             if isinstance(p, dict)))
    parts, used = [], 0
    for j, part in enumerate(parts_meta):
        _check(isinstance(part, dict), where, f"linear.parts[{j}]", "expected an object")
        analyzers = part.get("analyzers") or []
        _check(isinstance(analyzers, list), where, f"linear.parts[{j}].analyzers", "expected a list")
        blocks = [_tfidf_block(folder, f"linear.parts[{j}].analyzers[{i}]", spec, vocabularies[used + i],
                               tensors.get(f"parts.{j}.tfidf.{i}.idf"), f"parts.{j}.tfidf.{i}.idf")
                  for i, spec in enumerate(analyzers)]
        used += len(analyzers)
        logits = part.get("logits", 0)
        _check(isinstance(logits, int) and logits in (0, outputs), where, f"linear.parts[{j}].logits",
               f"must be 0 or the model's {outputs} labels (the fine-tuned head's outputs)")
        features = FeatureSpec(blocks, bool(section.get("pairs", False)),
                               _vector_block(weights_path, f"parts.{j}.", part.get("vectors"), tensors), logits)
        layer = _layer(weights_path, f"parts.{j}.", part.get("output"), tensors, outputs)
        _check(sum(features.widths()) == layer.weight.shape[0], weights_path, f"parts.{j}.weight",
               f"{layer.weight.shape[0]} rows, but the saved features have {sum(features.widths())} columns")
        parts.append(LinearPart(features, layer))
    stack = None
    if section.get("stack") is not None:
        _check(isinstance(section["stack"], dict), where, "linear.stack", "expected an object or null")
        stack = _layer(weights_path, "stack.", section["stack"].get("output"), tensors, outputs)
        _check(stack.weight.shape[0] == outputs * len(parts), weights_path, "stack.weight",
               f"{stack.weight.shape[0]} rows, but {len(parts)} parts give {outputs * len(parts)} inputs")
    return LinearModel(section["method"], task, list(labels), bool(section.get("pairs", False)), parts, stack)


def _layer(path: Path, prefix: str, output, tensors: dict, outputs: int) -> LinearLayer:
    _check(output in ("softmax", "identity"), path.parent / META_FILE, prefix + "output",
           "must be softmax or identity")
    weight, bias = tensors.get(prefix + "weight"), tensors.get(prefix + "bias")
    _check(weight is not None and bias is not None, path, prefix + "weight", "missing tensor (weight and bias)")
    _check(weight.ndim == 2 and weight.shape[1] == outputs and bias.shape == (outputs,), path, prefix + "weight",
           f"shapes {tuple(weight.shape)} and {tuple(bias.shape)} do not give the model's {outputs} outputs")
    return LinearLayer(weight, bias.astype(np.float64), output)


def _vocabularies(folder: Path, count: int) -> list:
    if count == 0:
        return []
    path = folder / VOCABULARY_FILE
    try:
        blocks = json.loads(path.read_text(encoding="utf-8"))["blocks"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path}: cannot read the vocabulary ({type(err).__name__}: {err})") from None
    _check(isinstance(blocks, list) and len(blocks) == count, path, "blocks",
           f"expected {count} term lists, one per analyzer in {META_FILE}")
    return blocks


def _tfidf_block(folder: Path, field: str, spec, terms, idf, idf_name: str) -> TfidfBlock:
    where, path = folder / META_FILE, folder / VOCABULARY_FILE
    _check(isinstance(spec, dict) and spec.get("kind") in ANALYZER_KINDS, where, field,
           f"kind must be one of {', '.join(ANALYZER_KINDS)}")
    low, high = spec.get("ngram_min"), spec.get("ngram_max")
    _check(isinstance(low, int) and isinstance(high, int) and 1 <= low <= high <= 16, where, field,
           "ngram_min and ngram_max must be integers with 1 <= min <= max <= 16")
    _check(isinstance(terms, list) and all(isinstance(t, str) for t in terms), path, "blocks",
           "expected lists of strings")
    _check(idf is not None and idf.shape == (len(terms),), folder / WEIGHTS_FILE, idf_name,
           f"expected {len(terms)} values, one per term of its {VOCABULARY_FILE} block")
    vocabulary = {term: column for column, term in enumerate(terms)}
    _check(len(vocabulary) == len(terms), path, "blocks", "a block has repeated terms")
    return TfidfBlock(Analyzer(spec["kind"], low, high), vocabulary, idf.astype(np.float64))


def _vector_block(path: Path, prefix: str, vectors, tensors: dict) -> Optional[VectorBlock]:
    if vectors is None:
        return None
    _check(isinstance(vectors, dict) and isinstance(vectors.get("pooling"), str), path.parent / META_FILE,
           prefix + "vectors", "expected {pooling, normalize, max_length}")
    mean, scale = tensors.get(prefix + "vectors.mean"), tensors.get(prefix + "vectors.scale")
    _check(mean is not None and scale is not None and mean.shape == scale.shape and mean.ndim == 1, path,
           prefix + "vectors.mean", "vectors.mean and vectors.scale must be two vectors of one length")
    max_length = vectors.get("max_length")
    _check(max_length is None or (isinstance(max_length, int) and max_length > 0), path.parent / META_FILE,
           prefix + "vectors.max_length", "must be a positive integer or null")
    return VectorBlock(vectors["pooling"], bool(vectors.get("normalize")), max_length, mean.astype(np.float64),
                       scale.astype(np.float64))


def _check_finite(path: Path, tensors: dict[str, Any]) -> None:
    for name, value in tensors.items():
        if not np.isfinite(value).all():
            raise CheckpointError(f"{path}: tensor {name} holds NaN or infinite values")


def _check(condition: bool, path: Path, field: str, message: str) -> None:
    if not condition:
        raise CheckpointError(f"{path}: {field}: {message}")
