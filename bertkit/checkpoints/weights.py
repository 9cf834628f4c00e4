"""Reading weight files safely: safetensors, pytorch_model.bin (weights only), sharded indexes.

A git-lfs pointer (a small text file in place of the weights) and a truncated download are detected and
named instead of surfacing as `invalid load key, 'v'` from the unpickler.
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch

from bertkit.errors import CheckpointError
from bertkit.folder_names import member

# model.int8.safetensors: int8 weights + per-row scales (bertkit quantize). Its own name, so transformers finds
# no weights in an int8 folder instead of loading int8 values as if they were floats.
INT8_WEIGHTS_FILE = "model.int8.safetensors"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", INT8_WEIGHTS_FILE)
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def holds_model(folder: Path) -> bool:
    """Whether `folder` holds a model (a config.json or weights): what a command writing a model into it would
    replace."""
    return any((Path(folder) / name).is_file() for name in ("config.json", *WEIGHT_FILES, *INDEX_FILES))


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return read_weight_file(folder / name)
    for name in INDEX_FILES:
        if (folder / name).is_file():
            return _read_sharded(folder / name)
    raise CheckpointError(f"{folder}: no weights found; expected one of {', '.join(WEIGHT_FILES + INDEX_FILES)}")


def read_weight_file(path: Path) -> dict[str, torch.Tensor]:
    """A weight file's tensors, every floating-point one checked to be finite."""
    check_not_pointer(path)
    state = _read_safetensors(path) if path.suffix == ".safetensors" else _read_torch(path)
    check_finite(state, path)
    return state


def check_finite(state: dict[str, torch.Tensor], where) -> None:
    """A NaN or inf weight makes every output NaN; refuse it at load, naming the tensor."""
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{where}: tensor {name} holds NaN or infinite values; the checkpoint is damaged "
                                  "(a diverged training run saves such weights): use an earlier checkpoint")


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"{path}: cannot read safetensors file ({err}); the file is truncated or "
                              "corrupt: download it again") from None


def _read_torch(path: Path) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many kinds for a bad pickle/zip
        if isinstance(err, pickle.UnpicklingError) and "weights_only" in str(err):
            # torch's own text advises weights_only=False, which would run whatever the pickle names
            raise CheckpointError(f"{path}: holds Python objects other than tensors, which bertkit does not unpickle "
                                  "(loading them can run code); convert the weights to safetensors where they come "
                                  "from") from None
        first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        raise CheckpointError(f"{path}: cannot read PyTorch weights ({type(err).__name__}: {first}); the file is "
                              "truncated, corrupt or not a weights file") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: holds a {type(state).__name__}, not a state dict of tensors")
    return state


def check_not_pointer(path: Path) -> None:
    with open(path, "rb") as handle:
        head = handle.read(200)
    if head.startswith(b"version https://git-lfs"):
        raise CheckpointError(f"{path}: is a git-lfs pointer file ({path.stat().st_size} bytes), not the "
                              "weights; run `git lfs pull` in that repository or download the real file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: is empty; the download did not finish")


def _read_sharded(index_path: Path) -> dict[str, torch.Tensor]:
    try:
        weight_map = json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{index_path}: not a valid shard index ({err})") from None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index_path}: weight_map must be an object of weight name -> shard file name")
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = member(index_path.parent, shard, index_path, "weight_map's shard")
        if not shard_path.is_file():
            raise CheckpointError(f"{index_path}: names shard {shard}, which is missing")
        state.update(read_weight_file(shard_path))
    return state
