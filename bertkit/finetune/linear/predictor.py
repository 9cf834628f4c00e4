"""Using a linear model folder (TF-IDF baseline, linear probe, hybrid): predict, evaluate a file, predict a file.

`bertkit.load(folder)` returns a LinearPredictor for a TF-IDF folder (it has no encoder: `encode` says so in
one line) and a Model whose `predict` goes through a LinearPredictor for linear-probe and hybrid folders
(their encoder is the frozen model, so they also encode like the model they came from). `bertkit evaluate`,
`bertkit predict` and `serve /predict` reach the same predictor through bertkit.finetune.predict, so every
route gives the same numbers.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from bertkit.checkpoints import Checkpoint, load_checkpoint
from bertkit.data.readers import TextExample
from bertkit.errors import BertkitError, CheckpointError
from bertkit.finetune.classification import examples_from_inputs
from bertkit.finetune.linear.folder import linear_section, load_linear_model, read_meta
from bertkit.finetune.linear.layer import scores_metrics
from bertkit.finetune.linear.logits import FinetunedHead
from bertkit.finetune.linear.model import LinearModel
from bertkit.finetune.linear.training import targets
from bertkit.finetune.linear.vectors import encode_examples

METHOD_NAMES = {"tfidf": "a TF-IDF + linear model", "linear-probe": "a linear probe over a frozen model's vectors",
                "hybrid": "a hybrid (TF-IDF + a model's vectors or fine-tuned logits, stacked)"}


class LinearPredictor:
    def __init__(self, model: LinearModel, folder: Optional[Path], meta: dict,
                 checkpoint: Optional[Checkpoint] = None):
        self.model, self.path, self.meta = model, folder, meta
        self.checkpoint = checkpoint
        if (model.vector_block is not None or model.reads_logits) and checkpoint is None:
            raise CheckpointError(f"{folder}: this {model.method} model reads vectors, but no encoder was loaded")
        self.head = FinetunedHead(checkpoint) if model.reads_logits else None
        if self.head is not None and self.head.label_names != model.label_names:
            raise CheckpointError(f"{folder}: the classification head's labels (config.json) differ from bertkit.json's; "
                                  "the folder was edited or mixed up")

    @classmethod
    def load(cls, folder: str | Path, checkpoint: Optional[Checkpoint] = None) -> "LinearPredictor":
        """The folder's linear model; its encoder too when it reads vectors (`checkpoint`: already loaded)."""
        folder = Path(folder)
        if not folder.is_dir():
            raise CheckpointError(f"model folder {folder} does not exist" if not folder.exists() else
                                  f"{folder} is a file; pass the model folder")
        meta = checkpoint.meta if checkpoint is not None else read_meta(folder)
        model = load_linear_model(folder, meta)
        if (model.vector_block is not None or model.reads_logits) and checkpoint is None:
            checkpoint = load_checkpoint(folder)
        return cls(model, folder, meta, checkpoint)

    # --- what callers ask of any loaded model ------------------------------------------------------------
    @property
    def task(self) -> str:
        return self.model.task

    @property
    def label_names(self) -> list[str]:
        return list(self.model.label_names)

    @property
    def method(self) -> str:
        return self.model.method

    @property
    def max_length(self) -> Optional[int]:
        """The token limit of the vectors' encoder (None for TF-IDF: any length)."""
        block = self.model.vector_block
        if self.head is not None:
            return self.head.task.max_length
        return block.max_length if block is not None else None

    @property
    def tokenizer(self):
        return self.checkpoint.tokenizer if self.checkpoint is not None else None

    def refusal(self) -> str:
        return (f"{self.path} is {METHOD_NAMES[self.method]}: it predicts (bertkit predict / evaluate, serve "
                "/predict) but has no encoder to make vectors; encode with the model it was trained from")

    def encode(self, *args, **kwargs):
        raise BertkitError(self.refusal())

    @property
    def config(self):
        raise BertkitError(self.refusal())

    # --- predictions -------------------------------------------------------------------------------------
    def scores(self, examples: Sequence[TextExample], batch_size: int = 64) -> np.ndarray:
        """(N, K) probabilities, or (N, 1) values for regression."""
        vectors = None
        block = self.model.vector_block
        if block is not None and examples:
            vectors = encode_examples(self.checkpoint, examples, block, self.model.pairs, batch_size)
        if self.head is not None and examples:
            vectors = self.head.logits(examples, batch_size)
        if not examples:
            return np.zeros((0, 1 if self.task == "regression" else len(self.label_names)))
        return self.model.scores(examples, vectors)

    def predict_examples(self, examples: Sequence[TextExample], batch_size: int = 64) -> list[dict]:
        return self.model.describe(self.scores(examples, batch_size))

    def predict(self, inputs: Sequence[Any], batch_size: int = 32) -> list[dict]:
        """Texts, or (text, text_pair) pairs for a pair model -> {label, score, scores} or {score} each."""
        if isinstance(inputs, (str, tuple, dict)):
            raise TypeError("predict takes a list of inputs; wrap a single one in a list")
        examples = examples_from_inputs(inputs)
        if self.model.pairs and any(ex.text_pair is None for ex in examples):
            index = next(i for i, ex in enumerate(examples) if ex.text_pair is None)
            raise BertkitError(f"input {index}: this model classifies pairs; pass (text, text_pair) tuples")
        return self.predict_examples(examples, batch_size)

    def evaluate_examples(self, examples: Sequence[TextExample], batch_size: int = 64) -> dict:
        """The metrics `bertkit evaluate` prints for fine-tuned models of the same task."""
        gold = targets(self.task, examples, self.label_names)
        return scores_metrics(self.task, self.scores(examples, batch_size), gold, len(self.label_names))


def linear_predictor_of(model: Any) -> Optional[LinearPredictor]:
    """The LinearPredictor behind `model` (a folder path, a loaded Model or Checkpoint, or a predictor), or None
    when it is not a linear model's folder."""
    if isinstance(model, LinearPredictor):
        return model
    if isinstance(model, (str, Path)):
        return LinearPredictor.load(model) if linear_section(model) is not None else None
    attached = getattr(model, "linear", None)
    if isinstance(attached, LinearPredictor):
        return attached
    checkpoint = getattr(model, "checkpoint", model)
    if isinstance(checkpoint, Checkpoint) and isinstance((checkpoint.meta or {}).get("linear"), dict):
        return LinearPredictor.load(checkpoint.path, checkpoint)
    return None
