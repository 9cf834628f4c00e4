"""UniLM sequence-to-sequence fine-tuning as a job (`bertkit finetune --task seq2seq`) and decoding of the
saved folder (`bertkit generate --source`, `bertkit predict`).

Pairs are JSONL rows `{"source": ..., "target": ...}`; `text_a` / `text_b` (the paraphrase-pair files) are
read the same way. The model is the folder's encoder + MLM head under the seq2seq mask (bertkit.finetune.seq2seq.unilm),
trained with seq2seq_loss on the shared loop; with --dev the lowest dev loss picks the model. The saved folder
is a BertForMaskedLM folder whose bertkit.json says task "seq2seq".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from bertkit.atomic_write import write_jsonl
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.errors import BertkitError, CheckpointError
from bertkit.finetune.loop_job import LoopJobConfig, max_length_for, mlm_head_of
from bertkit.finetune.seq2seq.pairs import Pair, read_pair_splits, read_pairs
from bertkit.finetune.tasks import TASKS
from bertkit.finetune.seq2seq.unilm import Seq2SeqLM, seq2seq_decode, seq2seq_inputs, seq2seq_loss
from bertkit.runtime import pick_device
from bertkit.tokenizer.coverage import warn_unknown
from bertkit.tokenizer.spacing import tidy_spacing
from bertkit.train import IndexedBatches
from bertkit.train.fit import Job, JobResult, check_required, fit

TASK = "seq2seq"
METRIC = TASKS[TASK].main_metric           # picks the best model (lowest dev loss)


@dataclass
class Seq2SeqConfig(LoopJobConfig):
    """data.max_length counts [CLS] source [SEP] target [SEP]; targets get at most half of it."""


def token_ids(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids without special tokens, one list per text (the seq2seq rows add [CLS] / [SEP] themselves)."""
    return [e.ids for e in tokenizer.backend.encode_batch(list(texts), add_special_tokens=False)]


def tokenized_pairs(tokenizer, pairs: Sequence[Pair], where: str) -> tuple[list[list[int]], list[list[int]]]:
    """(source ids, target ids) of training pairs, warning when the vocabulary misses much of `where`."""
    sources = token_ids(tokenizer, [p.source for p in pairs])
    targets = token_ids(tokenizer, [p.target for p in pairs])
    warn_unknown(tokenizer, [p.source for p in pairs] + [p.target for p in pairs], where, sources + targets)
    return sources, targets


def _batch(tokenizer, sources: list[list[int]], targets: list[list[int]], max_length: int) -> dict:
    return seq2seq_inputs(sources, targets, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, max_length)


