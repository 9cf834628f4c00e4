"""SimBERT (Su 2020): one BERT trained jointly to generate a similar sentence and to retrieve it
(`bertkit finetune --task simbert`), then asked for paraphrases that it ranks itself (`bertkit generate --similar`).

Training rows are the UniLM seq2seq batches of bertkit.finetune.seq2seq.unilm, each pair twice: row 2i is a_i -> b_i and
row 2i+1 is b_i -> a_i. One forward pass under the seq2seq mask gives both losses:
- generation: next-token cross-entropy on the target side (unilm.next_token_targets), as `--task seq2seq`;
- similarity: the source side sees only the source, so pooling it (the folder's one sentence path,
  model/sentence.py, on the source tokens) is the source's own sentence vector. a_i must pick b_i among the
  batch's b's and b_i pick a_i among the a's: InfoNCE on cosine x scale (SimBERT's 30), the other pairs of the
  batch being the negatives.
loss = generation + similarity_weight x similarity. The saved folder is a BertForMaskedLM folder (task
"simbert") whose bertkit.json "encode" names the pooling trained, so `bertkit encode` / bertkit.load(...).encode
make the vectors the ranking uses. A folder without an MLM head (a sentence-transformers model such as MiniLM)
gets a new MaskedLMHead over the tied word embeddings, as transformers does for BertForMaskedLM.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.embed.simcse import contrastive_loss
from bertkit.errors import BertkitError, BertkitWarning, CheckpointError
from bertkit.features import EncodeOptions, encode_texts
from bertkit.finetune.loop_job import LoopJobConfig, max_length_for, mlm_head_of
from bertkit.finetune.seq2seq.job import Pair, token_ids, tokenized_pairs
from bertkit.finetune.seq2seq.pairs import read_pair_splits
from bertkit.finetune.tasks import TASKS
from bertkit.finetune.seq2seq.unilm import Seq2SeqLM, next_token_targets, seq2seq_inputs, seq2seq_sample
from bertkit.generate.repetition import RepetitionConfig
from bertkit.generate.sampling import SamplingConfig
from bertkit.model.heads import MaskedLMHead
from bertkit.model.sentence import SentenceEncoder, SentencePipeline
from bertkit.runtime import pick_device
from bertkit.tokenizer.spacing import tidy_spacing
from bertkit.train import IndexedBatches
from bertkit.train.fit import Job, JobResult, check_required, fit

TASK = "simbert"
METRIC = TASKS[TASK].main_metric           # picks the best model (lowest dev loss)
DEFAULT_SAMPLING = SamplingConfig(temperature=1.0, top_p=0.95)
# Paraphrase sampling's repetition control, chosen on the Bible pairs (BENCHMARKS.md, SimBERT section): no-repeat 3
# removes repeated trigrams (greedy loops included) and leaves the judges' ranks and chrF as they were; a penalty
# of 1.2 cost chrF 1.2 +- 0.4 and left the samples repeating far less than the true verses do; no-repeat 2 bans
# the natural repeats of "of the".
DEFAULT_REPETITION = RepetitionConfig(no_repeat_ngram_size=3, repetition_penalty=1.0)
UNUSED_TOKEN = re.compile(r"\[unused\d+\]")


@dataclass
class SimBertConfig(LoopJobConfig):
    """data.batch_size counts pairs (each gives two rows, a -> b and b -> a); data.max_length counts [CLS] a [SEP] b
    [SEP]."""
    similarity_weight: float = 1.0        # loss = generation + weight x similarity
    scale: float = 30.0                   # cosine x scale before the softmax (SimBERT's 30, temperature 1/30)
    pooling: str = "cls"                  # the sentence vector trained and saved (SimBERT: [CLS]); "folder": keep


class SimBert(nn.Module):
    """The seq2seq LM and the sentence path over one shared encoder."""

    def __init__(self, lm: Seq2SeqLM, sentence: SentenceEncoder):
        super().__init__()
        if sentence.encoder is not lm.encoder:
            raise ValueError("SimBERT's sentence vectors must come from the seq2seq model's own encoder")
        self.lm, self.sentence = lm, sentence

    def forward(self, input_ids, token_type_ids, attention_mask, positions: torch.Tensor):
        """-> (next-token logits (N, V) at `positions` (B, T) bool, each row's source vector (B, D))."""
        out = self.lm.encode(input_ids, token_type_ids, attention_mask, self.sentence.all_layers)
        source_mask = attention_mask * (token_type_ids == 0)                 # (B, T): [CLS] source [SEP]
        return self.lm.logits(out.last_hidden_state[positions]), self.sentence.vectors(out, source_mask)


def pair_rows(tokenizer, a_ids: Sequence[list[int]], b_ids: Sequence[list[int]], max_length: int) -> dict:
    """Seq2seq inputs for pairs, two rows each: 2i = a_i -> b_i, 2i + 1 = b_i -> a_i."""
    sources = [ids for a, b in zip(a_ids, b_ids) for ids in (a, b)]
    targets = [ids for a, b in zip(a_ids, b_ids) for ids in (b, a)]
    return seq2seq_inputs(sources, targets, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, max_length)


@dataclass(frozen=True)
class SimBertLoss:
    """generation + similarity_weight x similarity over pair_rows batches; a loss_fn for bertkit.train.train."""
    scale: float = 30.0
    similarity_weight: float = 1.0

    def __call__(self, model: nn.Module, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
        predicts, targets = next_token_targets(batch)
        logits, vectors = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], predicts)
        generation = F.cross_entropy(logits.float(), targets)
        a, b = vectors[0::2], vectors[1::2]       # (B, D) each: row 2i's source is a_i, row 2i + 1's is b_i
        temperature = 1.0 / self.scale
        similarity = (contrastive_loss(a, b, temperature) + contrastive_loss(b, a, temperature)) / 2
        loss = generation + self.similarity_weight * similarity
        return loss, {"generation_loss": float(generation.detach()), "similarity_loss": float(similarity.detach()),
                      "tokens": float(targets.numel())}


