"""The model side of the server: pad a micro-batch, run it through the model, shape the results per item.

Vectors come from the model's own sentence path (`Model.sentence_encoder` and `features.embed_batch`, what
`Model.encode` and the index run): the folder's pooling, length limit, dense layers, whitening and
normalization, never a copy of them. Runs only in the batcher's worker threads. Every vector leaves here
finite or not at all: a non-finite row becomes a `NonFiniteResult` that the endpoint turns into a 422,
never a NaN in JSON.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np
import torch

from bertkit.errors import BertkitError
from bertkit.features import embed_batch
from bertkit.finetune.tasks import TASKS
from bertkit.model.head_registry import HEADS
from bertkit.model.pooling import POOLINGS, pooled_or_cls
from bertkit.model.sentence import SentenceEncoder, can_pack
from bertkit.runtime import autocast
from bertkit.serve.batching import thread_clocks
from bertkit.serve.inputs import TokenSequence
from bertkit.tokenizer.padding import pad_to_tensors

# Per-request poolings: "none" (token vectors) is not a sentence embedding, so the server does not offer it.
SERVED_POOLINGS = tuple(p for p in POOLINGS if p != "none")
# bertkit.json "task" -> the head key that serves /predict through ModelRunner.predict (labelled heads; QA's
# windows' start/end logits: ModelRunner.answer_windows; the answers: serve/predictions.py)
PREDICT_HEADS = {name: kind.head for name, kind in TASKS.items() if kind.job == "finetune" and HEADS[kind.head].labelled}
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
    padded = pad_to_tensors([s.input_ids for s in sequences], pad_id, [s.token_type_ids for s in sequences])
    return BatchTensors(*(padded[k].to(device) for k in ("input_ids", "token_type_ids", "attention_mask")))


class BatchRunner:
    """The batcher's entry point, shared by the PyTorch runner below and serve/onnx_runner.py's."""
    packed_kinds: frozenset = frozenset()      # batch kinds run packed (padding not computed): the batcher's cost

    def run_batch(self, kind: str, payloads: list) -> list:
        if kind == "embed":
            return self.embed(payloads)
        if kind == "predict":
            return self.predict(payloads)
        if kind == "qa":
            return self.answer_windows(payloads)
        raise ValueError(f"unknown batch kind {kind!r}")

    def answer_windows(self, windows: list) -> list:
        raise ValueError("this model has no QA head")

    def clocks(self) -> tuple[float, float]:
        """(busy, CPU) seconds; a batch's model time is their difference around run_batch in the batcher's
        thread (here: its wall and CPU time)."""
        return thread_clocks()

    def backend(self) -> dict:
        """Where the passes run, for /status: the batcher's threads here; serve/process_runner.py's child."""
        return {"kind": "thread"}

    def health_problem(self) -> Optional[str]:
        """Why the runner cannot take a batch now (for /health), or None; the thread runner always can."""
        return None

    def sequence_of(self, text: str, max_length: Optional[int] = None) -> TokenSequence:
        """One text as the vector routes tokenize it, cut at max_length (default: the runner's)."""
        batch = self.tokenizer.encode_batch([text], max_length=max_length or self.max_length,
                                            truncation="longest_first")
        return TokenSequence(batch.input_ids[0], batch.token_type_ids[0])

    def close(self) -> None:
        """Free what the runner holds beyond the model (a model process); the thread runner holds nothing."""


class ModelRunner(BatchRunner):
    """Wraps the loaded model (from `bertkit.load`) for batched, thread-side inference."""
    pairs = True      # "a ||| b" is a text pair (the server's PAIR_SEPARATOR)

    def __init__(self, model: Any, pooling: Optional[str] = None, layers: Optional[str] = None):
        """pooling / layers: the defaults of every vector route (serve --pooling / --layers); None: the folder's."""
        self.model = model
        self.encoder = model.encoder
        self.tokenizer = model.tokenizer
        self.max_length = int(model.max_length)                 # embeddings: the folder's max_seq_length
        self.position_limit = int(model.config.max_length)      # fine-tuned heads: the position table
        self.meta: dict = dict(getattr(model, "meta", None) or {})
        saved = model.sentence.config
        self.default_pooling: str = pooling or saved.pooling
        self.default_layers: str = saved.layers if layers is None else layers
        self.default_normalize: bool = saved.normalize
        self._sentence: dict[tuple[str, bool], SentenceEncoder] = {}
        self.heads: dict = dict(getattr(model, "heads", None) or {})
        self.task: Optional[str] = self.meta.get("task")
        self.head_key, self.head = self._pick_head()
        self.label_names: list[str] = [str(n) for n in self.meta.get("labels") or []]
        self.device = next(self.encoder.parameters()).device
        self.packed_kinds = frozenset({"embed"} if can_pack(self.encoder) else ())   # embed_batch packs
        self.encoder.eval()
        self.dimension: Optional[int] = None     # known after self_test()

    # --- embeddings --------------------------------------------------------------------------------------
    def embedding_problem(self, pooling: str, normalize: bool) -> Optional[str]:
        """Why this model cannot embed with these settings (a 422), or None."""
        if pooling == "pooler" and self.encoder.config.use_pooler is False:
            return "pooling 'pooler': this model has no pooler; use 'cls' or 'mean'"
        return None

    def sentence_encoder(self, pooling: str, normalize: bool) -> SentenceEncoder:
        key = (pooling, normalize)
        if key not in self._sentence:     # the worker threads may race here; both build the same module
            self._sentence[key] = self.model.sentence_encoder(pooling, self.default_layers, normalize)
        return self._sentence[key]

    def embed(self, items: list[EmbedItem]) -> list[np.ndarray | NonFiniteResult]:
        """One pass per (pooling, normalize) group of the micro-batch (nearly always one group)."""
        rows: list[Optional[np.ndarray]] = [None] * len(items)
        for key in dict.fromkeys((item.pooling, item.normalize) for item in items):
            picked = [i for i, item in enumerate(items) if (item.pooling, item.normalize) == key]
            batch = pad_batch([items[i].sequence for i in picked], self.tokenizer.pad_id, self.device)
            pairs = any(items[i].sequence.pair for i in picked)
            vectors = embed_batch(self.sentence_encoder(*key), batch.input_ids, batch.attention_mask,
                                  batch.token_type_ids if pairs else None)
            for i, vector, finite in zip(picked, vectors, np.isfinite(vectors).all(1)):
                rows[i] = vector if finite else NonFiniteResult("embedding")
        return rows  # type: ignore[return-value]

    # --- start-up self-test ------------------------------------------------------------------------------
    def self_test(self) -> dict:
        """Encode a fixed text as /encode does by default (the folder's pooling and normalization, so the norm
        printed at start-up is the one clients get); the vector must be finite, non-zero and of the model's
        width."""
        result = self.embed([EmbedItem(self.sequence_of(SELF_TEST_TEXT), self.default_pooling,
                                       self.default_normalize)])[0]
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
        return self.sentence_encoder(self.default_pooling, False).dim

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
            if HEADS[self.head_key].reads == "summary":
                pooled = pooled_or_cls(out)
                logits = self.head(pooled).float().cpu().numpy()                      # (B, L)
                rows = list(logits)
            else:
                logits = self.head(out.last_hidden_state).float().cpu().numpy()       # (B, T, L)
                rows = [logits[i, :len(item.input_ids)] for i, item in enumerate(items)]
        return [row if np.isfinite(row).all() else NonFiniteResult("prediction") for row in rows]

    def answer_windows(self, windows: list[TokenSequence]) -> list[tuple[np.ndarray, np.ndarray] | NonFiniteResult]:
        """Start and end logits per QA window, cut to its length (the folder's "qa" head)."""
        head = self.heads.get("qa")
        if head is None:
            return super().answer_windows(windows)
        batch = pad_batch(windows, self.tokenizer.pad_id, self.device)
        with torch.inference_mode(), autocast(self.device):
            hidden = self.encoder(batch.input_ids, attention_mask=batch.attention_mask,
                                  token_type_ids=batch.token_type_ids).last_hidden_state
            start, end = (logits.float().cpu().numpy() for logits in head.eval()(hidden))
        rows = [(start[i, :len(w.input_ids)], end[i, :len(w.input_ids)]) for i, w in enumerate(windows)]
        return [row if np.isfinite(row[0]).all() and np.isfinite(row[1]).all() else NonFiniteResult("answer")
                for row in rows]


class SelfTestFailed(BertkitError):
    """The start-up self-test did not give a finite vector of the right size: the server does not start."""
