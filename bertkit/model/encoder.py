"""The BERT encoder, top to bottom (Devlin et al. 2019), with the family's variants as config fields.

Embeddings -> N blocks of (self-attention, feed-forward) -> optional tanh pooler over [CLS].
B = batch, T = sequence length, C = hidden size, H = heads, D = head size (C = H * D).
Packed forward (`packed=True`): the row-wise work runs on the N real tokens only, (N, C) instead of (B, T, C);
attention alone goes back to padded grids of texts of similar length (model/packing.py). The same numbers,
without the padding's cost.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.model.attention_dropout import CHUNKED_MIN_KEYS, attention_with_dropout
from bertkit.model.config import EncoderConfig
from bertkit.model.dropout import Dropout, dropout
from bertkit.model.packing import Packing


class KeyValueCache(NamedTuple):
    """Keys and values of the tokens seen so far, per layer, for incremental decoding."""
    keys: tuple[torch.Tensor, ...]                       # each (B, H, T_past, D)
    values: tuple[torch.Tensor, ...]

    @property
    def length(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0


class EncoderOutput(NamedTuple):
    last_hidden_state: torch.Tensor                      # (B, T, C)
    pooled_output: Optional[torch.Tensor]                # (B, C): tanh(W h_[CLS]); None without a pooler
    hidden_states: Optional[tuple[torch.Tensor, ...]]    # embeddings + each layer, each (B, T, C)
    attentions: Optional[tuple[torch.Tensor, ...]]       # each (B, H, T, T)
    cache: Optional[KeyValueCache] = None                # with use_cache: past + this call's keys/values


class PackedOutput(NamedTuple):
    rows: torch.Tensor                                   # (N, C) the real tokens' last hidden states
    packing: Packing                                     # where each row sits in the (B, T) batch


ACTIVATIONS = {
    "gelu": F.gelu,                                        # exact erf form, as in BERT
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2 / ALBERT "gelu_new"
    "relu": F.relu,
}


class Embeddings(nn.Module):
    """token + position + segment embeddings, LayerNorm, dropout; ALBERT projects E -> C afterwards."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        size = config.token_embedding_size
        self.position_offset = config.position_offset
        self.token = nn.Embedding(config.vocab_size, size, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, size)
        self.segment = nn.Embedding(config.type_vocab_size, size) if config.type_vocab_size > 0 else None
        self.norm = nn.LayerNorm(size, eps=config.layer_norm_eps) if config.embedding_norm else None
        self.dropout = Dropout(config.hidden_dropout)
        # factorized (ALBERT): E -> C; set whenever embedding_size is, even E == C, as in HF's ALBERT
        self.project = nn.Linear(size, config.hidden_size) if config.embedding_size is not None else None

    def forward(self, input_ids: torch.Tensor, token_type_ids: Optional[torch.Tensor],
                start: int = 0, positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """input_ids (B, T), or (N,) packed with each token's `positions` (N,) given.
        start: position of the first token (the cache length when decoding incrementally)."""
        if positions is None:
            first = self.position_offset + start
            positions = torch.arange(first, first + input_ids.shape[1], device=input_ids.device)   # (T,)
        elif self.position_offset:
            positions = positions + self.position_offset
        x = self.token(input_ids) + self.position(positions)      # (B, T, E) or (N, E)
        if self.segment is not None:
            if token_type_ids is None:
                x = x + self.segment.weight[0]
            else:
                x = x + self.segment(token_type_ids)
        x = self.dropout(self.norm(x) if self.norm is not None else x)
        return self.project(x) if self.project is not None else x  # (B, T, C)


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection and scaled_dot_product_attention (in CPU training
    with attention dropout, the explicit softmax below CHUNKED_MIN_KEYS keys and model/attention_dropout.py from
    there: the same numbers without (B, H, T, T) tensors kept).

    kept_heads: after head pruning, the original indices of the heads this layer still has; the inner
    width is then len(kept_heads) * D instead of C.
    """

    def __init__(self, config: EncoderConfig, kept_heads: Optional[Sequence[int]] = None):
        super().__init__()
        self.kept_heads = list(range(config.num_heads) if kept_heads is None else kept_heads)
        self.num_heads = len(self.kept_heads)
        self.head_dim = config.head_dim
        inner = self.num_heads * self.head_dim
        self.qkv = nn.Linear(config.hidden_size, 3 * inner)
        self.out = nn.Linear(inner, config.hidden_size)
        self.dropout_p = config.attention_dropout

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor], causal: bool, need_weights: bool,
                past: Optional[tuple[torch.Tensor, torch.Tensor]] = None, queries: Optional[int] = None,
                packing: Optional[Packing] = None):
        """-> (output (B, T, C), attention weights or None, (keys, values) including `past`).
        queries: compute only the first `queries` positions' outputs (keys and values still cover all T).
        packing: x is (N, C), the real tokens only; so is the output."""
        if packing is not None:
            return self._packed(x, packing), None, (None, None)
        if queries is None or type(self.qkv) is not nn.Linear:     # int8 Linear: no float weight to slice
            B, T, _ = x.shape
            q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (B, H, T, D)
            q = q[:, :, :queries] if queries is not None else q
        else:
            B, T, _ = x.shape
            inner = self.num_heads * self.head_dim
            weight, bias = self.qkv.weight, self.qkv.bias
            q = F.linear(x[:, :queries], weight[:inner], bias[:inner])
            q = q.view(B, queries, self.num_heads, self.head_dim).transpose(1, 2)                # (B, H, Q, D)
            k, v = F.linear(x, weight[inner:], bias[inner:]).view(B, T, 2, self.num_heads, self.head_dim).permute(
                2, 0, 3, 1, 4)                                                                  # (B, H, T, D)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)   # (B, H, T_past + T, D)
        if causal and mask is None and k.shape[2] != T:
            # New queries sit at the end of the cached sequence: each sees the past and itself.
            mask = torch.ones(T, k.shape[2], dtype=torch.bool, device=x.device).tril(k.shape[2] - T)
        dropout_p = self.dropout_p if self.training else 0.0
        cpu_dropout = dropout_p > 0 and x.device.type == "cpu"     # SDPA's CPU flash kernel has no dropout
        if need_weights or (cpu_dropout and k.shape[2] < CHUNKED_MIN_KEYS):
            y, weights = _attention_with_weights(q, k, v, mask, causal, dropout_p)
            weights = weights if need_weights else None
        elif cpu_dropout:
            # long rows: the same numbers in cache-sized chunks, recomputed in backward (model/attention_dropout.py)
            y, weights = attention_with_dropout(q, k, v, mask, causal, dropout_p), None
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                               is_causal=causal and mask is None)
            weights = None
        y = y.transpose(1, 2).reshape(B, q.shape[2], self.num_heads * self.head_dim)   # (B, T or Q, H * D)
        return self.out(y), weights, (k, v)

    def _packed(self, x: torch.Tensor, packing: Packing) -> torch.Tensor:
        """x (N, C) real tokens -> (N, C): attention per grid of similar-length texts (model/packing.py)."""
        H, D = self.num_heads, self.head_dim
        qkv = packing.to_attention(self.qkv(x))                     # (N', 3HD) -> (R, 3HD)
        y = qkv.new_empty(qkv.shape[0], H * D)                      # (R, HD)
        dropout_p = self.dropout_p if self.training else 0.0
        for (start, rows, width, _), mask in zip(packing.chunks, packing.key_biases(qkv.dtype)):
            stop = start + rows * width
            q, k, v = qkv[start:stop].view(rows, width, 3, H, D).permute(2, 0, 3, 1, 4)     # (rows, H, width, D)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
            y[start:stop].view(rows, width, H, D).copy_(out.transpose(1, 2))
        return self.out(packing.from_attention(y))                  # (R, HD) -> (N, HD) -> (N, C)


def _attention_with_weights(q, k, v, mask, causal, dropout_p):
    """The explicit softmax(QK^T / sqrt(D)) V, for when the caller wants the attention maps."""
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)      # (B, H, T, T)
    if causal and mask is None:
        T = q.shape[-2]
        mask = torch.ones(T, k.shape[-2], dtype=torch.bool, device=q.device).tril(k.shape[-2] - T)
    if mask is not None:
        # the dtype minimum, not -inf: a row with every key masked (left padding under a causal mask) gets
        # uniform weights instead of NaN, and exp(min - max) is exactly 0 in every other row
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min) if mask.dtype == torch.bool else scores + mask
    weights = scores.softmax(dim=-1)
    return dropout(weights, dropout_p) @ v, weights


class FeedForward(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = ACTIVATIONS[config.activation]      # on CPU in bf16, model/precision.py fuses it into `up`

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class Block(nn.Module):
    """One transformer layer. Post-LN (BERT): x = LN(x + f(x)). Pre-LN: x = x + f(LN(x))."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout)

    def forward(self, x, mask, causal, need_weights, past=None, queries=None, packing=None):
        """queries: only the first `queries` positions go on past attention (see Encoder's cls_only).
        packing: x is the (N, C) real tokens (see Encoder's packed)."""
        if self.pre_norm:
            a, weights, kv = self.attention(self.attention_norm(x), mask, causal, need_weights, past, queries,
                                            packing)
            x = x[:, :queries] if queries is not None else x
            x = x + self.dropout(a)
            return x + self.dropout(self.ffn(self.ffn_norm(x))), weights, kv
        a, weights, kv = self.attention(x, mask, causal, need_weights, past, queries, packing)
        x = x[:, :queries] if queries is not None else x
        x = self.attention_norm(x + self.dropout(a))
        return self.ffn_norm(x + self.dropout(self.ffn(x))), weights, kv


class Pooler(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))            # (B, C) from the [CLS] position