@torch.no_grad()
def evaluate_pairs(model: Seq2SeqLM, tokenizer, pairs: Sequence[Pair], max_length: int, batch_size: int = 64) -> dict:
    """Teacher-forced dev loss (per target token, closing [SEP] included) and its perplexity."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    sources = token_ids(tokenizer, [p.source for p in pairs])
    targets = token_ids(tokenizer, [p.target for p in pairs])
    total, count = 0.0, 0.0
    for start in range(0, len(pairs), batch_size):
        batch = _batch(tokenizer, sources[start:start + batch_size], targets[start:start + batch_size], max_length)
        loss, stats = seq2seq_loss(model, {k: v.to(device) for k, v in batch.items()})
        total += float(loss) * stats["tokens"]
        count += stats["tokens"]
    model.train(was_training)
    loss = total / max(count, 1.0)
    return {"loss": loss, "perplexity": math.exp(min(loss, 50.0)), "pairs": len(pairs)}


def run_seq2seq_finetune(config: Seq2SeqConfig) -> JobResult:
    check_required(config, "finetune --task seq2seq")
    if config.train.epochs < 1:
        raise BertkitError(f"--epochs must be >= 1 for --task seq2seq, got {config.train.epochs}")
    return fit(config, lambda: _seq2seq_job(config))


def _seq2seq_job(config: Seq2SeqConfig) -> Job:
    """The job `run_seq2seq_finetune` trains (fit seeded the RNGs)."""
    checkpoint = load_checkpoint(config.model)
    mlm = mlm_head_of(checkpoint, "seq2seq fine-tuning")
    max_length = max_length_for(config, checkpoint)
    tokenizer = checkpoint.tokenizer
    model = Seq2SeqLM(checkpoint.encoder, mlm)
    train_pairs, dev_pairs = read_pair_splits(config.data)
    sources, targets = tokenized_pairs(tokenizer, train_pairs, f"fine-tune data {config.data.train}")

    def make_batch(indices: list[int], epoch: int) -> dict:
        return _batch(tokenizer, [sources[i] for i in indices], [targets[i] for i in indices], max_length)

    batches = IndexedBatches(len(train_pairs), config.data.batch_size, make_batch, seed=config.train.seed)
    output = Path(config.output)
    meta = {"task": TASK, "max_length": max_length, "finetuned_from": str(config.model)}

    def save(net: Seq2SeqLM, metrics: dict) -> None:
        save_checkpoint(output, net.encoder, tokenizer, {"mlm": net.mlm}, {**meta, "dev_metrics": metrics})

    def evaluate_dev(net: Seq2SeqLM) -> dict:
        return evaluate_pairs(net, tokenizer, dev_pairs, max_length, config.data.eval_batch_size)

    evaluate = evaluate_dev if dev_pairs is not None else None

    return Job(model, seq2seq_loss, batches, save, evaluate, METRIC if evaluate is not None else None,
               record={"train_pairs": len(train_pairs)})



class Seq2SeqGenerator:
    """A saved seq2seq folder, ready to decode: generator.decode(["source text", ...]) -> target texts."""

    def __init__(self, folder: str | Path, device: Optional[str] = None):
        checkpoint = load_checkpoint(folder)
        task = (checkpoint.meta or {}).get("task")
        if task != TASK:
            raise CheckpointError(f"{folder} was not fine-tuned for seq2seq (bertkit.json task: {task!r}); run "
                                  "bertkit finetune --task seq2seq first")
        self.tokenizer = checkpoint.tokenizer
        self.max_length = int(checkpoint.meta.get("max_length", checkpoint.config.max_length))   # as trained
        self.model = Seq2SeqLM(checkpoint.encoder, mlm_head_of(checkpoint, "seq2seq decoding"))
        self.model.to(pick_device(device)).eval()
        special = (self.tokenizer.cls_id, self.tokenizer.pad_id, self.tokenizer.mask_id,
                   self.tokenizer.token_to_id("[UNK]"))
        self.banned_ids = tuple(i for i in special if i is not None)   # never part of a target text

    def decode(self, sources: Sequence[str], max_new_tokens: int = 64, use_cache: bool = True, num_beams: int = 1,
               no_repeat_ngram_size: int = 0, length_penalty: float = 1.0,
               repetition_penalty: float = 1.0) -> list[str]:
        """One target text per source: greedy (stops at [SEP]) unless num_beams > 1 asks for beam search;
        no_repeat_ngram_size n > 0 never repeats an n-gram of the target, repetition_penalty p != 1 scales the
        scores of tokens already in it (HF's semantics, bertkit.generate.repetition). With the key/value cache
        unless use_cache=False (same tokens, slower)."""
        out = []
        for ids in token_ids(self.tokenizer, sources):
            target = seq2seq_decode(self.model, ids, self.tokenizer.cls_id, self.tokenizer.sep_id,
                                    max_new_tokens, banned_ids=self.banned_ids, use_cache=use_cache,
                                    num_beams=num_beams, no_repeat_ngram_size=no_repeat_ngram_size,
                                    length_penalty=length_penalty, repetition_penalty=repetition_penalty)
            out.append(tidy_spacing(self.tokenizer.decode(target)))
        return out


def evaluate_seq2seq_file(folder: str | Path, data: str | Path, encoding: str = "utf-8", batch_size: int = 64) -> dict:
    generator = Seq2SeqGenerator(folder)
    return evaluate_pairs(generator.model, generator.tokenizer, read_pairs(data, encoding), generator.max_length,
                          batch_size)


def predict_seq2seq_file(folder: str | Path, input_path: str | Path, output_path: str | Path,
                         encoding: str = "utf-8", max_new_tokens: int = 64, num_beams: int = 1,
                         no_repeat_ngram_size: int = 0, repetition_penalty: float = 1.0) -> int:
    """One JSON line per input row: line, source, generated (and target when the row has one)."""
    generator = Seq2SeqGenerator(folder)
    pairs = read_pairs(input_path, encoding, require_target=False)
    generated = generator.decode([p.source for p in pairs], max_new_tokens, num_beams=num_beams,
                                 no_repeat_ngram_size=no_repeat_ngram_size, repetition_penalty=repetition_penalty)
    return write_jsonl(output_path, ({"line": pair.line, "source": pair.source, "generated": text,
                                      **({"target": pair.target} if pair.target is not None else {})}
                                     for pair, text in zip(pairs, generated)))


__all__ = ["Pair", "Seq2SeqConfig", "Seq2SeqGenerator", "TASK", "evaluate_seq2seq_file", "predict_seq2seq_file",
           "read_pairs", "run_seq2seq_finetune", "token_ids", "tokenized_pairs"]
