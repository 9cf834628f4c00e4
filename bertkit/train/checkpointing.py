"""Training state on disk: model, optimizer, schedule, RNG of every rank and data position, in one
safetensors file written atomically (bertkit/atomic_write.py), so a crash mid-write never leaves a broken state.

No pickle: a run folder may come from anyone, and unpickling runs whatever code the file names. Tensors
go into the safetensors body; everything else (numbers, strings, the RNG states' tuples and integer
arrays, the optimizer's integer-keyed dicts) into one JSON tree in its metadata, with each tensor replaced
by a reference. Reading it back builds only tensors, numbers, strings, lists, tuples, dicts and integer or
float numpy arrays, so a resumed run restores every value bit for bit and a crafted file can run nothing.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from bertkit.atomic_write import write_file
from bertkit.errors import CheckpointError

STATE_FILE = "training_state.safetensors"
PICKLED_STATE_FILE = "training_state.pt"     # the format of earlier versions, refused
TREE_KEY = "bertkit_training_state"
FORMAT_VERSION = 1
# numpy arrays in RNG states are integers (MT19937 keys); floats are allowed for other sources' states.
ARRAY_DTYPES = {"uint32", "uint64", "int32", "int64", "uint8", "float32", "float64"}


def state_path(output_dir: Path) -> Path:
    return Path(output_dir) / "checkpoint" / STATE_FILE


class _Encoder:
    """Turns the state into (JSON tree, {name: tensor}); tensors that share storage are stored once each."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self._storages: set[tuple[int, int]] = set()

    def encode(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            name = f"t{len(self.tensors)}"
            tensor = value.detach().cpu().contiguous()
            storage = (tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())
            if storage in self._storages:      # safetensors refuses two names on one storage (tied weights)
                tensor = tensor.clone()
            self._storages.add(storage)
            self.tensors[name] = tensor
            return {"$tensor": name}
        if isinstance(value, np.ndarray):
            if value.dtype.name not in ARRAY_DTYPES:
                raise TypeError(f"training state: numpy arrays of {value.dtype} are not stored")
            return {"$ndarray": value.tolist(), "dtype": value.dtype.name}
        if isinstance(value, np.generic):
            return self.encode(value.item())
        if isinstance(value, tuple):
            return {"$tuple": [self.encode(v) for v in value]}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, dict):
            if all(isinstance(k, str) and not k.startswith("$") for k in value):
                return {k: self.encode(v) for k, v in value.items()}
            return {"$dict": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise TypeError(f"training state: a {type(value).__name__} cannot be stored without pickle")


def _decode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "$tensor" in value:
        return tensors[value["$tensor"]]
    if "$ndarray" in value:
        if value.get("dtype") not in ARRAY_DTYPES:
            raise ValueError(f"array dtype {value.get('dtype')!r} is not one of {sorted(ARRAY_DTYPES)}")
        return np.asarray(value["$ndarray"], dtype=value["dtype"])
    if "$tuple" in value:
        return tuple(_decode(v, tensors) for v in value["$tuple"])
    if "$dict" in value:
        return {_decode(k, tensors): _decode(v, tensors) for k, v in value["$dict"]}
    return {k: _decode(v, tensors) for k, v in value.items()}


def save_state(path: Path, state: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    encoder = _Encoder()
    tree = json.dumps({"format_version": FORMAT_VERSION, "state": encoder.encode(state)})
    write_file(path, lambda tmp: save_file(encoder.tensors, str(tmp), metadata={TREE_KEY: tree}))


def load_state(path: Path) -> Optional[dict[str, Any]]:
    """The state saved at `path`, or None when there is none. Never unpickles."""
    from safetensors import safe_open

    path = Path(path)
    pickled = path.with_name(PICKLED_STATE_FILE)
    if not path.is_file():
        if pickled.is_file():
            raise CheckpointError(f"{pickled}: a training state in the pickle format of earlier bertkit versions, "
                                  "which this version does not load (unpickling a file can run code); start the "
                                  "run again without --resume, or finish it with the version that wrote it")
        return None
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        tree = json.loads(metadata[TREE_KEY])
        if tree.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"format_version {tree.get('format_version')!r}, this bertkit reads {FORMAT_VERSION}")
        return _decode(tree["state"], tensors)
    except Exception as err:  # a truncated, foreign or crafted file: say which and what to do
        raise CheckpointError(f"{path}: cannot read the training state ({type(err).__name__}: {err}); "
                              "delete it to start over") from None
