"""Pre-training a causal LM on plain text: documents -> one token stream -> fixed-length blocks.

Each document is tokenized whole (lines joined by newlines) and followed by <|endoftext|>, as GPT-2's
training data was; the stream is cut into blocks of block_size + 1 tokens overlapping by one, so every
token after the first is a next-token target exactly once. Training runs on the shared loop
(bertkit.train) with causal_lm_loss; evaluation reports held-out loss and perplexity.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.data.corpus import iter_documents
from bertkit.errors import BertkitError
from bertkit.generate.pretrain_config import GPTDataConfig
from bertkit.model.causal_lm import CausalLM, causal_lm_loss
from bertkit.train import IndexedBatches, TrainConfig, TrainResult, train

DOCUMENTS_PER_CALL = 256   # documents per tokenizer call: one Python -> Rust crossing per batch


def tokenize_documents(tokenizer, paths: Sequence[str | Path], max_documents: Optional[int] = None) -> list[np.ndarray]:
    """One int32 array per document, each ending with the tokenizer's eos_id."""
    docs: list[np.ndarray] = []
    pending: list[str] = []

    def flush() -> None:
        for ids in tokenizer.encode_batch(pending):
            docs.append(np.asarray(ids + [tokenizer.eos_id], dtype=np.int32))
        pending.clear()

    for lines, _ in iter_documents(paths, split=False):
        pending.append("\n".join(lines))
        if len(pending) >= DOCUMENTS_PER_CALL:
            flush()
        if max_documents is not None and len(docs) + len(pending) >= max_documents:
            break
    flush()
    return docs


def split_documents(docs: list[np.ndarray], heldout_fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(train stream, held-out stream): whole documents held out, chosen at random, so no text leaks."""
    if len(docs) < 2:
        raise BertkitError(f"{len(docs)} document(s): holding text out needs two or more; separate documents "
                           "with a blank line")
    order = np.random.default_rng(seed).permutation(len(docs))
    num_heldout = min(len(docs) - 1, max(1, int(round(len(docs) * heldout_fraction))))
    heldout = sorted(order[:num_heldout].tolist())
    held = set(heldout)
    train_docs = [docs[i] for i in range(len(docs)) if i not in held]
    return np.concatenate(train_docs), np.concatenate([docs[i] for i in heldout])


def blocks(stream: np.ndarray, block_size: int) -> torch.Tensor:
    """(N, block_size + 1) blocks; block k holds tokens [k*block_size, (k+1)*block_size]; the tail is dropped."""
    count = (len(stream) - 1) // block_size
    if count < 1:
        raise ValueError(f"{len(stream)} tokens do not fill one block of {block_size + 1}")
    starts = np.arange(count)[:, None] * block_size + np.arange(block_size + 1)[None, :]
    return torch.from_numpy(stream[starts].astype(np.int64))


def block_batches(stream: np.ndarray, block_size: int, batch_size: int, seed: int = 0) -> IndexedBatches:
    data = blocks(stream, block_size)
    return IndexedBatches(len(data), batch_size, lambda indices, epoch: {"input_ids": data[indices]},
                          shuffle=True, seed=seed, drop_last=True)


@torch.no_grad()
def heldout_perplexity(model: CausalLM, stream: np.ndarray, block_size: int, batch_size: int = 32) -> dict[str, float]:
    data = blocks(stream, block_size)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(data), batch_size):
        batch = data[start:start + batch_size].to(device)
        logits = model(batch[:, :-1]).logits.float()
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1),
                                       reduction="sum"))
        count += batch[:, 1:].numel()
    model.train(was_training)
    loss = total / count
    return {"loss": loss, "perplexity": math.exp(loss)}


def unigram_perplexity(train_stream: np.ndarray, stream: np.ndarray, block_size: int, vocab_size: int) -> float:
    """The baseline: token frequencies of the training stream (add-one smoothed), on the same held-out
    targets heldout_perplexity scores."""
    counts = np.bincount(train_stream, minlength=vocab_size).astype(np.float64) + 1.0
    log_probs = np.log(counts / counts.sum())
    targets = blocks(stream, block_size)[:, 1:].reshape(-1).numpy()
    return math.exp(-float(log_probs[targets].mean()))


def heldout_evaluation(heldout_stream: Optional[np.ndarray], data: GPTDataConfig
                       ) -> Optional[Callable[[CausalLM], dict[str, float]]]:
    """evaluate(model) -> held-out loss and perplexity, or None without held-out text."""
    if heldout_stream is None:
        return None
    return lambda m: heldout_perplexity(m, heldout_stream, data.block_size, data.eval_batch_size)


def train_causal_lm(model: CausalLM, train_stream: np.ndarray, heldout_stream: Optional[np.ndarray],
                    data: GPTDataConfig, train_config: TrainConfig) -> TrainResult:
    """Pre-train `model` in place on the shared loop, without a folder (the job, pretrain_job.py, runs through
    fit); evaluations report held-out loss and perplexity."""
    batches = block_batches(train_stream, data.block_size, data.batch_size, seed=train_config.seed)
    return train(model, causal_lm_loss, batches, train_config, evaluate=heldout_evaluation(heldout_stream, data))