class Encoder(nn.Module):
    # Packed forward: round the rows up to a bucket (model/packing.py). model/precision.py sets it where the
    # Linear layers are oneDNN's per-shape compiled kernels (bf16 on CPU).
    bucket_packed_rows: bool = False

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.blocks = nn.ModuleList(_shared_blocks(config))
        self.final_norm = (nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
                           if config.norm_position == "pre" else None)
        self.pooler = Pooler(config) if config.use_pooler else None
        self.apply(self._init_weights)
        if config.scaled_residual_init:
            for block in self.blocks:
                for linear in (block.attention.out, block.ffn.down):
                    nn.init.normal_(linear.weight, std=config.initializer_range / math.sqrt(2 * config.num_layers))

    @property
    def can_pack(self) -> bool:
        """Whether forward(packed=True) applies: bidirectional attention (a causal model keeps the padded form)."""
        return not self.config.causal

    def pruned_heads(self) -> dict[int, list[int]]:
        """layer -> original indices of the heads removed by pruning (HF's `pruned_heads`)."""
        removed = {}
        for layer, block in enumerate(self.blocks):
            kept = set(block.attention.kept_heads)
            if len(kept) < self.config.num_heads:
                removed[layer] = [h for h in range(self.config.num_heads) if h not in kept]
        return removed

    def shape_pruned(self, removed: dict[int, list[int]]) -> None:
        """Give the listed layers attention modules of the pruned width (before loading pruned weights)."""
        for layer, heads in removed.items():
            kept = [h for h in range(self.config.num_heads) if h not in set(heads)]
            self.blocks[layer].attention = SelfAttention(self.config, kept)

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
            if module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None, output_hidden_states: bool = False,
                output_attentions: bool = False, attention_bias: Optional[torch.Tensor] = None,
                cache: Optional[KeyValueCache] = None, use_cache: bool = False, cls_only: bool = False,
                packed: bool = False) -> EncoderOutput:
        """input_ids (B, T); attention_mask (B, T) 1 for real tokens; attention_bias: an explicit (B|1, 1|H, T, T)
        bool (True = may attend) or additive mask, e.g. UniLM's seq2seq mask, used instead of attention_mask.
        cache / use_cache: incremental decoding; `cache` holds the earlier tokens' keys and values.
        cls_only: the last layer computes the [CLS] position alone (its keys and values still come from every
        position), so last_hidden_state is (B, 1, C). pooled_output and last_hidden_state[:, 0] are exactly those
        of the full pass, for about 1/num_layers less compute: what sequence classification needs.
        packed: run the real tokens only (model/packing.py); the outputs are the same (B, T, C) tensors, zeros at
        the padding. Bidirectional encoders with an attention_mask only: no bias, cache, attentions or cls_only."""
        if cls_only and (output_hidden_states or output_attentions or use_cache or cache is not None
                         or self.config.causal):
            raise ValueError("cls_only is for a bidirectional encoder's [CLS] output: no hidden states, attentions "
                             "or cache")
        if packed and (not self.can_pack or attention_bias is not None or cache is not None or use_cache
                       or output_attentions or cls_only):
            raise ValueError("packed is for a bidirectional encoder's token vectors: no attention bias, cache, "
                             "attentions or cls_only")
        if packed and not output_hidden_states:
            rows, packing = self.forward_packed(input_ids, attention_mask, token_type_ids)
            x = packing.unpack(rows)                                            # (N, C) -> (B, T, C)
            return EncoderOutput(x, self.pooler(x) if self.pooler is not None else None, None, None, None)
        packing = (Packing.from_mask(attention_mask, input_ids.shape, input_ids.device, self.bucket_packed_rows)
                   if packed else None)
        if packing is not None:
            x = self.embeddings(packing.pack(input_ids), None if token_type_ids is None else
                                packing.pack(token_type_ids), positions=packing.positions)        # (N', C)
            mask = None                                         # each attention grid has its own (packing.chunks)
        else:
            past_length = cache.length if cache is not None else 0
            x = self.embeddings(input_ids, token_type_ids, start=past_length)   # (B, T, C)
            mask = attention_bias if attention_bias is not None else _padding_mask(attention_mask, self.config.causal)
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        keys, values = [], []
        for index, block in enumerate(self.blocks):
            past = (cache.keys[index], cache.values[index]) if cache is not None else None
            queries = 1 if cls_only and index == len(self.blocks) - 1 else None
            x, weights, (k, v) = block(x, mask, self.config.causal, output_attentions, past, queries, packing)
            if use_cache:
                keys.append(k)
                values.append(v)
            if hidden_states is not None:
                hidden_states.append(x)
            if attentions is not None:
                attentions.append(weights)
        if self.final_norm is not None:
            x = self.final_norm(x)
            if hidden_states is not None:
                hidden_states[-1] = x
        if packing is not None:                  # (N, C) -> (B, T, C), zeros at the padding
            x = packing.unpack(x)
            if hidden_states is not None:        # the last one is x itself
                hidden_states = [packing.unpack(h) for h in hidden_states[:-1]] + [x]
        pooled = self.pooler(x) if self.pooler is not None else None
        return EncoderOutput(x, pooled, tuple(hidden_states) if hidden_states is not None else None,
                             tuple(attentions) if attentions is not None else None,
                             KeyValueCache(tuple(keys), tuple(values)) if use_cache else None)

    def forward_packed(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor],
                       token_type_ids: Optional[torch.Tensor] = None) -> PackedOutput:
        """The packed forward's last layer as the real tokens' (N, C) rows (text by text, in row-major order),
        not unpacked into (B, T, C): what a sentence pooling over the real tokens reads (model/sentence.py).
        The same numbers as forward(packed=True); no pooler, hidden states or attentions."""
        if not self.can_pack:
            raise ValueError("forward_packed is for a bidirectional encoder")
        packing = Packing.from_mask(attention_mask, input_ids.shape, input_ids.device, self.bucket_packed_rows)
        x = self.embeddings(packing.pack(input_ids), None if token_type_ids is None else
                            packing.pack(token_type_ids), positions=packing.positions)        # (N', C)
        for block in self.blocks:
            x = block(x, None, False, False, packing=packing)[0]                           # (N', C)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return PackedOutput(x[:packing.tokens], packing)                                  # (N, C)


def _padding_mask(attention_mask: Optional[torch.Tensor], causal: bool) -> Optional[torch.Tensor]:
    """(B, T) 0/1 -> (B, 1, 1, T) bool key mask (True = attend), or (B, 1, T, T) with the causal triangle.
    None when nothing is padded, so SDPA can take its fastest kernel."""
    if attention_mask is None or bool(attention_mask.all()):
        return None
    keys = attention_mask.bool()[:, None, None, :]               # (B, 1, 1, T)
    if causal:
        T = attention_mask.shape[1]
        keys = keys & torch.ones(T, T, dtype=torch.bool, device=keys.device).tril()
    return keys


def _shared_blocks(config: EncoderConfig) -> list[Block]:
    """ALBERT cross-layer sharing: the same module object appears at every layer it is shared across."""
    blocks = [Block(config) for _ in range(1 if config.share_layers == "all" else config.num_layers)]
    if config.share_layers == "all":
        return blocks * config.num_layers
    for block in blocks[1:]:
        if config.share_layers == "attention":
            block.attention = blocks[0].attention
        elif config.share_layers == "ffn":
            block.ffn = blocks[0].ffn
    return blocks
