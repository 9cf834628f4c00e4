"""Google's original BERT folders: bert_config.json + vocab.txt + a TensorFlow checkpoint (bert_model.ckpt.*).

TF variable names are turned into HF names here; reading the checkpoint needs `tensorflow`, which is not
a dependency: without it the loader says so. Optimizer slots (adam_m/adam_v) and global_step are skipped.
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import torch

from bertkit.checkpoints import hf
from bertkit.checkpoints.weights import INDEX_FILES, WEIGHT_FILES, read_weights
from bertkit.errors import BertkitWarning, CheckpointError
from bertkit.model.config import EncoderConfig

_OPTIMIZER = re.compile(r"(adam_[mv]|Adam(_\d+)?|global_step|bad_steps|good_steps|loss_scale)$")


def load_google_folder(folder: Path) -> tuple[EncoderConfig, dict[str, torch.Tensor]]:
    config_path = folder / "bert_config.json"
    config = hf.config_from_hf(json.loads(config_path.read_text(encoding="utf-8")), str(config_path))
    if any((folder / name).is_file() for name in WEIGHT_FILES + INDEX_FILES):
        return config, read_weights(folder)
    indexes = sorted(folder.glob("*.ckpt*.index"))
    if not indexes:
        raise CheckpointError(f"{folder}: bert_config.json found but no TF checkpoint (*.ckpt.index) or "
                              "pytorch_model.bin / model.safetensors")
    prefix = str(indexes[0])[: -len(".index")]
    try:
        import tensorflow as tf  # noqa: F401
    except ImportError:
        raise CheckpointError(f"{prefix}: reading a TensorFlow checkpoint needs tensorflow "
                              "(`pip install tensorflow`); bertkit convert then writes a folder that "
                              "needs it no more") from None
    reader = tf.train.load_checkpoint(prefix)
    variables = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    return config, tf_variables_to_hf(variables)


def tf_variables_to_hf(variables: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """TF names (`bert/encoder/layer_0/attention/self/query/kernel`) -> HF names, kernels transposed."""
    state = {}
    optimizer = [name for name in variables if _OPTIMIZER.search(name)]
    if optimizer:
        warnings.warn(f"skipped {len(optimizer)} optimizer variables (adam_m/adam_v/global_step); "
                      "they are not model weights", BertkitWarning, stacklevel=3)
    for name, value in variables.items():
        if name in optimizer:
            continue
        tensor = torch.from_numpy(np.asarray(value, dtype=np.float32))
        parts = name.split("/")
        if parts[-1] == "kernel":
            parts[-1], tensor = "weight", tensor.t()
        elif parts[-1] in ("gamma", "beta"):
            parts[-1] = {"gamma": "weight", "beta": "bias"}[parts[-1]]
        elif parts[-1] == "output_weights":        # cls/seq_relationship: already (2, H)
            parts[-1] = "weight"
        elif parts[-1] == "output_bias":
            parts[-1] = "bias"
        elif parts[-1].endswith("_embeddings"):
            parts.append("weight")
        hf_name = ".".join(parts)
        hf_name = re.sub(r"layer_(\d+)", r"layer.\1", hf_name)
        state[hf_name] = tensor.contiguous()
    return state
