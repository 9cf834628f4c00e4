"""A model folder's sentence-embedding steps (model/sentence.py), on disk.

bertkit.json "encode" holds the settings {"pooling", "layers", "normalize", "max_length", "dense": [...]}; the
dense layers' weights are in dense.safetensors and a fitted whitening in whitening.safetensors, described under
bertkit.json "whitening". A sentence-transformers folder's modules.json is read through its adapter when the
folder has no bertkit.json "encode". Every writer passes the pipeline it means to keep to save_checkpoint, which
writes all of it; nothing about sentence vectors travels in loose metadata.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from bertkit.atomic_write import write_file, write_json
from bertkit.checkpoints import sentence_transformers
from bertkit.checkpoints.json_files import META_FILE, read_json
from bertkit.errors import CheckpointError
from bertkit.folder_names import member
from bertkit.model.config import EncoderConfig
from bertkit.model.pooling import POOLINGS, parse_layers
from bertkit.model.sentence import DENSE_ACTIVATIONS, Dense, SentenceConfig, SentencePipeline, Whitening

WHITENING_FILE = "whitening.safetensors"
DENSE_FILE = "dense.safetensors"


def read_sentence_pipeline(folder: Path, meta: dict[str, Any], config: EncoderConfig,
                           tokenizer_max_length: Optional[int] = None) -> SentencePipeline:
    """The folder's steps: bertkit.json "encode" over a sentence-transformers folder's modules, else defaults."""
    limit = config.max_length
    settings = sentence_transformers.read_sentence_settings(folder, limit, tokenizer_max_length) or {}
    saved = meta.get("encode") or {}
    if not isinstance(saved, dict):
        raise CheckpointError(f"{folder / META_FILE}: \"encode\" must be an object")
    settings.update(saved)
    where = f"{folder / META_FILE}: encode"
    sentence = SentenceConfig(pooling=_choice(settings, "pooling", POOLINGS[:-1], "mean", where),
                              layers=_layers(settings, where),
                              normalize=_flag(settings, "normalize", where),
                              max_length=_length(settings.get("max_length"), limit, where))
    dense = settings.get("dense") or []
    if not isinstance(dense, list):
        raise CheckpointError(f"{where}.dense must be a list of dense layers")
    if dense and not isinstance(dense[0], Dense):
        dense = _read_dense(folder, dense)
    pipeline = SentencePipeline(sentence, list(dense), _read_whitening(folder, meta))
    _check_widths(folder, pipeline, config)
    return pipeline


def _choice(settings: dict, key: str, allowed, default: str, where: str) -> str:
    value = settings.get(key, default)
    if value not in allowed:
        raise CheckpointError(f"{where}.{key} {value!r} is not one of {', '.join(allowed)}")
    return value


def _layers(settings: dict, where: str) -> str:
    """A saved layer choice: a strategy name or layer indices (options.parse_layers)."""
    try:
        return parse_layers(settings.get("layers", "last"))
    except ValueError as error:
        raise CheckpointError(f"{where}.layers: {error}") from None


def _flag(settings: dict, key: str, where: str) -> bool:
    value = settings.get(key, False)
    if not isinstance(value, bool):
        raise CheckpointError(f"{where}.{key} must be true or false, got {value!r}")
    return value


def _length(value: Any, limit: int, where: str) -> Optional[int]:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 2 <= value <= limit:
        raise CheckpointError(f"{where}.max_length {value!r} must be an integer between 2 and the model's "
                              f"position limit {limit}")
    return value


def _tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    if not path.is_file():
        raise CheckpointError(f"{path}: missing; {META_FILE} describes it. Restore it, or remove the entry")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{path}: unreadable ({err}); the file is truncated or corrupt") from None
    for name, array in tensors.items():
        if not np.isfinite(array).all():
            raise CheckpointError(f"{path}: tensor {name} holds NaN or infinite values; the file is damaged")
    return tensors


def _read_dense(folder: Path, described: list) -> list[Dense]:
    where = folder / META_FILE
    tensors = _tensors(folder / DENSE_FILE)
    layers = []
    for i, entry in enumerate(described):
        if not isinstance(entry, dict) or entry.get("activation", "tanh") not in DENSE_ACTIVATIONS:
            raise CheckpointError(f"{where}: encode.dense[{i}] must be an object with in_features, out_features, "
                                  f"bias and an activation among {', '.join(DENSE_ACTIVATIONS)}")
        weight, bias = tensors.get(f"{i}.linear.weight"), tensors.get(f"{i}.linear.bias")
        shape = (entry.get("out_features"), entry.get("in_features"))
        # compared before anything is allocated: the sizes in bertkit.json are not trusted
        if weight is None or weight.shape != shape or (entry.get("bias", True) != (bias is not None)) \
                or (bias is not None and bias.shape != shape[:1]):
            raise CheckpointError(f"{folder / DENSE_FILE}: layer {i}'s tensors do not match {where} encode.dense[{i}] "
                                  f"(weight {None if weight is None else weight.shape} for {shape})")
        dense = Dense(shape[1], shape[0], bias is not None, entry.get("activation", "tanh"))
        dense.load_state_dict({"linear.weight": torch.from_numpy(weight),
                               **({"linear.bias": torch.from_numpy(bias)} if bias is not None else {})})
        layers.append(dense.eval())
    return layers


def _read_whitening(folder: Path, meta: dict[str, Any]) -> Optional[Whitening]:
    info = meta.get("whitening")
    if not info:
        return None
    where = folder / META_FILE
    if not isinstance(info, dict) or not all(isinstance(info.get(k), int) for k in ("dim_in", "dim_out")):
        raise CheckpointError(f"{where}: \"whitening\" must be an object with integer dim_in and dim_out")
    path = member(folder, info.get("file", WHITENING_FILE), where, "whitening.file")
    tensors = _tensors(path)
    mean, kernel = tensors.get("mean"), tensors.get("kernel")
    if mean is None or kernel is None or kernel.shape != (info["dim_in"], info["dim_out"]) \
            or mean.shape != (info["dim_in"],):
        raise CheckpointError(f"{path}: tensors mean {getattr(mean, 'shape', None)} and kernel "
                              f"{getattr(kernel, 'shape', None)} do not match {META_FILE} ({info['dim_in']} -> "
                              f"{info['dim_out']})")
    return Whitening(mean, kernel, int(info.get("fitted_on", 0)), _choice(info, "pooling", POOLINGS[:-1], "mean", where),
                     _layers(info, where))


def _check_widths(folder: Path, pipeline: SentencePipeline, config: EncoderConfig) -> None:
    """Each step must take the width the one before it gives, or vectors fail at the first encode."""
    width = config.hidden_size * (min(4, config.num_layers) if pipeline.config.layers == "concat-last-4" else 1)
    for i, dense in enumerate(pipeline.dense):
        if dense.linear.in_features != width:
            raise CheckpointError(f"{folder}: dense layer {i} takes {dense.linear.in_features}-dim vectors but the "
                                  f"step before it gives {width}")
        width = dense.linear.out_features
    whitening = pipeline.whitening
    if whitening is not None and whitening.fits(pipeline.config.pooling, pipeline.config.layers) \
            and whitening.dim_in != width:
        raise CheckpointError(f"{folder / META_FILE}: the whitening takes {whitening.dim_in}-dim vectors but the "
                              f"model's pooled vectors have {width}")


# --- writing -----------------------------------------------------------------------------------------------

def write_sentence_pipeline(folder: Path, pipeline: SentencePipeline) -> dict[str, Any]:
    """Write the pipeline's tensors into `folder` (a save in progress); returns its bertkit.json entries."""
    from safetensors.numpy import save_file

    config = pipeline.config
    encode: dict[str, Any] = {"pooling": config.pooling, "layers": config.layers, "normalize": config.normalize,
                              "max_length": config.max_length}
    entries: dict[str, Any] = {"encode": encode}
    # "dense" is written even when empty: it says the folder has no dense layers, whatever other files say
    encode["dense"] = [{"in_features": d.linear.in_features, "out_features": d.linear.out_features,
                            "bias": d.linear.bias is not None, "activation": d.activation} for d in pipeline.dense]
    if pipeline.dense:
        save_file({f"{i}.{name}": np.ascontiguousarray(t.detach().cpu().float().numpy())
                   for i, d in enumerate(pipeline.dense) for name, t in d.state_dict().items()},
                  str(folder / DENSE_FILE))
    if pipeline.whitening is not None:
        entries["whitening"] = _write_whitening(folder, pipeline.whitening)
    return entries


