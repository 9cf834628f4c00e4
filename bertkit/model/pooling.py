"""From per-layer token vectors to one vector per text: layer strategies, then pooling.

Padding never contributes: every pooling reads the attention mask. Layer strategies follow the BERT
paper's feature-based table (sum of all / last four layers, concatenation of the last four); "first" is
the first transformer layer (hidden_states[1]), as in SimCSE's corrected first-last average. The poolings
"mean-sqrt-len", "weighted-mean" and "last-token" are sentence-transformers' mean_sqrt_len_tokens,
weightedmean (position-weighted, Muennighoff 2022 "SGPT") and lasttoken, computed the same way.
"""
from __future__ import annotations

from typing import Literal, Sequence

import torch

from bertkit.options import LAYER_STRATEGIES, POOLINGS, layer_indices, parse_layers  # noqa: F401

LayerStrategy = Literal["last", "second-to-last", "first", "sum-all", "sum-last-4", "concat-last-4"]
Pooling = Literal["cls", "pooler", "mean", "max", "first-last-avg", "mean-sqrt-len", "weighted-mean", "last-token",
                  "none"]


def check_options(pooling: str, layers: str) -> None:
    if pooling not in POOLINGS:
        raise ValueError(f"pooling {pooling!r} is not one of {', '.join(POOLINGS)}")
    parse_layers(layers)
    if pooling == "pooler" and layers != "last":
        raise ValueError("pooling 'pooler' reads the pooler over the last layer; use layers='last'")


def pooled_or_cls(out) -> torch.Tensor:
    """What a sequence head reads from an EncoderOutput: the pooler's tanh(W h_[CLS]) (B, C) where the encoder has
    a pooler, else the [CLS] hidden state (B, C)."""
    return out.pooled_output if out.pooled_output is not None else out.last_hidden_state[:, 0]


def needs_all_layers(pooling: str, layers: str) -> bool:
    return layers != "last" or pooling == "first-last-avg"


def select_layers(hidden_states: Sequence[torch.Tensor], strategy: str) -> torch.Tensor:
    """hidden_states: embeddings + one (B, T, C) per layer -> (B, T, C), or (B, T, 4C) for concat-last-4.
    Layer indices (options.parse_layers): one picks that hidden state, several are averaged in fp32."""
    picked = layer_indices(strategy, len(hidden_states) - 1)
    if picked is not None:
        if len(picked) == 1:
            return hidden_states[picked[0]]
        return torch.stack([hidden_states[i] for i in picked]).float().mean(0)
    layers = hidden_states[1:]                              # transformer layers only
    if strategy == "last":
        return layers[-1]
    if strategy == "second-to-last":
        return layers[-2] if len(layers) > 1 else layers[-1]
    if strategy == "first":
        return layers[0]
    if strategy == "sum-all":
        return torch.stack(layers).float().sum(0)
    if strategy == "sum-last-4":
        return torch.stack(layers[-4:]).float().sum(0)
    if strategy == "concat-last-4":
        return torch.cat(layers[-4:], dim=-1)
    raise ValueError(f"layers {strategy!r} is not one of {', '.join(LAYER_STRATEGIES)}")


def masked_mean(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T, C), (B, T) -> (B, C), averaging real tokens only (a row with none gives zeros, not NaN)."""
    weights = mask.to(tokens.dtype).unsqueeze(-1)           # (B, T, 1)
    return (tokens * weights).sum(1) / weights.sum(1).clamp(min=1.0)


def masked_max(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    filled = tokens.masked_fill(~mask.bool().unsqueeze(-1), torch.finfo(tokens.dtype).min)
    return filled.max(dim=1).values


def masked_weighted_mean(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean with weights 1, 2, ..., T by position (later tokens count more); right-padded rows."""
    positions = torch.arange(1, tokens.shape[1] + 1, device=tokens.device, dtype=tokens.dtype)   # (T,)
    weights = (mask.to(tokens.dtype) * positions).unsqueeze(-1)                                    # (B, T, 1)
    return (tokens * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


def last_token(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The vector of each row's last real token (right padding: position length - 1)."""
    last = (mask.sum(1) - 1).clamp(min=0)                                                          # (B,)
    return tokens[torch.arange(tokens.shape[0], device=tokens.device), last]


def pool(tokens: torch.Tensor, mask: torch.Tensor, pooling: str, *, pooled_output: torch.Tensor | None = None,
         first_layer: torch.Tensor | None = None) -> torch.Tensor:
    """One vector per row, in fp32 whatever the model computes in (a bf16 sum over T loses digits).
    tokens (B, T, C) from select_layers; mask (B, T) 1 for real tokens."""
    if pooling == "cls":
        return tokens[:, 0].float()
    if pooling == "pooler":
        if pooled_output is None:
            raise ValueError("this model has no pooler; use pooling 'cls' or 'mean'")
        return pooled_output.float()
    if pooling == "mean":
        return masked_mean(tokens.float(), mask)
    if pooling == "max":
        return masked_max(tokens, mask).float()
    if pooling == "mean-sqrt-len":
        tokens = tokens.float()
        weights = mask.to(tokens.dtype).unsqueeze(-1)                                              # (B, T, 1)
        return (tokens * weights).sum(1) / weights.sum(1).clamp(min=1.0).sqrt()
    if pooling == "weighted-mean":
        return masked_weighted_mean(tokens.float(), mask)
    if pooling == "last-token":
        return last_token(tokens, mask).float()
    if pooling == "first-last-avg":
        if first_layer is None:
            raise ValueError("first-last-avg needs the first layer's hidden states")
        return masked_mean((first_layer.float() + tokens.float()) / 2, mask)
    raise ValueError(f"pooling {pooling!r} is not one of {', '.join(POOLINGS[:-1])} (or 'none' for token vectors)")


# The poolings `pool_rows` computes from the packed rows of the real tokens, without their (B, T, C) grid.
ROW_POOLINGS = ("mean", "mean-sqrt-len")


def pool_rows(rows: torch.Tensor, texts: torch.Tensor, batch: int, pooling: str) -> torch.Tensor:
    """The real tokens' (N, C) rows, texts (N,) the batch row of each -> (B, C) fp32, as `pool` over the padded
    grid: a segment sum (index_add_) instead of a masked sum over T, so the padding is never read. The sums add
    the same terms as the masked ones in another order (a difference of float32 roundoff, ~1e-7 relative)."""
    if pooling not in ROW_POOLINGS:
        raise ValueError(f"pool_rows computes {', '.join(ROW_POOLINGS)}, not {pooling!r}")
    sums = torch.zeros(batch, rows.shape[1], dtype=torch.float32, device=rows.device)
    sums.index_add_(0, texts, rows.float())                                                        # (B, C)
    counts = torch.bincount(texts, minlength=batch).to(torch.float32).clamp(min=1.0)[:, None]      # (B, 1)
    return sums / (counts if pooling == "mean" else counts.sqrt())


def normalize(vectors: torch.Tensor) -> torch.Tensor:
    """L2-normalize rows; a zero row stays zero instead of becoming NaN."""
    return vectors / vectors.norm(dim=-1, keepdim=True).clamp(min=1e-12)
