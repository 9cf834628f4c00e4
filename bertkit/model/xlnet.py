"""XLNet (Yang et al. 2019), top to bottom: permutation language modelling with two-stream attention.

No absolute positions: every layer scores a query against a key by content, by their relative distance
(sinusoids, Transformer-XL: Dai et al. 2019, section 3.3) and by whether the two are in the same segment
(XLNet section 2.5). Two streams run through the same weights:
  content stream h: each position sees its own token and what the attention mask allows (the usual encoder);
  query stream g:   starts from a learned mask embedding, so a target position knows *where* it is but not
                    *what* it is, and sees only tokens earlier in the factorization order (perm_mask).
perm_mask (B, T, T): 1 where query i may NOT attend key j. target_mapping (B, P, T): which positions the P
query-stream rows predict. mems: each layer's input of earlier segments, attended as extra keys (segment
recurrence). Padding may sit on either side (HF pads XLNet on the left): padded keys are masked, and the
sequence summary reads the last real token, which is XLNet's <cls>.
B = batch, T = sequence length, M = memory length, K = M + T keys, P = predicted positions, C = hidden size,
H = heads, D = head size.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, NamedTuple, Optional

import torch
from torch import nn

from bertkit.model.dropout import Dropout
from bertkit.model.encoder import ACTIVATIONS


@dataclass(frozen=True)
class XLNetConfig:
    vocab_size: int = 32000
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    activation: Literal["gelu", "gelu_tanh", "relu"] = "gelu"
    layer_norm_eps: float = 1e-12
    dropout: float = 0.1
    initializer_range: float = 0.02
    clamp_len: int = -1                 # relative distances beyond this are clamped; -1: never
    mem_len: Optional[int] = None       # memory kept per layer for the next segment; None: all of it
    reuse_len: Optional[int] = None     # tokens of this segment that go into the memory; None: all
    pad_token_id: int = 5
    # Relative positions have no length limit; this is the encode / fine-tune limit (XLNet pre-trained on 512).
    max_length: int = 512
    # Sequence classification (HF's summary_* keys): the vector at the last token (<cls>) or the first,
    # then a tanh projection (or none), with dropout before and after.
    summary_type: Literal["last", "first"] = "last"
    summary_use_proj: bool = True
    summary_activation: Optional[Literal["tanh"]] = "tanh"
    summary_first_dropout: float = 0.0
    summary_last_dropout: float = 0.1

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.hidden_size % 2:
            raise ValueError(f"hidden_size {self.hidden_size} must be even (sin and cos halves of the positions)")

    # What the shared code (heads, pooling, encode, fine-tuning) reads from any encoder's config.
    family = "xlnet"
    use_pooler = False
    causal = False

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def hidden_dropout(self) -> float:
        return self.dropout

    def replace(self, **changes) -> "XLNetConfig":
        return dataclasses.replace(self, **changes)


class XLNetOutput(NamedTuple):
    last_hidden_state: torch.Tensor                   # (B, T, C) content stream; (B, 1, C) with cls_only
    pooled_output: Optional[torch.Tensor]             # always None: XLNet has no pooler
    hidden_states: Optional[tuple[torch.Tensor, ...]]  # content stream: embeddings + each layer, each (B, T, C)
    attentions: Optional[tuple[torch.Tensor, ...]]    # content stream, each (B, H, T, K)
    query_hidden_state: Optional[torch.Tensor] = None  # (B, P, C) query stream, with target_mapping
    mems: Optional[tuple[torch.Tensor, ...]] = None   # with use_mems: per layer (B, M', C) for the next segment


def relative_positions(query_length: int, key_length: int, hidden_size: int, clamp_len: int,
                       device: torch.device) -> torch.Tensor:
    """Sinusoids of the distances K, K-1, ..., -T+1 -> (K + T, C). Row t encodes distance K - t; query i
    (at absolute position M + i) and key j are M + i - j apart, which is row T - i + j."""
    distances = torch.arange(key_length, -query_length, -1, device=device, dtype=torch.int64).float()  # (K + T,)
    if clamp_len > 0:
        distances = distances.clamp(-clamp_len, clamp_len)
    inv_freq = 1.0 / torch.pow(10000, torch.arange(0, hidden_size, 2, device=device,
                                                    dtype=torch.int64).float() / hidden_size)          # (C / 2,)
    angles = distances[:, None] * inv_freq                                                             # (K + T, C / 2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)                                             # (K + T, C)


def _distance_index(query_length: int, key_length: int, device: torch.device) -> torch.Tensor:
    """(T, K): the row of relative_positions for query i and key j (Transformer-XL's `rel_shift`, as a gather)."""
    i = torch.arange(query_length, device=device)[:, None]
    j = torch.arange(key_length, device=device)[None, :]
    return query_length - i + j


class RelativeAttention(nn.Module):
    """score(i, j) = [(q_i + u) . k_j  +  (q_i + v) . R_{i-j}  +  (q_i + s) . e_{seg(i,j)}] / sqrt(D), where u, v, s
    are learned per-head biases (content, position, segment) and e_same / e_diff the two segment vectors."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.num_heads, self.head_dim = config.num_heads, config.head_dim
        inner = config.num_heads * config.head_dim
        self.query = nn.Linear(config.hidden_size, inner, bias=False)
        self.key = nn.Linear(config.hidden_size, inner, bias=False)
        self.value = nn.Linear(config.hidden_size, inner, bias=False)
        self.position = nn.Linear(config.hidden_size, inner, bias=False)
        self.out = nn.Linear(inner, config.hidden_size, bias=False)
        self.content_bias = nn.Parameter(torch.zeros(config.num_heads, config.head_dim))    # u  (HF r_w_bias)
        self.position_bias = nn.Parameter(torch.zeros(config.num_heads, config.head_dim))   # v  (HF r_r_bias)
        self.segment_bias = nn.Parameter(torch.zeros(config.num_heads, config.head_dim))    # s  (HF r_s_bias)
        self.segment_embed = nn.Parameter(torch.zeros(2, config.num_heads, config.head_dim))  # [same, different]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.num_heads, self.head_dim).transpose(-3, -2)   # (B, H, L, D) or (H, L, D)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_pos: torch.Tensor,
               distance_index: torch.Tensor, segments: Optional[torch.Tensor], blocked: Optional[torch.Tensor]):
        """q (B, H, T, D); k, v (B, H, K, D); k_pos (H, K + T, D); segments (B, T, K) 1 where the two tokens are
        in different segments; blocked (B, T, K) True where query i may not see key j. -> (B, H, T, D), weights."""
        B, H, T, _ = q.shape
        content = (q + self.content_bias[:, None]) @ k.transpose(-2, -1)                     # (B, H, T, K)
        by_distance = (q + self.position_bias[:, None]) @ k_pos.transpose(-2, -1)            # (B, H, T, K + T)
        position = by_distance.gather(-1, distance_index.expand(B, H, -1, -1))               # (B, H, T, K)
        scores = content + position
        if segments is not None:
            same_or_not = (q + self.segment_bias[:, None]) @ self.segment_embed.permute(1, 2, 0)   # (B, H, T, 2)
            scores = scores + torch.where(segments[:, None], same_or_not[..., 1:], same_or_not[..., :1])  # (B, H, T, K)
        scores = scores * self.head_dim ** -0.5
        if blocked is not None:
            # -1e30 as the original: a row with every key blocked gets uniform weights, never NaN
            scores = scores.masked_fill(blocked[:, None], -1e30)
        weights = self.dropout(scores.softmax(dim=-1))
        return weights @ v, weights                                                          # (B, H, T, D)

    def finish(self, residual: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """(B, H, L, D) -> output projection, dropout, residual add, LayerNorm -> (B, L, C)."""
        merged = attended.transpose(1, 2).reshape(*residual.shape[:2], -1)                 # (B, L, H * D)
        return self.norm(residual + self.dropout(self.out(merged)))


class FeedForward(nn.Module):
    """LayerNorm(x + dropout(W2 dropout(act(W1 x)))): XLNet's post-LN feed-forward."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = ACTIVATIONS[config.activation]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.dropout(self.down(self.dropout(self.act(self.up(x))))))


class Block(nn.Module):
    """One layer: relative attention then feed-forward, for the content stream and (if given) the query stream."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.attention = RelativeAttention(config)
        self.ffn = FeedForward(config)

    def forward(self, h, g, memory, positions, distance_index, segments, content_blocked, query_blocked,
                target_mapping):
        """h (B, T, C); g (B, P, C) or None; memory (B, M, C) or None; positions (K + T, C)."""
        att = self.attention
        context = h if memory is None else torch.cat([memory, h], dim=1)                  # (B, K, C)
        k, v = att._heads(att.key(context)), att._heads(att.value(context))               # (B, H, K, D)
        k_pos = att._heads(att.position(positions))                                       # (H, K + T, D)
        q = att._heads(att.query(h))                                                      # (B, H, T, D)
        attended, weights = att.attend(q, k, v, k_pos, distance_index, segments, content_blocked)
        h_out = self.ffn(att.finish(h, attended))
        if g is None:
            return h_out, None, weights
        q_g = att._heads(att.query(g))                                                    # (B, H, P, D)
        if target_mapping is not None:
            # put each prediction's query at the position it predicts, attend there, and bring it back
            q_g = torch.einsum("bhpd,bpt->bhtd", q_g, target_mapping)                    # (B, H, T, D)
            attended_g, _ = att.attend(q_g, k, v, k_pos, distance_index, segments, query_blocked)
            attended_g = torch.einsum("bhtd,bpt->bhpd", attended_g, target_mapping)      # (B, H, P, D)
        else:
            attended_g, _ = att.attend(q_g, k, v, k_pos, distance_index, segments, query_blocked)
        return h_out, self.ffn(att.finish(g, attended_g)), weights


class Embeddings(nn.Module):
    """Token embeddings and the query stream's learned starting vector; no positions (they are relative)."""

    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.token = nn.Embedding(config.vocab_size, config.hidden_size)
        self.mask = nn.Parameter(torch.zeros(config.hidden_size))                          # HF mask_emb


class XLNetModel(nn.Module):
    def __init__(self, config: XLNetConfig):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.dropout = Dropout(config.dropout)
        self.pooler = None
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, RelativeAttention):
            for param in (module.content_bias, module.position_bias, module.segment_bias, module.segment_embed):
                nn.init.normal_(param, std=std)
        elif isinstance(module, Embeddings):
            nn.init.normal_(module.mask, std=std)

    def summary_index(self, attention_mask: Optional[torch.Tensor], batch: int, length: int,
                      device: torch.device) -> torch.Tensor:
        """(B,) position of the sequence summary: the last real token (<cls>, whichever side the padding is
        on), or position 0 with summary_type 'first'."""
        if self.config.summary_type == "first":
            return torch.zeros(batch, dtype=torch.long, device=device)
        if attention_mask is None:
            return torch.full((batch,), length - 1, dtype=torch.long, device=device)
        positions = torch.arange(1, length + 1, device=device)
        return (attention_mask.to(torch.long) * positions).argmax(dim=-1)

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None, output_hidden_states: bool = False,
                output_attentions: bool = False, cls_only: bool = False, *,
                perm_mask: Optional[torch.Tensor] = None, target_mapping: Optional[torch.Tensor] = None,
                mems: Optional[tuple[torch.Tensor, ...]] = None, use_mems: bool = False) -> XLNetOutput:
        """input_ids (B, T); attention_mask (B, T) 1 for real tokens; token_type_ids (B, T) segments (None: no
        segment term); perm_mask (B, T, T) 1 where i may not attend j; target_mapping (B, P, T) one-hot rows of
        the predicted positions (turns on the query stream); mems: per layer (B, M, C) from an earlier call.
        cls_only: last_hidden_state is (B, 1, C), the summary position only (see summary_index)."""
        B, T = input_ids.shape
        device = input_ids.device
        M = mems[0].shape[1] if mems else 0
        K = M + T
        blocked = None                                                                    # (B, T, K) True: may not see
        if attention_mask is not None and not bool(attention_mask.all()):
            blocked = ~attention_mask.bool()[:, None, :].expand(B, T, T)
        if perm_mask is not None:
            blocked = perm_mask.bool() if blocked is None else blocked | perm_mask.bool()
        if blocked is not None and M:
            blocked = torch.cat([blocked.new_zeros(B, T, M), blocked], dim=-1)            # memory: always visible
        content_blocked = None
        if blocked is not None:
            itself = torch.arange(K, device=device)[None, :] == torch.arange(M, K, device=device)[:, None]  # (T, K)
            content_blocked = blocked & ~itself                                           # h_i always sees x_i
        segments = None
        if token_type_ids is not None:
            key_types = token_type_ids if not M else torch.cat([token_type_ids.new_zeros(B, M), token_type_ids], 1)
            segments = token_type_ids[:, :, None] != key_types[:, None, :]                # (B, T, K)

        h = self.dropout(self.embeddings.token(input_ids))                               # (B, T, C)
        g = None
        if target_mapping is not None:
            target_mapping = target_mapping.to(h.dtype)
            g = self.dropout(self.embeddings.mask.expand(B, target_mapping.shape[1], -1))  # (B, P, C)
        positions = self.dropout(relative_positions(T, K, self.config.hidden_size, self.config.clamp_len,
                                                    device).to(h.dtype))                  # (K + T, C)
        distance_index = _distance_index(T, K, device)                                    # (T, K)

        hidden_states = [h] if output_hidden_states else None
        attentions = [] if output_attentions else None
        new_mems = []
        for index, block in enumerate(self.blocks):
            memory = mems[index] if mems else None
            if use_mems:
                new_mems.append(self._cache(h, memory))
            h, g, weights = block(h, g, memory, positions, distance_index, segments, content_blocked, blocked,
                                  target_mapping)
            if hidden_states is not None:
                hidden_states.append(h)
            if attentions is not None:
                attentions.append(weights)
        h = self.dropout(h)
        if cls_only:
            rows = torch.arange(B, device=device)
            h = h[rows, self.summary_index(attention_mask, B, T, device)][:, None]       # (B, 1, C)
        return XLNetOutput(h, None, tuple(hidden_states) if hidden_states is not None else None,
                           tuple(attentions) if attentions is not None else None,
                           self.dropout(g) if g is not None else None, tuple(new_mems) if use_mems else None)

    def _cache(self, layer_input: torch.Tensor, memory: Optional[torch.Tensor]) -> torch.Tensor:
        """The memory the next segment sees at this layer: (earlier memory +) this input, last mem_len tokens."""
        if self.config.reuse_len:
            layer_input = layer_input[:, :self.config.reuse_len]
        kept = layer_input if memory is None else torch.cat([memory, layer_input], dim=1)
        if self.config.mem_len:
            kept = kept[:, -self.config.mem_len:]
        return kept.detach()