def _write_whitening(folder: Path, whitening: Whitening) -> dict[str, Any]:
    _save_whitening_tensors(folder / WHITENING_FILE, whitening)
    return _whitening_entry(whitening)


def _save_whitening_tensors(path: Path, whitening: Whitening) -> None:
    from safetensors.numpy import save_file

    save_file({"mean": np.ascontiguousarray(whitening.mean.cpu().numpy()),
               "kernel": np.ascontiguousarray(whitening.kernel.cpu().numpy())},
              str(path), metadata={"count": str(whitening.count)})


def _whitening_entry(whitening: Whitening) -> dict[str, Any]:
    return {"file": WHITENING_FILE, "dim_in": whitening.dim_in, "dim_out": whitening.dim_out,
            "fitted_on": whitening.count, "pooling": whitening.pooling, "layers": whitening.layers}


def save_whitening(folder: str | Path, whitening: Whitening, pooling: str, layers: str = "last") -> None:
    """Add a whitening to an existing folder: whitening.safetensors, and bertkit.json's "whitening" entry with
    the pooling it was fitted on as the folder's encode pooling (whiten_model saves whole folders instead)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: no such model folder")
    whitening.pooling, whitening.layers = pooling, layers
    meta = _read_meta(folder / META_FILE)
    write_file(folder / WHITENING_FILE, lambda tmp: _save_whitening_tensors(tmp, whitening))
    meta["whitening"] = _whitening_entry(whitening)
    meta["encode"] = {**meta.get("encode", {}), "pooling": pooling, **({"layers": layers} if layers != "last" else {})}
    write_json(folder / META_FILE, meta)


def load_whitening(folder: str | Path) -> Optional[Whitening]:
    """The whitening saved in a folder, or None when it has none."""
    folder = Path(folder)
    return _read_whitening(folder, _read_meta(folder / META_FILE))


def _read_meta(path: Path) -> dict[str, Any]:
    return read_json(path) if path.is_file() else {}
