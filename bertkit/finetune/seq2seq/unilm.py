"""UniLM attention masks (Dong et al. 2019): one BERT encoder as a bidirectional, left-to-right or
sequence-to-sequence language model, chosen by the mask alone; plus seq2seq training and decoding.

Masks are (B, 1, T, T) bool, True = may attend, for Encoder(..., attention_bias=mask). In seq2seq the
source (token_type 0: [CLS] source [SEP]) sees itself bidirectionally and the target (token_type 1:
target [SEP]) sees the whole source and the target up to itself. Training follows the SimBERT /
bert4keras recipe: each target-side position predicts the next token through the MLM head.
"""
from __future__ import annotations

from typing import Literal, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.errors import BertkitError
from bertkit.generate.beam import BeamSearch
from bertkit.generate.repetition import RepetitionConfig, control_repetition
from bertkit.generate.sampling import SamplingConfig, next_token
from bertkit.model.encoder import KeyValueCache

MaskKind = Literal["bidirectional", "left-to-right", "seq2seq"]


def unilm_mask(kind: MaskKind, attention_mask: torch.Tensor,
               token_type_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
    """attention_mask (B, T) 1 on real tokens; token_type_ids (B, T) 0 source / 1 target (seq2seq only)."""
    B, T = attention_mask.shape
    keys = attention_mask.bool()[:, None, None, :]                                  # (B, 1, 1, T)
    if kind == "bidirectional":
        return keys.expand(B, 1, T, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=attention_mask.device).tril()  # (T, T): key j <= query i
    if kind == "left-to-right":
        return keys & causal
    if kind == "seq2seq":
        if token_type_ids is None:
            raise ValueError("a seq2seq mask needs token_type_ids (0 = source, 1 = target)")
        source_key = (token_type_ids == 0)[:, None, None, :]                       # (B, 1, 1, T)
        return keys & (source_key | causal)
    raise ValueError(f"unknown mask kind {kind!r}; choose bidirectional, left-to-right or seq2seq")


def seq2seq_inputs(source_ids: Sequence[Sequence[int]], target_ids: Sequence[Sequence[int]], cls_id: int,
                   sep_id: int, pad_id: int, max_length: int) -> dict[str, torch.Tensor]:
    """[CLS] source [SEP] target [SEP] per pair, right-padded; sources are cut first to fit max_length."""
    rows, types = [], []
    for source, target in zip(source_ids, target_ids):
        target = list(target)[:max(1, max_length // 2 - 1)]
        source = list(source)[:max(1, max_length - len(target) - 3)]
        rows.append([cls_id, *source, sep_id, *target, sep_id])
        types.append([0] * (len(source) + 2) + [1] * (len(target) + 1))
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros_like(input_ids)
    attention_mask = torch.zeros_like(input_ids)
    for i, (row, kind) in enumerate(zip(rows, types)):
        input_ids[i, :len(row)] = torch.tensor(row)
        token_type_ids[i, :len(row)] = torch.tensor(kind)
        attention_mask[i, :len(row)] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


class Seq2SeqLM(nn.Module):
    """A BERT encoder + MLM head used as a UniLM sequence-to-sequence model."""

    def __init__(self, encoder: nn.Module, mlm_head: nn.Module):
        super().__init__()
        if encoder.config.type_vocab_size < 2:
            raise BertkitError("UniLM seq2seq needs segment embeddings (type_vocab_size >= 2) to tell the target "
                               "from the source; RoBERTa-style encoders have one segment")
        self.encoder, self.mlm = encoder, mlm_head

    def encode(self, input_ids, token_type_ids, attention_mask, output_hidden_states: bool = False):
        """The encoder's output under the seq2seq mask. The source rows see only the source, so their vectors
        equal those of the source encoded alone (SimBERT takes its sentence vector from there)."""
        mask = unilm_mask("seq2seq", attention_mask, token_type_ids)
        return self.encoder(input_ids, token_type_ids=token_type_ids, attention_bias=mask,
                            output_hidden_states=output_hidden_states)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(N, C) hidden states -> (N, V) next-token logits through the MLM head (tied to the word embeddings)."""
        return self.mlm(hidden, self.encoder.embeddings.token.weight)

    def forward(self, input_ids, token_type_ids, attention_mask, positions: Optional[torch.Tensor] = None):
        """-> (N, V) logits at `positions` (a (B, T) bool), or (B, V) at each row's last real token."""
        hidden = self.encode(input_ids, token_type_ids, attention_mask).last_hidden_state
        if positions is None:
            last = attention_mask.sum(dim=1) - 1
            picked = hidden[torch.arange(len(hidden), device=hidden.device), last]
        else:
            picked = hidden[positions]
        return self.logits(picked)


def next_token_targets(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (positions (B, T) bool, targets (N,)): each target-side position (the source's [SEP] and the target
    tokens but the last) predicts the next token: the target and its closing [SEP]."""
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    is_target = (types == 1) & (mask == 1)
    predicts = torch.zeros_like(is_target)
    predicts[:, :-1] = is_target[:, 1:]                 # position t predicts token t + 1 when t + 1 is target
    return predicts, ids[:, 1:][predicts[:, :-1]]


def seq2seq_loss(model: nn.Module, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy of next_token_targets. A loss_fn for bertkit.train.train."""
    predicts, targets = next_token_targets(batch)
    logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], positions=predicts)
    loss = F.cross_entropy(logits.float(), targets)
    return loss, {"tokens": float(targets.numel())}


@torch.no_grad()
def seq2seq_decode(model: Seq2SeqLM, source_ids: Sequence[int], cls_id: int, sep_id: int, max_new_tokens: int = 32,
                   banned_ids: Sequence[int] = (), use_cache: bool = True, num_beams: int = 1,
                   no_repeat_ngram_size: int = 0, length_penalty: float = 1.0,
                   repetition_penalty: float = 1.0) -> list[int]:
    """The target tokens for one source, without the closing [SEP]: greedy when num_beams is 1, else beam search
    (bertkit.generate.beam; finished hypotheses scored sum_logprob / length ** length_penalty).
    no_repeat_ngram_size n > 0 bans any token that would complete an n-gram already in the target;
    repetition_penalty p != 1 scales the scores of tokens already in it (bertkit.generate.repetition).

    With the cache, the source is encoded once (bidirectionally) and each target token attends to the cached
    source and earlier targets, which is exactly what the seq2seq mask lets it see, so both paths give the same
    tokens (tested); without it every step re-encodes all. Beams run as one batch either way."""
    if model.encoder.config.causal:
        raise BertkitError("seq2seq decoding needs a bidirectional encoder (causal=False)")
    if num_beams < 1:
        raise BertkitError(f"num_beams must be >= 1, got {num_beams}")
    repetition = RepetitionConfig(no_repeat_ngram_size, repetition_penalty)
    model.eval()
    max_length = model.encoder.config.max_length
    source = [cls_id, *list(source_ids)[:max_length - 3], sep_id]
    steps = min(max_new_tokens, max_length - len(source))     # target tokens, [SEP] included, that still fit
    if num_beams == 1:
        return _greedy(model, source, sep_id, steps, banned_ids, use_cache, repetition)
    search = BeamSearch(num_beams, sep_id, steps, length_penalty)
    cache = None
    while not search.done:
        logits, cache = _next_token_logits(model, source, search.targets, cache, use_cache)
        # Bans and the penalty go after the normalisation, as in HF: scores stay the model's own log-probabilities.
        logprobs = F.log_softmax(logits.float(), dim=-1)                                 # (B, V)
        if banned_ids:
            logprobs[:, list(banned_ids)] = float("-inf")
        logprobs = control_repetition(logprobs, search.targets, repetition)
        parents = search.advance(logprobs)
        if cache is not None and not search.done:          # each new beam continues its parent's keys/values
            cache = KeyValueCache(tuple(k.index_select(0, parents) for k in cache.keys),
                                  tuple(v.index_select(0, parents) for v in cache.values))
    return search.best()


def _greedy(model: Seq2SeqLM, source: list[int], sep_id: int, steps: int, banned_ids: Sequence[int],
            use_cache: bool, repetition: RepetitionConfig) -> list[int]:
    target: list[int] = []
    cache = None
    for _ in range(steps):
        logits, cache = _next_token_logits(model, source, [target], cache, use_cache)      # (1, V)
        if banned_ids:
            logits[:, list(banned_ids)] = float("-inf")
        token = int(control_repetition(logits, [target], repetition)[0].argmax())
        if token == sep_id:
            break
        target.append(token)
    return target


def _next_token_logits(model: Seq2SeqLM, source: list[int], targets: list[list[int]],
                       cache: Optional[KeyValueCache], use_cache: bool) -> tuple[torch.Tensor, Optional[KeyValueCache]]:
    """(B, V) next-token logits after `source` + each of the B targets (all of one length), and the new cache.
    With use_cache the first call encodes the source alone (B = 1) and later ones feed each target's last
    token on top of `cache`, whose rows must match `targets`."""
    device = next(model.parameters()).device
    if use_cache:
        step = torch.tensor([source] if cache is None else [t[-1:] for t in targets], device=device)   # (B, T)
        types = torch.full_like(step, 0 if cache is None else 1)
        out = model.encoder(step, token_type_ids=types, cache=cache, use_cache=True)
        return model.logits(out.last_hidden_state[:, -1]), out.cache
    ids = torch.tensor([source + t for t in targets], device=device)                                 # (B, T)
    types = torch.tensor([[0] * len(source) + [1] * len(t) for t in targets], device=device)
    return model(ids, types, torch.ones_like(ids)), None


@torch.no_grad()
def seq2seq_sample(model: Seq2SeqLM, source_ids: Sequence[int], cls_id: int, sep_id: int, num_samples: int,
                   sampling: SamplingConfig, max_new_tokens: int = 32, banned_ids: Sequence[int] = (),
                   generator: Optional[torch.Generator] = None,
                   repetition: RepetitionConfig = RepetitionConfig()) -> list[list[int]]:
    """num_samples targets drawn independently for one source (temperature / top-k / top-p, generate.sampling),
    each without its closing [SEP]; `repetition` acts on each row's own target so far, on the logits before
    temperature and filtering (as HF's processors before its warpers). The source is encoded once; its keys and
    values are shared by every row."""
    if num_samples < 1:
        raise BertkitError(f"the number of samples must be >= 1, got {num_samples}")
    if model.encoder.config.causal:
        raise BertkitError("seq2seq decoding needs a bidirectional encoder (causal=False)")
    model.eval()
    max_length = model.encoder.config.max_length
    source = [cls_id, *list(source_ids)[:max_length - 3], sep_id]
    steps = min(max_new_tokens, max_length - len(source))
    logits, cache = _next_token_logits(model, source, [[]], None, True)                  # (1, V)
    rows = torch.zeros(num_samples, dtype=torch.long, device=logits.device)
    cache = KeyValueCache(tuple(k.index_select(0, rows) for k in cache.keys),
                          tuple(v.index_select(0, rows) for v in cache.values))        # each (n, H, T, D)
    logits = logits.index_select(0, rows)                                                # (n, V)
    targets: list[list[int]] = [[] for _ in range(num_samples)]
    finished = [False] * num_samples
    for step in range(steps):
        logits = logits.float()
        if banned_ids:
            logits[:, list(banned_ids)] = float("-inf")
        logits = control_repetition(logits, targets, repetition)
        tokens = next_token(logits, sampling, generator)                                 # (n,)
        for row, token in enumerate(tokens.tolist()):
            if not finished[row]:
                finished[row] = token == sep_id
                if not finished[row]:
                    targets[row].append(token)
        if all(finished) or step == steps - 1:
            break
        # A finished row keeps being fed (its tokens are ignored) so the batch stays rectangular.
        step_ids = tokens[:, None]                                                       # (n, 1)
        out = model.encoder(step_ids, token_type_ids=torch.ones_like(step_ids), cache=cache, use_cache=True)
        logits, cache = model.logits(out.last_hidden_state[:, -1]), out.cache
    return targets
