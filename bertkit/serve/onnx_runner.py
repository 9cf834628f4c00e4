"""The model side of the server for an ONNX export (`bertkit serve ONNX_DIR`): the graph from `export-onnx`
holds the folder's whole sentence path (pooling, dense layers, whitening, normalization) and, for a fine-tuned
classifier, its logits, so this runner pads a micro-batch and runs `OnnxModel.run_padded`, the call
`bertkit.load(ONNX_DIR).encode / .predict` run. Same interface as `ModelRunner`; what the graph cannot do
(another pooling, unnormalized vectors from a normalizing graph, text pairs: the graph has no token types)
is refused with a message, as `OnnxModel.encode` refuses it."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from bertkit.distill.onnx_export import GRAPH_TASKS
from bertkit.errors import BertkitError
from bertkit.serve.inputs import TokenSequence
from bertkit.serve.runner import (SELF_TEST_TEXT, BatchRunner, EmbedItem, NonFiniteResult, SelfTestFailed,
                                  pad_batch)



class OnnxRunner(BatchRunner):
    pairs = False                      # one text per input: "a ||| b" is one text, as OnnxModel reads it

    def __init__(self, model, pooling: Optional[str] = None, layers: Optional[str] = None):
        """`pooling` / `layers` (serve --pooling / --layers) must be what the graph computes, else a one-line
        BertkitError: the export fixed them (ModelRunner's arguments, checked here)."""
        self.model = model             # bertkit.distill.onnx_model.OnnxModel
        self.tokenizer = model.tokenizer
        self.max_length = model.max_length
        self.position_limit = model.position_limit  # fine-tuned heads: the position table, as OnnxModel.predict
        self.meta: dict = dict(model.meta)
        self.default_pooling: str = model.pooling
        self.default_layers: str = self.meta.get("layers") or "last"
        self.default_normalize: bool = bool(self.meta.get("normalize"))
        self.task: Optional[str] = self.meta.get("task")
        self.heads: dict = {}
        has_logits = "logits" in model.output_names and self.task in GRAPH_TASKS
        self.head_key, self.head = ("classifier", "logits") if has_logits else (None, None)
        self.label_names: list[str] = [str(n) for n in model.label_names]
        self.device = torch.device("cpu")
        self.dimension: Optional[int] = None
        for flag, asked, baked in (("pooling", pooling, self.default_pooling), ("layers", layers, self.default_layers)):
            if asked is not None and asked != baked:
                raise BertkitError(f"serve --{flag} {asked}: {model.path} is an ONNX export that computes {flag} "
                                   f"{baked!r} inside its graph; serve the PyTorch folder to change it")

    def embedding_problem(self, pooling: str, normalize: bool) -> Optional[str]:
        if pooling != self.default_pooling:
            return (f"pooling {pooling!r}: this ONNX export computes {self.default_pooling!r} inside its graph; "
                    f"export again with --pooling {pooling}")
        if self.default_normalize and not normalize:
            return "this ONNX export normalizes inside its graph; export again with --no-normalize"
        return None

    def _outputs(self, sequences: list[TokenSequence]) -> list[np.ndarray]:
        batch = pad_batch(sequences, self.tokenizer.pad_id, self.device)
        return self.model.run_padded(batch.input_ids.numpy(), batch.attention_mask.numpy())

    def embed(self, items: list[EmbedItem]) -> list[np.ndarray | NonFiniteResult]:
        vectors = self._outputs([item.sequence for item in items])[0].astype(np.float32)
        rows = []
        for item, vector in zip(items, vectors):
            if item.normalize and not self.default_normalize:    # as OnnxModel.encode(normalize=True)
                vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
            rows.append(vector if np.isfinite(vector).all() else NonFiniteResult("embedding"))
        return rows

    def predict(self, items: list[TokenSequence]) -> list[np.ndarray | NonFiniteResult]:
        logits = self._outputs(items)[1].astype(np.float32)     # (B, L)
        return [row if np.isfinite(row).all() else NonFiniteResult("prediction") for row in logits]

    def self_test(self) -> dict:
        result = self.embed([EmbedItem(self.sequence_of(SELF_TEST_TEXT), self.default_pooling,
                                       self.default_normalize)])[0]
        if isinstance(result, NonFiniteResult) or not np.any(result):
            raise SelfTestFailed(f"{self.model.path}: the ONNX graph gave a non-finite or all-zero vector for "
                                 f"{SELF_TEST_TEXT!r}")
        expected = self.meta.get("dimension")
        if expected is not None and result.shape != (int(expected),):
            raise SelfTestFailed(f"the self-test vector has shape {tuple(result.shape)}, expected ({expected},)")
        self.dimension = int(result.shape[0])
        return {"text": SELF_TEST_TEXT, "dimension": self.dimension, "norm": float(np.linalg.norm(result)),
                "passed": True}
