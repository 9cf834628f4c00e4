"""Texts -> vectors: tokenize once, sort by length, batch, run the sentence path, restore input order.

Sorting by length before batching means each batch pads only to its own longest text, which is most of
the speed difference against encoding in input order. Long texts are truncated (and counted) or, with
`long_texts="sliding-window"`, split into overlapping windows whose vectors are averaged (then normalized).
An empty or whitespace-only text is refused (InvalidTextError naming its index), the same rule as the server's
422: its "[CLS] [SEP]" vector is one constant point that means nothing, yet lands among real vectors (an index
would return it as a hit).
`embed_batch` is the one place a padded batch becomes sentence vectors; the server calls it too. It runs the
encoder packed (model/packing.py: the real tokens only, padding only inside attention) where the encoder can and
the batch is padded enough for it to pay (PACK_MIN_PADDING).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Iterator, Literal, Optional, Sequence

import numpy as np
import torch

from bertkit.errors import BertkitError, BertkitWarning
from bertkit.job_config import AT_LEAST_ONE, MAX_LENGTH, check_ranges
from bertkit.model.encoder import Encoder
from bertkit.model.pooling import check_options, normalize, select_layers
from bertkit.model.sentence import SentenceEncoder, can_pack
from bertkit.progress import progress_bar
from bertkit.runtime import autocast
from bertkit.tokenizer import Tokenizer
from bertkit.tokenizer.coverage import warn_unknown
from bertkit.tokenizer.encoding import BatchEncoding
from bertkit.tokenizer.padding import pad_to_tensors
from bertkit.tokenizer.tokenizer import EMPTY_TEXT, InvalidTextError

LongTexts = Literal["truncate", "sliding-window", "error"]
DEFAULT_STRIDE = 128     # sliding-window overlap in tokens, where the window allows


@dataclass(frozen=True)
class EncodeOptions:
    batch_size: int = 32
    max_length: int | None = None      # None: the model's limit
    long_texts: LongTexts = "truncate"
    stride: int | None = None          # sliding-window overlap, in tokens; None: window_stride's choice
    progress: bool = False

    def __post_init__(self) -> None:    # -2 would run and give other vectors, silently
        check_ranges(self, {"batch_size": AT_LEAST_ONE, "max_length": MAX_LENGTH, "stride": AT_LEAST_ONE})


@dataclass
class EncodeReport:
    texts: int = 0
    truncated: int = 0
    windows: int = 0
    tokens: int = 0


class EncodeOptionError(BertkitError, ValueError):
    """An encode option the model cannot honour (max_length over its position limit, say): one line in the CLI,
    still a ValueError to Python callers."""


class NonFiniteVectors(BertkitError):
    """The model produced NaN or infinite vectors: nothing is returned, so nothing wrong gets written."""

    def __init__(self, rows: list[int], total: int, folder=None):
        self.rows, self.total = rows, total
        where = f"{folder}: " if folder is not None else ""
        super().__init__(f"{where}the model produced NaN or infinite vectors for {len(rows)} of {total} texts "
                         f"(texts {rows[:5]}{' ...' if len(rows) > 5 else ''}); its weights or config are damaged")


# Pack a batch (model/packing.py) when at least this share of its (B, T) grid is padding. Packing copies every
# layer's (N, 3C) queries/keys/values into the padded grid for attention, so it pays where padding is plentiful:
# MiniLM-L6 on one AMX core (benchmarks/packed_encode.py, BENCHMARKS.md), fp32: length-sorted batches of 32 (what
# Model.encode makes, ~13% padding) are 0.98x packed, so they stay padded. Where the encoder's Linear layers are
# oneDNN's bf16 kernels (Encoder.bucket_packed_rows: bf16 on CPU) every batch is packed: its attention grids are
# a multiple of 16 keys wide (torch's CPU attention runs 2-3x faster there) and the fast matmuls leave attention a
# large share, so sorted batches of 32 cost 1.16 instead of 1.30 ms of CPU per text (800 real texts, bf16).
PACK_MIN_PADDING = 0.2


def embed_batch(sentence: SentenceEncoder, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: Optional[torch.Tensor] = None, packed: Optional[bool] = None) -> np.ndarray:
    """One padded batch (B, T) through the sentence path -> (B, D) float32, on the encoder's device.
    packed: skip the padding's compute where the encoder can (the same vectors within float roundoff); None:
    when at least PACK_MIN_PADDING of the grid is padding (the server's cross-client batches), and always in bf16
    on CPU."""
    if packed is None:
        on_onednn = isinstance(sentence.encoder, Encoder) and sentence.encoder.bucket_packed_rows
        padding = 1.0 - float(attention_mask.sum()) / max(attention_mask.numel(), 1)
        packed = on_onednn or padding >= PACK_MIN_PADDING
    device = next(sentence.parameters()).device
    with torch.inference_mode(), autocast(device):
        vectors = sentence(input_ids.to(device), attention_mask.to(device),
                           None if token_type_ids is None else token_type_ids.to(device), packed=packed)
    return vectors.cpu().numpy()


def encode_texts(sentence: SentenceEncoder, tokenizer: Tokenizer, texts: Sequence[str], options: EncodeOptions,
                 report: EncodeReport | None = None) -> np.ndarray:
    """(N, D) float32 sentence vectors in input order; raises NonFiniteVectors rather than return NaN."""
    report = report if report is not None else EncodeReport()
    texts = check_texts(texts)
    if not texts:
        return np.zeros((0, sentence.dim), dtype=np.float32)
    if options.long_texts == "sliding-window":
        max_length = _max_length(sentence.encoder, options)
        windows = tokenizer.encode_windows(texts, max_length=max_length, stride=window_stride(max_length,
                                                                                              options.stride))
        warn_unknown(tokenizer, texts, "encode", windows.encoding.input_ids)
        report.texts += len(texts)
        report.windows += len(windows.text_index)
        per_window = SentenceEncoder(sentence.encoder, sentence.config.replace(normalize=False), sentence.dense,
                                     sentence.whitening)
        vectors = _average_windows(_run(per_window, tokenizer.pad_id, windows.encoding, options, report),
                                   windows.text_index, len(texts), sentence.config.normalize)
    else:
        batch = _tokenize(sentence.encoder, tokenizer, texts, options, report)
        vectors = _run(sentence, tokenizer.pad_id, batch, options, report)
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if len(bad):
        raise NonFiniteVectors(bad.tolist(), len(texts))
    return vectors


def encode_token_vectors(encoder: Encoder, tokenizer: Tokenizer, texts: Sequence[str], layers: str,
                         options: EncodeOptions, report: EncodeReport | None = None) -> list[np.ndarray]:
    """pooling 'none': one (T_i, C) array of token vectors per text, padding removed."""
    check_options("none", layers)
    if options.long_texts == "sliding-window":
        raise EncodeOptionError("pooling 'none' returns token vectors; it cannot average sliding windows (use "
                                "long_texts 'truncate' or 'error'; CLI: --long-texts)")
    report = report if report is not None else EncodeReport()
    texts = check_texts(texts)
    batch = _tokenize(encoder, tokenizer, texts, options, report)
    device = next(encoder.parameters()).device
    results: list = [None] * len(texts)
    with torch.inference_mode(), autocast(device):
        for rows, tensors in _batches(batch, tokenizer.pad_id, options, report):
            mask = tensors["attention_mask"].to(device)
            out = encoder(tensors["input_ids"].to(device), mask, output_hidden_states=layers != "last",
                          packed=can_pack(encoder))
            tokens = select_layers(out.hidden_states, layers) if layers != "last" else out.last_hidden_state
            for row, vectors, length in zip(rows, tokens.float().cpu().numpy(), mask.sum(1).tolist()):
                results[row] = vectors[:length]
    return results


def check_texts(texts: Sequence[str]) -> list[str]:
    """A list of texts, none empty or whitespace-only: the one rule for vectors (Model.encode, the CLI, indexes,
    ONNX models); the server refuses the same texts in the same words (EMPTY_TEXT) before it batches."""
    if isinstance(texts, str):
        raise TypeError("encode expects a list of texts, not one string; wrap it: encode([text])")
    texts = list(texts)
    for index, text in enumerate(texts):
        if isinstance(text, str) and not text.strip():
            raise InvalidTextError(index, EMPTY_TEXT)
    return texts


def window_stride(max_length: int, stride: int | None) -> int:
    """The overlap of sliding windows of max_length tokens: 128 by default, half the window when 128 would
    not leave it room to advance (max_length 128 has a window of 126); a given stride must leave that room."""
    window = max_length - 2
    if stride is None:
        return DEFAULT_STRIDE if DEFAULT_STRIDE < window else window // 2
    if stride >= window:
        raise EncodeOptionError(f"stride {stride} must be under the window of {window} tokens (max_length "
                                f"{max_length} less [CLS] and [SEP]), or left to its default")
    return stride


def _max_length(encoder: Encoder, options: EncodeOptions) -> int:
    limit = encoder.config.max_length
    max_length = options.max_length or limit
    if max_length > limit:
        raise EncodeOptionError(f"max_length {max_length} > the model's limit of {limit} tokens "
                                f"(max_position_embeddings); use at most {limit} (long_texts='sliding-window' keeps "
                                "longer texts whole)")
    return max_length


def _tokenize(encoder: Encoder, tokenizer: Tokenizer, texts: list[str], options: EncodeOptions,
              report: EncodeReport) -> BatchEncoding:
    max_length = _max_length(encoder, options)
    report.texts += len(texts)
    batch = tokenizer.encode_batch(texts, max_length=max_length,
                                   truncation=None if options.long_texts == "error" else "longest_first")
    report.truncated += batch.num_truncated
    warn_unknown(tokenizer, texts, "encode", batch.input_ids)
    if batch.num_truncated:
        warnings.warn(f"{batch.num_truncated} of {len(texts)} texts were longer than {max_length} tokens and "
                      "were truncated; encode with long_texts='sliding-window' (the encode and index build "
                      "commands: --long-texts sliding-window) to keep all of them", BertkitWarning, stacklevel=4)
    return batch


def _batches(batch: BatchEncoding, pad_id: int, options: EncodeOptions,
             report: EncodeReport) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor]]]:
    """(row indices, padded tensors) per batch, longest texts first (memory peaks early)."""
    order = np.argsort([-len(ids) for ids in batch.input_ids], kind="stable")
    progress = progress_bar(len(order), options.progress)
    for start in range(0, len(order), options.batch_size):
        rows = order[start:start + options.batch_size]
        tensors = pad_to_tensors([batch.input_ids[i] for i in rows], pad_id)   # single texts: segment 0
        report.tokens += int(tensors["attention_mask"].sum())
        yield rows, tensors
        if progress is not None:
            progress.update(len(rows))
    if progress is not None:
        progress.close()


def _run(sentence: SentenceEncoder, pad_id: int, batch: BatchEncoding, options: EncodeOptions,
         report: EncodeReport) -> np.ndarray:
    results = np.zeros((len(batch.input_ids), sentence.dim), dtype=np.float32)
    for rows, tensors in _batches(batch, pad_id, options, report):
        results[rows] = embed_batch(sentence, tensors["input_ids"], tensors["attention_mask"])
    return results


def _average_windows(vectors: np.ndarray, text_index: list[int], count: int, normalized: bool) -> np.ndarray:
    sums = np.zeros((count, vectors.shape[1]), dtype=np.float64)
    np.add.at(sums, np.asarray(text_index), vectors)
    sums /= np.maximum(np.bincount(text_index, minlength=count), 1)[:, None]
    averaged = torch.from_numpy(sums.astype(np.float32))
    return (normalize(averaged) if normalized else averaged).numpy()
