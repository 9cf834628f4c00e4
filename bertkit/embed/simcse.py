"""Contrastive sentence-embedding training on the shared loop: SimCSE and multiple-negatives ranking.

Unsupervised SimCSE (Gao et al. 2021): each sentence is encoded twice; the two dropout masks make two
"views", and each view must pick its twin among the batch's other sentences (in-batch negatives),
InfoNCE with temperature 0.05 on cosine similarity.
Supervised pairs / triplets (multiple-negatives ranking, Henderson et al. 2017; SimCSE's supervised
variant): each anchor must pick its positive among all positives of the batch, plus every hard negative
of the batch when the file has a `negative` field.

Input: `.txt` (one sentence per line) for unsupervised, `.jsonl` with `text_a`, `text_b` [, `negative`]
for pairs. Output: a model folder whose bertkit.json records the pooling trained with (encode default).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.atomic_write import write_json
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.data.text import check_readable, iter_lines
from bertkit.embed.evaluation import (pair_similarities, paraphrase_targets, read_jsonl, read_pairs,
                                      retrieval_metrics, spearman, text_field)
from bertkit.embed.config import Mode, SimCSEConfig
from bertkit.errors import BertkitError, InputFileError
from bertkit.model.sentence import SentenceEncoder, SentencePipeline
from bertkit.tokenizer.padding import pad_to_tensors
from bertkit.train import IndexedBatches
from bertkit.train.fit import Job, check_required, fit

def contrastive_loss(anchors: torch.Tensor, candidates: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE: anchors (B, C) against candidates (M >= B, C); anchor i's positive is candidate i."""
    similarity = F.normalize(anchors, dim=-1) @ F.normalize(candidates, dim=-1).T / temperature  # (B, M)
    labels = torch.arange(len(anchors), device=anchors.device)
    return F.cross_entropy(similarity.float(), labels)


@dataclass(frozen=True)
class ContrastiveData:
    anchors: list[str]
    positives: Optional[list[str]]     # None: unsupervised (the anchor is its own positive, via dropout)
    negatives: Optional[list[str]]


def read_training_file(path: str | Path, mode: Mode = "auto", max_examples: Optional[int] = None,
                       encoding: str = "utf-8") -> ContrastiveData:
    path = check_readable(path, (".txt", ".jsonl"))
    is_jsonl = path.name.removesuffix(".gz").endswith(".jsonl")
    if mode == "auto":
        mode = "pairs" if is_jsonl else "unsupervised"
    if mode == "unsupervised" and not is_jsonl:
        texts = [line for _, line in iter_lines(path, encoding) if line.strip()][:max_examples]
        if len(texts) < 2:
            raise InputFileError(path, "needs at least 2 non-empty lines (in-batch negatives)")
        return ContrastiveData(texts, None, None)
    rows = read_jsonl(path, encoding)[:max_examples]
    if mode == "unsupervised":
        return ContrastiveData([text_field(path, n, r, "text") for n, r in rows], None, None)
    anchors = [text_field(path, n, r, "text_a") for n, r in rows]
    positives = [text_field(path, n, r, "text_b") for n, r in rows]
    with_negative = [("negative" in r) for _, r in rows]
    if any(with_negative) and not all(with_negative):
        first = next(n for (n, r), has in zip(rows, with_negative) if not has)
        raise InputFileError(path, "some rows have a 'negative' and this one does not; give all or none", first)
    negatives = [text_field(path, n, r, "negative") for n, r in rows] if all(with_negative) else None
    return ContrastiveData(anchors, positives, negatives)


