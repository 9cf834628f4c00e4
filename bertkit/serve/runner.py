"""The model side of the server: pad a micro-batch, run the encoder once, pool / apply heads per item.

Runs only in the batcher's worker threads. Every vector leaves here finite or not at all: a non-finite
row becomes a `NonFiniteResult` that the endpoint turns into a per-item 422, never a NaN in JSON.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np
import torch

from bertkit.errors import BertkitError
from bertkit.model.pooling import POOLINGS, needs_all_layers, pool, select_layers
from bertkit.runtime import autocast
from bertkit.serve.inputs import TokenSequence

# Per-request poolings: "none" (token vectors) is not a sentence embedding, so the server does not offer it.
SERVED_POOLINGS = tuple(p for p in POOLINGS if p != "none")
# bertkit.json "task" -> the head key that serves it (as bertkit.finetune saves them).
PREDICT_HEADS = {"classification": "classifier", "pair-classification": "classifier", "multi-label": "classifier",
                 "regression": "classifier", "ner": "token_classifier"}
SELF_TEST_TEXT = "bertkit self-test: the quick brown fox jumps over the lazy dog."


class EmbedItem(NamedTuple):
    sequence: TokenSequence
    pooling: str
    normalize: bool


class NonFiniteResult(NamedTuple):
    """The model produced NaN/inf for this item (a broken checkpoint or an fp16 overflow)."""
    what: str


class BatchTensors(NamedTuple):
    input_ids: torch.Tensor          # (B, T)
    token_type_ids: torch.Tensor     # (B, T)
    attention_mask: torch.Tensor     # (B, T)


def pad_batch(sequences: list[TokenSequence], pad_id: int, device: torch.device) -> BatchTensors:
    longest = max(len(s.input_ids) for s in sequences)
    ids = np.full((len(sequences), longest), pad_id, dtype=np.int64)
    types = np.zeros((len(sequences), longest), dtype=np.int64)
    mask = np.zeros((len(sequences), longest), dtype=np.int64)
    for row, sequence in enumerate(sequences):
        n = len(sequence.input_ids)
        ids[row, :n] = sequence.input_ids
        types[row, :n] = sequence.token_type_ids
        mask[row, :n] = 1
    return BatchTensors(*(torch.from_numpy(a).to(device) for a in (ids, types, mask)))


class ModelRunner:
    """Wraps the loaded model (from `bertkit.load`) for batched, thread-side inference."""

    def __init__(self, model: Any):
        self.model = model
        self.encoder = model.encoder
        self.tokenizer = model.tokenizer
        self.max_length = int(model.config.max_length)
        self.meta: dict = dict(getattr(model, "meta", None) or {})
        defaults = dict(getattr(model, "encode_defaults", None) or {})
        # Layer choice is the model's, not the request's: it would change the vector's meaning and width.
        self.layers = "last"
        self.default_pooling: str = defaults.get("pooling") or self.meta.get("pooling") or "mean"
        self.default_normalize: bool = bool(defaults.get("normalize", False))
        self.heads: dict = dict(getattr(model, "heads", None) or {})
        self.task: Optional[str] = self.meta.get("task")
        self.head_key, self.head = self._pick_head()
        self.label_names: list[str] = [str(n) for n in self.meta.get("labels") or []]
        self.device = next(self.encoder.parameters()).device
        self.encoder.eval()
        self.dimension: Optional[int] = None     # known after self_test()

    # --- embeddings --------------------------------------------------------------------------------------
    def embed(self, items: list[EmbedItem]) -> list[np.ndarray | NonFiniteResult]:
        batch = pad_batch([item.sequence for item in items], self.tokenizer.pad_id, self.device)
        poolings = {item.pooling for item in items}
        all_layers = any(needs_all_layers(p, self.layers) for p in poolings)
        with torch.inference_mode(), autocast(self.device):
            output = self.encoder(batch.input_ids, attention_mask=batch.attention_mask,
                                  token_type_ids=batch.token_type_ids, output_hidden_states=all_layers)
            tokens = (select_layers(output.hidden_states, self.layers) if output.hidden_states is not None
                      else output.last_hidden_state)
            first = output.hidden_states[1] if output.hidden_states is not None else None
            rows: list[Optional[np.ndarray]] = [None] * len(items)
            for pooling in poolings:
                picked = [i for i, item in enumerate(items) if item.pooling == pooling]
                index = torch.tensor(picked, device=self.device)
                vectors = pool(tokens[index], batch.attention_mask[index], pooling,
                               pooled_output=None if output.pooled_output is None else output.pooled_output[index],
                               first_layer=None if first is None else first[index])
                vectors = vectors.float().cpu().numpy()
                for k, i in enumerate(picked):
                    rows[i] = vectors[k]
        return [self._finish(row, item.normalize) for row, item in zip(rows, items)]

    def _finish(self, vector: np.ndarray, normalize: bool) -> np.ndarray | NonFiniteResult:
        if not np.isfinite(vector).all():
            return NonFiniteResult("embedding")
        if normalize:
            norm = float(np.linalg.norm(vector))
            vector = vector / norm if norm > 0 else vector   # a zero vector stays zero, never NaN
        return vector.astype(np.float32, copy=False)

    # --- start-up self-test ------------------------------------------------------------------------------
    def _self_test_sequence(self) -> TokenSequence:
        batch = self.tokenizer.encode_batch([SELF_TEST_TEXT], max_length=self.max_length,
                                            truncation="longest_first")
        return TokenSequence(batch.input_ids[0], batch.token_type_ids[0])

    def self_test(self) -> dict:
        """Encode a fixed text; the vector must be finite, non-zero and of the model's width."""
        result = self.embed([EmbedItem(self._self_test_sequence(), self.default_pooling, False)])[0]
        if isinstance(result, NonFiniteResult):
            raise SelfTestFailed(f"the model returned a non-finite vector for {SELF_TEST_TEXT!r}")
        expected = self.expected_dimension()
        if result.ndim != 1 or (expected is not None and result.shape[0] != expected):
            raise SelfTestFailed(f"the self-test vector has shape {tuple(result.shape)}, expected ({expected},)")
        if not np.any(result):
            raise SelfTestFailed("the self-test vector is all zeros; the weights look uninitialized")
        self.dimension = int(result.shape[0])
        return {"text": SELF_TEST_TEXT, "dimension": self.dimension, "norm": float(np.linalg.norm(result)),
                "passed": True}

    def expected_dimension(self) -> int:
        return int(self.model.config.hidden_size)

    # --- fine-tuned heads -------------------------------------------------------------------------------
    def _pick_head(self) -> tuple[Optional[str], Any]:
        """The head that answers /predict: the one the folder was fine-tuned for (bertkit.json "task")."""
        wanted = PREDICT_HEADS.get(self.task or "")
        if wanted and wanted in self.heads:
            return wanted, self.heads[wanted].eval()
        return None, None

    def predict(self, items: list[TokenSequence]) -> list[np.ndarray | NonFiniteResult]:
        """Raw head outputs per item: (L,) logits for sequence tasks, (T_i, L) for NER."""
        batch = pad_batch(items, self.tokenizer.pad_id, self.device)
        with torch.inference_mode(), autocast(self.device):
            out = self.encoder(batch.input_ids, attention_mask=batch.attention_mask,
                               token_type_ids=batch.token_type_ids)
            if self.head_key == "classifier":
                pooled = out.pooled_output if out.pooled_output is not None else out.last_hidden_state[:, 0]
                logits = self.head(pooled).float().cpu().numpy()                      # (B, L)
                rows = list(logits)
            else:
                logits = self.head(out.last_hidden_state).float().cpu().numpy()       # (B, T, L)
                rows = [logits[i, :len(item.input_ids)] for i, item in enumerate(items)]
        return [row if np.isfinite(row).all() else NonFiniteResult("prediction") for row in rows]

    # --- batcher entry point -----------------------------------------------------------------------------
    def run_batch(self, kind: str, payloads: list) -> list:
        if kind == "embed":
            return self.embed(payloads)
        if kind == "predict":
            return self.predict(payloads)
        raise ValueError(f"unknown batch kind {kind!r}")


class SelfTestFailed(BertkitError):
    """The start-up self-test did not give a finite vector of the right size: the server does not start."""