def mlm_head_or_new(checkpoint) -> MaskedLMHead:
    """The folder's MLM head, or a new one (tied to the word embeddings, initialised as the encoder's layers
    are) with a warning: SimBERT then learns the generation head from the pairs alone."""
    if checkpoint.tokenizer is None:
        raise CheckpointError(f"{checkpoint.path}: the model folder has no vocab.txt or tokenizer.json")
    head = checkpoint.heads.get("mlm")
    if head is not None:
        return head
    warnings.warn(f"{checkpoint.path} has no MLM head; SimBERT starts a new one over the tied word embeddings "
                  "(generation improves with a folder that has one, e.g. from bertkit pretrain)", BertkitWarning,
                  stacklevel=2)
    head = MaskedLMHead(checkpoint.config)
    head.apply(checkpoint.encoder._init_weights)
    return head.to(next(checkpoint.encoder.parameters()).device)


def trained_pipeline(checkpoint, pooling: str) -> SentencePipeline:
    """The folder's sentence steps for an encoder trained further, with the pooling SimBERT trains."""
    pipeline = checkpoint.sentence.after_training()
    if pooling != "folder":
        pipeline = SentencePipeline(pipeline.config.replace(pooling=pooling), pipeline.dense, None)
    return pipeline


@torch.no_grad()
def evaluate_simbert(model: SimBert, tokenizer, pairs: Sequence[Pair], max_length: int, batch_size: int = 32,
                     loss: SimBertLoss = SimBertLoss()) -> dict:
    """Dev losses over pair batches (per target token / per batch) and retrieval: the rank of each b_i among all
    dev b's for the query a_i, by cosine of the sentence vectors (ties count against the pair)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    a_ids = token_ids(tokenizer, [p.source for p in pairs])
    b_ids = token_ids(tokenizer, [p.target for p in pairs])
    generation = similarity = tokens = batches = 0.0
    for start in range(0, len(pairs), batch_size):
        batch = pair_rows(tokenizer, a_ids[start:start + batch_size], b_ids[start:start + batch_size], max_length)
        _, stats = loss(model, {k: v.to(device) for k, v in batch.items()})
        generation += stats["generation_loss"] * stats["tokens"]
        similarity += stats["similarity_loss"]
        tokens += stats["tokens"]
        batches += 1
    options = EncodeOptions(batch_size=batch_size, max_length=max_length)
    queries = encode_texts(model.sentence, tokenizer, [p.source for p in pairs], options)
    corpus = encode_texts(model.sentence, tokenizer, [p.target for p in pairs], options)
    ranks = true_ranks(queries, corpus)
    model.train(was_training)
    generation /= max(tokens, 1.0)
    similarity /= max(batches, 1.0)
    return {"loss": generation + loss.similarity_weight * similarity, "generation_loss": generation,
            "similarity_loss": similarity, "retrieval_mrr": float(np.mean(1.0 / ranks)),
            "retrieval_top1": float(np.mean(ranks == 1)), "mean_rank": float(np.mean(ranks)), "pairs": len(pairs)}


def true_ranks(queries: np.ndarray, corpus: np.ndarray) -> np.ndarray:
    """(N,) rank (1 = first) of corpus row i for query row i by cosine; ties count against it."""
    q = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    c = corpus / np.maximum(np.linalg.norm(corpus, axis=1, keepdims=True), 1e-12)
    scores = q @ c.T                                                          # (N, N)
    own = np.diag(scores)[:, None]
    return (scores >= own).sum(axis=1)                                        # itself counts once: rank >= 1


def run_simbert_finetune(config: SimBertConfig) -> JobResult:
    check_required(config, "finetune --task simbert")
    if config.train.epochs < 1:
        raise BertkitError(f"--epochs must be >= 1 for --task simbert, got {config.train.epochs}")
    if config.data.batch_size < 2:
        raise BertkitError(f"--batch-size must be >= 2 for --task simbert (the other pairs of a batch are the "
                           f"negatives), got {config.data.batch_size}")
    if config.scale <= 0 or config.similarity_weight < 0:
        raise BertkitError(f"--scale must be > 0 and --similarity_weight >= 0, got {config.scale}, "
                           f"{config.similarity_weight}")
    return fit(config, lambda: _simbert_job(config))


def _simbert_job(config: SimBertConfig) -> Job:
    """The job `run_simbert_finetune` trains (fit seeded the RNGs)."""
    checkpoint = load_checkpoint(config.model)
    mlm = mlm_head_or_new(checkpoint)
    max_length = max_length_for(config, checkpoint)
    tokenizer = checkpoint.tokenizer
    pipeline = trained_pipeline(checkpoint, config.pooling)
    try:
        sentence = pipeline.build(checkpoint.encoder, whiten=False)
    except ValueError as err:
        raise BertkitError(f"--pooling {config.pooling}: {err}") from None
    model = SimBert(Seq2SeqLM(checkpoint.encoder, mlm), sentence)
    loss = SimBertLoss(config.scale, config.similarity_weight)
    train_pairs, dev_pairs = read_pair_splits(config.data)
    a_ids, b_ids = tokenized_pairs(tokenizer, train_pairs, f"fine-tune data {config.data.train}")

    def make_batch(indices: list[int], epoch: int) -> dict:
        return pair_rows(tokenizer, [a_ids[i] for i in indices], [b_ids[i] for i in indices], max_length)

    # A short last batch has fewer negatives (a lone pair none): dropped rather than trained on.
    batches = IndexedBatches(len(train_pairs), config.data.batch_size, make_batch, seed=config.train.seed,
                             drop_last=True)
    output = Path(config.output)
    meta = {"task": TASK, "max_length": max_length, "finetuned_from": str(config.model),
            "simbert": {"scale": config.scale, "similarity_weight": config.similarity_weight}}

    def save(net: SimBert, metrics: dict) -> None:
        save_checkpoint(output, net.lm.encoder, tokenizer, {"mlm": net.lm.mlm}, {**meta, "dev_metrics": metrics},
                        sentence=pipeline)

    def evaluate_dev(net: SimBert) -> dict:
        return evaluate_simbert(net, tokenizer, dev_pairs, max_length, config.data.eval_batch_size, loss)

    evaluate = evaluate_dev if dev_pairs is not None else None
    return Job(model, loss, batches, save, evaluate, METRIC if evaluate is not None else None,
               record={"train_pairs": len(train_pairs)})



class Similar(NamedTuple):
    text: str
    cosine: float          # to the input, by the folder's own sentence vectors


class SimBertGenerator:
    """A saved SimBERT folder: generator.similar("text", n) -> up to n sampled paraphrases, best cosine first."""

    def __init__(self, folder: str | Path, device: Optional[str] = None):
        checkpoint = load_checkpoint(folder, device=pick_device(device))
        task = (checkpoint.meta or {}).get("task")
        if task != TASK:
            raise CheckpointError(f"{folder} was not fine-tuned as SimBERT (bertkit.json task: {task!r}); run "
                                  "bertkit finetune --task simbert first")
        self.tokenizer = checkpoint.tokenizer
        self.max_length = int(checkpoint.meta.get("max_length", checkpoint.config.max_length))
        self.model = Seq2SeqLM(checkpoint.encoder, mlm_head_of(checkpoint, "SimBERT generation")).eval()
        self.sentence = checkpoint.sentence.build(checkpoint.encoder)
        self.encode_length = checkpoint.sentence.config.max_length or checkpoint.config.max_length
        special = (self.tokenizer.cls_id, self.tokenizer.pad_id, self.tokenizer.mask_id,
                   self.tokenizer.token_to_id("[UNK]"))
        # BERT vocabularies' placeholder tokens ([unused0] ...) never appear in text; sampling would pick them
        unused = [i for token, i in self.tokenizer.backend.get_vocab().items() if UNUSED_TOKEN.fullmatch(token)]
        self.banned_ids = tuple(i for i in (*special, *unused) if i is not None)

    def sample(self, text: str, num_samples: int, sampling: SamplingConfig = DEFAULT_SAMPLING,
               max_new_tokens: int = 64, seed: Optional[int] = None,
               no_repeat_ngram_size: int = DEFAULT_REPETITION.no_repeat_ngram_size,
               repetition_penalty: float = DEFAULT_REPETITION.repetition_penalty) -> list[str]:
        """num_samples texts sampled from the seq2seq side, in the order drawn (empty ones included).
        no_repeat_ngram_size / repetition_penalty act on each sample's own tokens (bertkit.generate.repetition)."""
        repetition = RepetitionConfig(no_repeat_ngram_size, repetition_penalty)
        generator = None
        if seed is not None:
            generator = torch.Generator(device=next(self.model.parameters()).device).manual_seed(seed)
        ids = token_ids(self.tokenizer, [text])[0]
        drawn = seq2seq_sample(self.model, ids, self.tokenizer.cls_id, self.tokenizer.sep_id, num_samples, sampling,
                               max_new_tokens, self.banned_ids, generator, repetition)
        return [tidy_spacing(self.tokenizer.decode(target)) for target in drawn]

    def rank(self, text: str, candidates: Sequence[str]) -> list[Similar]:
        """The candidates by cosine to `text` (highest first), through the folder's sentence path."""
        if not candidates:
            return []
        vectors = encode_texts(self.sentence, self.tokenizer, [text, *candidates],
                               EncodeOptions(max_length=self.encode_length))
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        cosines = vectors[1:] @ vectors[0]
        order = sorted(range(len(candidates)), key=lambda i: -cosines[i])
        return [Similar(candidates[i], float(cosines[i])) for i in order]

    def similar(self, text: str, n: int = 5, num_samples: Optional[int] = None,
                sampling: SamplingConfig = DEFAULT_SAMPLING, max_new_tokens: int = 64,
                seed: Optional[int] = None, no_repeat_ngram_size: int = DEFAULT_REPETITION.no_repeat_ngram_size,
                repetition_penalty: float = DEFAULT_REPETITION.repetition_penalty) -> list[Similar]:
        """Draw num_samples (default n) paraphrases, drop empty ones, repeats and copies of the input, and return
        the n closest to the input by the model's own vectors. no_repeat_ngram_size / repetition_penalty: see
        sample()."""
        if n < 1:
            raise BertkitError(f"-n must be >= 1, got {n}")
        num_samples = n if num_samples is None else num_samples
        if num_samples < n:
            raise BertkitError(f"--samples ({num_samples}) must be >= -n ({n})")
        seen = {" ".join(text.split()).lower()}
        candidates = []
        for sample in self.sample(text, num_samples, sampling, max_new_tokens, seed, no_repeat_ngram_size,
                                  repetition_penalty):
            key = " ".join(sample.split()).lower()
            if key and key not in seen:
                seen.add(key)
                candidates.append(sample)
        return self.rank(text, candidates)[:n]


__all__ = ["DEFAULT_REPETITION", "DEFAULT_SAMPLING", "SimBert", "SimBertConfig", "SimBertGenerator", "Similar", "TASK",
           "SimBertLoss", "evaluate_simbert", "pair_rows", "run_simbert_finetune", "true_ranks"]