def embed(net: SentenceEncoder, tokenizer, texts: list[str], max_length: int, batch_size: int = 128) -> np.ndarray:
    """Vectors of a model under training (eval mode is the caller's business)."""
    device = next(net.parameters()).device
    out = []
    for start in range(0, len(texts), batch_size):
        ids = tokenizer.encode_batch(texts[start:start + batch_size], max_length=max_length).input_ids
        batch = {k: v.to(device) for k, v in pad_to_tensors(ids, tokenizer.pad_id).items()}
        out.append(net(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def run_simcse(config: SimCSEConfig):
    """Train and save to config.output; returns the loop's TrainResult."""
    check_required(config, "simcse")
    if config.data.batch_size < 2:
        raise BertkitError("--batch-size must be >= 2: the other sentences of a batch are the negatives")
    about: dict = {}
    result = fit(config, lambda: _simcse_job(config, about))
    write_json(Path(config.output) / "simcse.json", {"config": asdict(config), **about, "steps": result.steps,
                                                     "last_eval": result.loop.last_eval})
    return result.loop


def _simcse_job(config: SimCSEConfig, about: dict) -> Job:
    """The job `run_simcse` trains (fit seeded the RNGs); `about` gets the run's summary for simcse.json."""
    checkpoint = load_checkpoint(config.model)
    tokenizer = checkpoint.tokenizer
    if tokenizer is None:
        raise BertkitError(f"{config.model}: the model folder has no vocab.txt or tokenizer.json")
    data = read_training_file(config.data.train, config.mode, config.data.max_train_examples, config.data.encoding)
    # the folder's sentence path with this pooling: its dense layers train too; normalization does not matter to a
    # cosine loss, and a whitening fitted on the old encoder's vectors is dropped (after_training)
    source = checkpoint.sentence.after_training()
    settings = source.config.replace(pooling=config.pooling, layers=config.layers, normalize=False)
    try:
        net = SentenceEncoder(checkpoint.encoder, settings, source.dense)
    except ValueError as err:
        raise BertkitError(f"simcse: {err}") from None
    max_length = min(config.data.max_length, checkpoint.config.max_length)

    def make_batch(indices: list[int], epoch: int) -> dict:
        texts = [data.anchors[i] for i in indices]
        if data.positives is None:
            texts = texts + texts                      # two dropout views of every sentence
        else:
            texts += [data.positives[i] for i in indices]
            if data.negatives is not None:
                texts += [data.negatives[i] for i in indices]
        ids = tokenizer.encode_batch(texts, max_length=max_length).input_ids
        return {**pad_to_tensors(ids, tokenizer.pad_id), "anchors": len(indices)}

    def loss_fn(model, batch):
        vectors = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])  # (B*(2|3), C)
        count = batch["anchors"]
        loss = contrastive_loss(vectors[:count], vectors[count:], config.temperature)
        return loss, {"tokens": float(batch["attention_mask"].sum())}

    # drop_last: a lone final sentence would have no negatives at all.
    batches = IndexedBatches(len(data.anchors), config.data.batch_size, make_batch, seed=config.train.seed,
                             drop_last=True)
    if len(batches) == 0:
        raise BertkitError(f"{config.data.train}: {len(data.anchors)} examples do not fill one batch of "
                           f"{config.data.batch_size}; lower --batch-size")
    evaluate = None
    if config.data.dev:
        dev_a, dev_b, dev_scores = read_pairs(config.data.dev, config.data.encoding, config.data.max_dev_examples)
        if dev_scores is None:         # the corpus and relevance of evaluate-embeddings --pairs
            dev_b, dev_relevant = paraphrase_targets(dev_b)

        def evaluate(model):
            size = config.data.eval_batch_size
            va, vb = embed(model, tokenizer, dev_a, max_length, size), embed(model, tokenizer, dev_b, max_length, size)
            if dev_scores is not None:
                return {"spearman": spearman(pair_similarities(va, vb), dev_scores)}
            return {"recall_at_1": retrieval_metrics(va, vb, dev_relevant).recall_at_1}

    output = Path(config.output)
    mode = "unsupervised" if data.positives is None else ("triplets" if data.negatives is not None else "pairs")
    about.update(mode=mode, temperature=config.temperature, examples=len(data.anchors), layers=config.layers)

    def save(model: SentenceEncoder, last_eval: dict) -> None:
        meta = {"task": "sentence-embedding", "trained_from": str(config.model),
                "simcse": {**about, "last_eval": last_eval}}
        model.cpu().eval()
        sentence = SentencePipeline(settings.replace(normalize=source.config.normalize), list(model.dense))
        save_checkpoint(output, model.encoder, tokenizer, meta=meta, sentence=sentence)

    # evaluations are logged but pick no model (metric None): fit saves the last one
    return Job(net, loss_fn, batches, save, evaluate, record={"simcse": dict(about)})
