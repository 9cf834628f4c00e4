"""Texts -> vectors: tokenize once, sort by length, batch, run the encoder, pool, restore input order.

Sorting by length before batching means each batch pads only to its own longest text, which is most of
the speed difference against encoding in input order. Long texts are truncated (and counted) or, with
`long_texts="sliding-window"`, split into overlapping windows whose pooled vectors are averaged.
Empty or whitespace-only texts are encoded as "[CLS] [SEP]": a fixed, finite vector, never NaN.
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
import torch

from bertkit.model.encoder import Encoder
from bertkit.runtime import autocast
from bertkit.model.pooling import check_options, needs_all_layers, normalize, pool, select_layers
from bertkit.tokenizer import Tokenizer
from bertkit.tokenizer.padding import pad_to_tensors

LongTexts = Literal["truncate", "sliding-window", "error"]


@dataclass(frozen=True)
class EncodeOptions:
    batch_size: int = 32
    max_length: int | None = None      # None: the model's limit
    pooling: str = "mean"
    layers: str = "last"
    normalize: bool = False
    long_texts: LongTexts = "truncate"
    stride: int = 128                  # sliding-window overlap, in tokens
    progress: bool = False


@dataclass
class EncodeReport:
    texts: int = 0
    truncated: int = 0
    windows: int = 0
    tokens: int = 0


def encode_texts(encoder: Encoder, tokenizer: Tokenizer, texts: Sequence[str], options: EncodeOptions,
                 report: EncodeReport | None = None) -> np.ndarray | list[np.ndarray]:
    """(N, C) float32 in input order; pooling 'none' gives a list of (T_i, C) token-vector arrays."""
    check_options(options.pooling, options.layers)
    if options.pooling == "cls" and encoder.config.family == "xlnet":
        raise ValueError("XLNet's <cls> is its last token, not its first; use pooling 'mean' (or fine-tune it: "
                         "its classifier reads that last token)")
    if isinstance(texts, str):
        raise TypeError("encode expects a list of texts, not one string; wrap it: encode([text])")
    limit = encoder.config.max_length
    max_length = options.max_length or limit
    if max_length > limit:
        raise ValueError(f"max_length {max_length} > the model's limit of {limit} tokens "
                         f"(max_position_embeddings); use long_texts='sliding-window' for longer texts")
    report = report if report is not None else EncodeReport()
    report.texts += len(texts)
    texts = list(texts)
    if not texts:
        return np.zeros((0, _output_dim(encoder, options)), dtype=np.float32)
    if options.long_texts == "sliding-window":
        if options.pooling == "none":
            raise ValueError("pooling 'none' returns token vectors; it cannot average sliding windows")
        windows = tokenizer.encode_windows(texts, max_length=max_length, stride=options.stride)
        report.windows += len(windows.text_index)
        vectors = _run(encoder, tokenizer.pad_id, windows.encoding.input_ids, options, report)
        return _average_windows(vectors, windows.text_index, len(texts), options.normalize)
    batch = tokenizer.encode_batch(texts, max_length=max_length,
                                   truncation=None if options.long_texts == "error" else "longest_first")
    report.truncated += batch.num_truncated
    if batch.num_truncated:
        warnings.warn(f"{batch.num_truncated} of {len(texts)} texts were longer than {max_length} tokens and "
                      "were truncated; pass long_texts='sliding-window' (--long-texts sliding-window) to keep "
                      "all of them", stacklevel=3)
    return _run(encoder, tokenizer.pad_id, batch.input_ids, options, report)


def _run(encoder: Encoder, pad_id: int, input_ids: list[list[int]], options: EncodeOptions,
         report: EncodeReport):
    device = next(encoder.parameters()).device
    order = np.argsort([-len(ids) for ids in input_ids], kind="stable")   # longest first: memory peaks early
    results: list = [None] * len(input_ids)
    all_layers = needs_all_layers(options.pooling, options.layers)
    progress = _progress(len(input_ids), options.progress)
    with torch.inference_mode(), autocast(device):
        for start in range(0, len(order), options.batch_size):
            rows = order[start:start + options.batch_size]
            tensors = pad_to_tensors([input_ids[i] for i in rows], pad_id)
            ids = tensors["input_ids"].to(device)
            mask = tensors["attention_mask"].to(device)
            report.tokens += int(mask.sum())
            out = encoder(ids, mask, output_hidden_states=all_layers)
            tokens = select_layers(out.hidden_states, options.layers) if all_layers else out.last_hidden_state
            if options.pooling == "none":
                for row, vectors, length in zip(rows, tokens.float().cpu().numpy(), mask.sum(1).tolist()):
                    results[row] = vectors[:length]
            else:
                first = out.hidden_states[1] if options.pooling == "first-last-avg" else None
                vectors = pool(tokens, mask, options.pooling, pooled_output=out.pooled_output, first_layer=first)
                if options.normalize:
                    vectors = normalize(vectors)
                for row, vector in zip(rows, vectors.float().cpu().numpy()):
                    results[row] = vector
            if progress is not None:
                progress.update(len(rows))
    if progress is not None:
        progress.close()
    return results if options.pooling == "none" else np.stack(results).astype(np.float32, copy=False)


def _average_windows(vectors: np.ndarray, text_index: list[int], count: int, normalized: bool) -> np.ndarray:
    sums = np.zeros((count, vectors.shape[1]), dtype=np.float64)
    np.add.at(sums, np.asarray(text_index), vectors)
    sums /= np.maximum(np.bincount(text_index, minlength=count), 1)[:, None]
    if normalized:
        sums /= np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return sums.astype(np.float32)


def _output_dim(encoder: Encoder, options: EncodeOptions) -> int:
    return encoder.config.hidden_size * (min(4, encoder.config.num_layers) if options.layers == "concat-last-4" else 1)


def _progress(total: int, enabled: bool):
    if not enabled or total < 1000:
        return None
    from tqdm import tqdm
    return tqdm(total=total, unit="text", file=sys.stderr, desc="encoding")
