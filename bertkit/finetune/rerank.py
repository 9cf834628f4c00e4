"""`bertkit finetune --task rerank`: a cross-encoder from {"query", "positive", "negative"} JSONL.

Each query's candidates are its positive, its given negatives ("negative": a text or a list; "negatives" too)
and, as in-batch negatives, the positives of other queries in the batch. Every (query, candidate) pair runs
through encoder -> [CLS] -> a two-label head; the relevance score is logit(relevant) - logit(irrelevant).
Losses: listwise (softmax cross-entropy with the positive as the target, the "localized contrastive" loss of
Gao et al. 2021, Rethink Training of BERT Rerankers) or pairwise (RankNet's logistic loss, Burges et al. 2005,
of the positive over each negative). With --dev, the mean reciprocal rank of the positive picks the model.

The saved folder is a pair-classification folder (labels irrelevant, relevant): `bertkit predict` gives
P(relevant) for "query ||| text" rows and the server's /rerank ranks with it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.errors import BertkitError, CheckpointError, InputFileError
from bertkit.finetune.model import FinetuneModel, hf_config_extra, model_from_checkpoint, model_meta
from bertkit.finetune.config import TaskOptions
from bertkit.finetune.tasks import TASKS
from bertkit.finetune.triples import Triple, read_triples
from bertkit.finetune.loop_job import LoopJobConfig, max_length_for
from bertkit.tokenizer.coverage import warn_unknown
from bertkit.tokenizer.padding import pad_to_tensors
from bertkit.train import IndexedBatches
from bertkit.train.fit import Job, JobResult, check_required, fit

TASK = "rerank"
SAVED_TASK = TASKS[TASK].saved_as
METRIC = TASKS[TASK].main_metric           # picks the best model
LABELS = ["irrelevant", "relevant"]
DEV_IN_BATCH = 9   # dev ranking: each query's candidates also hold the positives of the next 9 dev queries


@dataclass
class RerankConfig(LoopJobConfig):
    """model: any encoder folder (a fresh two-label head is added) or a rerank folder to train further."""
    loss: Literal["listwise", "pairwise"] = "listwise"
    negatives: int = 7              # given negatives used per query (the first N of its list)
    in_batch_negatives: int = 3     # other queries' positives added as negatives per query (0: none)


def candidates(triples: list[Triple], indices: list[int], given: int, in_batch: int) -> list[list[str]]:
    """Per query: [positive, given negatives..., other queries' positives...] (the positive first)."""
    groups = []
    for slot, i in enumerate(indices):
        others = [indices[(slot + k) % len(indices)] for k in range(1, min(in_batch, len(indices) - 1) + 1)]
        others = [j for j in others if triples[j].positive != triples[i].positive]
        groups.append([triples[i].positive, *triples[i].negatives[:given], *(triples[j].positive for j in others)])
    return groups


def pair_batch(tokenizer, queries: list[str], groups: list[list[str]], max_length: int) -> dict:
    """All (query, candidate) pairs as one padded batch; `group` (Q, C) indexes rows, -1 where a query has fewer."""
    firsts = [q for q, group in zip(queries, groups) for _ in group]
    seconds = [text for group in groups for text in group]
    encoded = tokenizer.encode_batch(firsts, pairs=seconds, max_length=max_length, truncation="longest_first")
    padded = pad_to_tensors(encoded.input_ids, tokenizer.pad_id, encoded.token_type_ids)  # each (R, T)
    input_ids, mask, types = padded["input_ids"], padded["attention_mask"], padded["token_type_ids"]
    width = max(len(g) for g in groups)
    group = torch.full((len(groups), width), -1, dtype=torch.long)                      # (Q, C)
    start = 0
    for row, texts in enumerate(groups):
        group[row, :len(texts)] = torch.arange(start, start + len(texts))
        start += len(texts)
    return {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": types, "group": group}


def group_scores(net: FinetuneModel, batch: dict) -> torch.Tensor:
    """(Q, C) relevance scores, -inf where a query has no candidate."""
    logits = net(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).float()   # (R, 2)
    scores = logits[:, 1] - logits[:, 0]                                                         # (R,)
    group = batch["group"]
    return scores[group.clamp(min=0)].masked_fill(group < 0, float("-inf"))                     # (Q, C)


def ranking_loss(scores: torch.Tensor, kind: str) -> torch.Tensor:
    """scores (Q, C) with the positive in column 0."""
    if kind == "listwise":
        return F.cross_entropy(scores, torch.zeros(scores.shape[0], dtype=torch.long, device=scores.device))
    margins = scores[:, 1:] - scores[:, :1]                                  # (Q, C-1): negative - positive
    valid = torch.isfinite(margins)
    return F.softplus(margins[valid]).mean()


@torch.no_grad()
def evaluate_ranking(net: FinetuneModel, tokenizer, triples: list[Triple], config: RerankConfig,
                     max_length: int) -> dict:
    """MRR of the positive among its given negatives and the next dev queries' positives; top-1 accuracy."""
    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    order = list(range(len(triples)))
    reciprocal, top1 = 0.0, 0
    per_batch = max(1, config.data.eval_batch_size // (1 + config.negatives + DEV_IN_BATCH))
    for start in range(0, len(order), per_batch):
        indices = order[start:start + per_batch]
        window = order[start:start + per_batch + DEV_IN_BATCH]     # the next queries' positives, too
        groups = [candidates(triples, [i, *[j for j in window if j != i]], config.negatives, DEV_IN_BATCH)[0]
                  for i in indices]
        batch = pair_batch(tokenizer, [triples[i].query for i in indices], groups, max_length)
        scores = group_scores(net, {k: v.to(device) for k, v in batch.items()})
        rank = 1 + (scores[:, 1:] > scores[:, :1]).sum(dim=1)               # (Q,) rank of the positive
        reciprocal += float((1.0 / rank.float()).sum())
        top1 += int((rank == 1).sum())
    net.train(was_training)
    return {"mrr": reciprocal / len(triples), "top1_accuracy": top1 / len(triples), "queries": len(triples)}


def run_rerank_finetune(config: RerankConfig) -> JobResult:
    check_required(config, "finetune --task rerank")
    if config.negatives < 0 or config.in_batch_negatives < 0:
        raise BertkitError("--negatives and --in-batch-negatives must be >= 0")
    return fit(config, lambda: _rerank_job(config))


def _rerank_job(config: RerankConfig) -> Job:
    """The job `run_rerank_finetune` trains (fit seeded the RNGs)."""
    checkpoint = load_checkpoint(config.model)
    if checkpoint.tokenizer is None:
        raise CheckpointError(f"{config.model}: the model folder has no vocab.txt or tokenizer.json")
    max_length = max_length_for(config, checkpoint)
    tokenizer = checkpoint.tokenizer
    train_triples = read_triples(config.data.train, config.data.encoding)[:config.data.max_train_examples]
    data = config.data
    dev_triples = read_triples(data.dev, data.encoding)[:data.max_dev_examples] if data.dev else None
    if config.in_batch_negatives == 0 and not any(t.negatives[:config.negatives] for t in train_triples):
        raise InputFileError(config.data.train, "no row has a negative and --in-batch-negatives is 0: nothing to rank "
                                           "the positives against")
    warn_unknown(tokenizer, [text for t in train_triples for text in (t.query, t.positive, *t.negatives)],
                 f"fine-tune data {config.data.train}")
    model = model_from_checkpoint(checkpoint, SAVED_TASK, LABELS)

    def make_batch(indices: list[int], epoch: int) -> dict:
        groups = candidates(train_triples, indices, config.negatives, config.in_batch_negatives)
        return pair_batch(tokenizer, [train_triples[i].query for i in indices], groups, max_length)

    def loss_fn(net, batch):
        scores = group_scores(net, batch)
        return ranking_loss(scores, config.loss), {"tokens": float(batch["attention_mask"].sum())}

    batches = IndexedBatches(len(train_triples), config.data.batch_size, make_batch, seed=config.train.seed)
    output = Path(config.output)
    options = dataclasses.asdict(TaskOptions(max_length=max_length))
    extra = {"trained_as": TASK, "rerank_loss": config.loss, "task_options": options,
             "finetuned_from": str(config.model)}

    def save(net: FinetuneModel, metrics: dict) -> None:
        save_checkpoint(output, net.encoder, tokenizer, {net.head_key: net.head},
                        model_meta(net, {**extra, "dev_metrics": metrics}), hf_config_extra(net),
                        sentence=checkpoint.sentence.after_training())

    evaluate = None
    if dev_triples is not None:
        def evaluate(net):
            return evaluate_ranking(net, tokenizer, dev_triples, config, max_length)

    return Job(model, loss_fn, batches, save, evaluate, METRIC if evaluate is not None else None,
               record={"train_queries": len(train_triples)})

