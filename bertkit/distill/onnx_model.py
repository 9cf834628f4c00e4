"""OnnxModel: `encode` (and `predict` for classifiers) over an exported .onnx file through onnxruntime.

Same call signature as bertkit.api.Model.encode; pooling and normalization were fixed at export time and
live in the graph, so asking for another pooling is an error rather than a silent mismatch. `predict` and
`evaluate` encode texts as the source folder's task does (its saved task options: max_length, long_texts).
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from bertkit.data.readers import TextExample
from bertkit.distill.onnx_export import GRAPH_TASKS, make_session, read_metadata
from bertkit.errors import BertkitError
from bertkit.features import EncodeReport, check_texts
from bertkit.finetune.config import TaskOptions
from bertkit.finetune.linear.layer import scores_metrics
from bertkit.finetune.linear.training import targets
from bertkit.finetune.predictions import sequence_predictions, softmax
from bertkit.finetune.tasks import build_task
from bertkit.tokenizer import Tokenizer
from bertkit.tokenizer.padding import pad_to_tensors


def onnx_file_of(path: str | os.PathLike) -> Optional[Path]:
    """The .onnx file `path` names, or model.onnx inside the folder `path`; None when there is none."""
    path = Path(path)
    if path.suffix == ".onnx" and path.is_file():
        return path
    if path.is_dir() and (path / "model.onnx").is_file() and not (path / "config.json").is_file():
        return path / "model.onnx"
    return None


class OnnxModel:
    def __init__(self, path: str | os.PathLike, threads: Optional[int] = None):
        self.path = Path(path)
        if not self.path.is_file():
            raise BertkitError(f"{self.path}: no such ONNX file")
        self.session = make_session(self.path, threads)
        self.meta = read_metadata(self.path)
        folder = self.path.parent
        if not ((folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file()):
            raise BertkitError(f"{folder}: no vocab.txt or tokenizer.json beside {self.path.name}; "
                               "export again with bertkit export-onnx, which writes them")
        self.tokenizer = Tokenizer.from_folder(folder)
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.label_names: list[str] = list(self.meta.get("labels") or [])
        self.last_report = EncodeReport()

    @property
    def max_length(self) -> int:
        """Tokens per text for `encode` (special tokens included): the source folder's, saved at export."""
        return int(self.meta.get("max_length") or 512)

    @property
    def position_limit(self) -> int:
        """Tokens the graph takes at most (the encoder's position table); older exports saved only max_length."""
        return int(self.meta.get("position_limit") or self.max_length)

    @property
    def task_options(self) -> TaskOptions:
        """The source folder's task options, saved at export (the defaults, as for a folder that saved none)."""
        return TaskOptions.saved(self.meta, self.path)

    @property
    def pooling(self) -> str:
        return self.meta.get("pooling", "mean")

    def _run(self, texts: Sequence[str], batch_size: int, max_length: Optional[int]) -> list[np.ndarray]:
        texts = list(texts)
        limit = self.max_length
        batch = self.tokenizer.encode_batch(texts, max_length=min(max_length or limit, limit))
        self.last_report = EncodeReport(texts=len(texts), truncated=batch.num_truncated)
        return self._run_ids(batch.input_ids, batch_size)

    def _run_ids(self, input_ids: Sequence[Sequence[int]], batch_size: int) -> list[np.ndarray]:
        """Every output of the graph for token id rows, padded in batches of similar length."""
        order = np.argsort([-len(ids) for ids in input_ids], kind="stable")   # pad each batch less
        results: list[list[np.ndarray]] = [[None] * len(input_ids) for _ in self.output_names]
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            tensors = pad_to_tensors([input_ids[i] for i in rows], self.tokenizer.pad_id)
            outputs = self.run_padded(tensors["input_ids"].numpy(), tensors["attention_mask"].numpy())
            for k, values in enumerate(outputs):
                for row, value in zip(rows, values):
                    results[k][row] = value
        width = [o.shape[-1] for o in self.session.get_outputs()]
        return [np.stack(r).astype(np.float32) if input_ids else
                np.zeros((0, w if isinstance(w, int) else 0), np.float32) for r, w in zip(results, width)]

    def run_padded(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> list[np.ndarray]:
        """The graph on one padded batch, (B, T) int64 each: [sentence vectors (B, D)] (+ [logits (B, L)])."""
        return self.session.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})

    def encode(self, texts: Sequence[str], batch_size: int = 32, max_length: Optional[int] = None,
               pooling: Optional[str] = None, layers: Optional[str] = None, normalize: Optional[bool] = None,
               long_texts: str = "truncate", stride: int = 128, progress: bool = False) -> np.ndarray:
        if pooling not in (None, self.pooling):
            raise BertkitError(f"{self.path} was exported with pooling {self.pooling!r}; export again with "
                               f"--pooling {pooling} to encode that way")
        exported = self.meta.get("layers") or "last"
        if layers not in (None, exported) or long_texts != "truncate":
            raise BertkitError(f"{self.path} encodes the layers it was exported with ({exported}), with truncation "
                               "only; export again for other layers")
        if normalize is False and self.meta.get("normalize"):
            raise BertkitError(f"{self.path} was exported with normalization inside the graph; export again "
                               "with --no-normalize to get unnormalized vectors")
        vectors = self._run(check_texts(texts), batch_size, max_length)[0]
        if normalize and not self.meta.get("normalize"):
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors

    def logits(self, texts: Sequence[str], batch_size: int = 32, max_length: Optional[int] = None) -> np.ndarray:
        """(N, L) classifier logits, texts encoded as the source folder's task encodes them; max_length: another
        length than its saved one."""
        if isinstance(texts, str):
            raise TypeError("expects a list of texts, not one string; wrap it in a list: [text]")
        examples = [TextExample(text, None, None, line) for line, text in enumerate(texts, 1)]
        return self._logits_of(examples, batch_size, max_length, quiet=True)

    def _logits_of(self, examples: Sequence[TextExample], batch_size: int, max_length: Optional[int] = None,
                   quiet: bool = False) -> np.ndarray:
        """As the source folder's task object encodes rows (max_length, long_texts: head+tail keeps both ends);
        not quiet: it reports how many texts were cut, as `bertkit predict` on the folder does."""
        if "logits" not in self.output_names:
            raise BertkitError(f"{self.path} has no classifier output; export a fine-tuned classification model")
        options = self.task_options if max_length is None else replace(self.task_options, max_length=max_length)
        # a longer row would fail in the graph (a folder saved with no task options defaults to 128): the table wins
        options = replace(options, max_length=min(options.max_length, self.position_limit))
        task = build_task(self.task or "classification", self.tokenizer, self.label_names, options)
        return self._run_ids([f.input_ids for f in task.encode(examples, quiet=quiet)], batch_size)[1]

    @property
    def task(self) -> Optional[str]:
        """The source folder's task (None for an encoder export, which has no classifier output)."""
        return self.meta.get("task")

    def _single_text_rows(self, examples: Sequence, tasks: tuple, doing: str) -> Sequence[TextExample]:
        """Rows read from a file, checked to be one text each, as the graph takes single texts."""
        if self.task not in tasks:
            raise BertkitError(f"{self.path}: {doing} with an ONNX export of a {self.task or 'encoder'} model is "
                               f"not supported; use its source folder")
        paired = next((ex for ex in examples if ex.text_pair is not None), None)
        if paired is not None:
            raise BertkitError(f"line {paired.line}: {self.path} takes one text per row (no text_pair)")
        return examples

    def predict_examples(self, examples: Sequence, batch_size: int = 64) -> list[dict]:
        """Rows read from a file (`bertkit predict --input`)."""
        rows = self._single_text_rows(examples, GRAPH_TASKS, "predicting files")
        return sequence_predictions(self._logits_of(rows, batch_size), self.task, self.label_names)

    def evaluate_examples(self, examples: Sequence, batch_size: int = 64) -> dict:
        """The metrics `bertkit evaluate` prints for the source folder (classification, regression)."""
        rows = self._single_text_rows(examples, ("classification", "regression"), "evaluating")
        logits = self._logits_of(rows, batch_size)
        return scores_metrics(self.task, logits if self.task == "regression" else softmax(logits),
                              targets(self.task, examples, self.label_names), len(self.label_names))

    def predict(self, texts: Sequence[str], batch_size: int = 32) -> list[dict]:
        """As `Model.predict` formats the same logits (the folder's task: regression, multi-label, classes)."""
        return sequence_predictions(self.logits(texts, batch_size), self.meta.get("task"), self.label_names)
