"""ELECTRA (Clark et al. 2020): a small masked-LM generator corrupts the input, a discriminator says for every
token whether it was replaced.

Both are the shared encoder (model/encoder.py) with factorized embeddings where embedding_size differs from the
width (ELECTRA's `embeddings_project`) and no pooler. The generator is narrower, 1/4 to 1/3 of the
discriminator's width (paper section 3.2), and shares the discriminator's token, position and segment embeddings
and their LayerNorm (the original code builds both under one "electra/embeddings" scope); each keeps its own
projection to its width. What is left to a pre-training objective: choosing the masked positions and weighting
the two losses (the paper's lambda = 50).
B = batch, T = sequence length, N = masked positions, V = vocabulary, C = hidden size.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import nn

from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead, ReplacedTokenHead

SHARED_EMBEDDINGS = ("token", "position", "segment", "norm")


def generator_config(discriminator: EncoderConfig, width: float = 0.25, depth: float = 1.0) -> EncoderConfig:
    """The generator of a discriminator, as the original code derives it: hidden size scaled by `width`, layers by
    `depth`, feed-forward 4x the hidden size, one head per 64 dimensions; the embeddings' size is the
    discriminator's, since they are shared."""
    if not 0 < width <= 1 or not 0 < depth <= 1:
        raise ValueError(f"generator width and depth are fractions of the discriminator's in (0, 1], got "
                         f"width={width}, depth={depth}")
    hidden = max(1, round(discriminator.hidden_size * width))
    heads = max(1, hidden // 64)
    while hidden % heads:                       # e.g. hidden 200: 3 heads do not divide it, 2 do
        heads -= 1
    return discriminator.replace(hidden_size=hidden, num_heads=heads, intermediate_size=4 * hidden,
                                 num_layers=max(1, round(discriminator.num_layers * depth)),
                                 embedding_size=discriminator.token_embedding_size, use_pooler=False,
                                 family="electra")


def tie_embeddings(generator: Encoder, discriminator: Encoder) -> None:
    """Make the generator use the discriminator's embedding tables and LayerNorm (the same modules, so one set of
    parameters receives both models' gradients). The generator's own values are dropped."""
    g, d = generator.config, discriminator.config
    for field in ("vocab_size", "token_embedding_size", "max_position_embeddings", "type_vocab_size",
                  "position_offset", "pad_token_id"):
        if getattr(g, field) != getattr(d, field):
            raise ValueError(f"generator and discriminator differ in {field} ({getattr(g, field)} vs "
                             f"{getattr(d, field)}); shared embeddings need the same")
    for name in SHARED_EMBEDDINGS:
        setattr(generator.embeddings, name, getattr(discriminator.embeddings, name))


class ReplacedTokens(NamedTuple):
    input_ids: torch.Tensor    # (B, T): the generator's samples at the masked positions, the original elsewhere
    replaced: torch.Tensor     # (B, T) bool: differs from the original (a sample equal to it counts as original)


@torch.no_grad()
def replace_masked(original_ids: torch.Tensor, masked: torch.Tensor, generator_logits: torch.Tensor,
                   rng: Optional[torch.Generator] = None) -> ReplacedTokens:
    """Sample one token per masked position from the generator's distribution (ELECTRA samples; it does not take
    the argmax) and put it in place. generator_logits: (N, V) for the N True positions of `masked`, in row-major
    order (hidden[masked]). No gradient flows through the sampling, as in the paper.

    Inverse-CDF sampling: one uniform number per row, found in the row's cumulative distribution. It draws from the
    same distribution as torch.multinomial, which draws N x V exponentials on CPU (a fifth of a tiny ELECTRA's step
    at V = 8000, measured with torch.profiler)."""
    probabilities = torch.softmax(generator_logits.float(), dim=-1)                  # (N, V)
    cdf = probabilities.cumsum(dim=-1)                                               # (N, V)
    u = torch.rand(cdf.shape[0], 1, generator=rng, device=cdf.device) * cdf[:, -1:]  # (N, 1) in [0, total)
    # token j where cdf[j-1] <= u < cdf[j]: zero-probability tokens have empty intervals and are never drawn
    sampled = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[1] - 1)   # (N,)
    corrupted = original_ids.clone()
    corrupted[masked] = sampled
    return ReplacedTokens(corrupted, corrupted != original_ids)


class ElectraOutput(NamedTuple):
    generator_logits: torch.Tensor       # (N, V) at the masked positions only
    discriminator_logits: torch.Tensor   # (B, T): "replaced" logit per token (padding included; mask it in the loss)
    replaced: torch.Tensor               # (B, T) bool targets of the discriminator
    corrupted_ids: torch.Tensor          # (B, T) what the discriminator read


class ElectraPretrainingModel(nn.Module):
    """generator (encoder + MLM head tied to the shared embeddings) and discriminator (encoder + replaced-token
    head). Saved apart: the discriminator as an ElectraForPreTraining folder (head key "discriminator"), the
    generator as an ElectraForMaskedLM folder (head key "mlm")."""

    def __init__(self, discriminator: Encoder, generator: Encoder,
                 discriminator_head: Optional[ReplacedTokenHead] = None, generator_head: Optional[MaskedLMHead] = None):
        super().__init__()
        for name, encoder in (("discriminator", discriminator), ("generator", generator)):
            if encoder.config.family != "electra" or encoder.pooler is not None:
                raise ValueError(f"the {name} must be an ELECTRA encoder (family 'electra', no pooler)")
        tie_embeddings(generator, discriminator)
        self.discriminator, self.generator = discriminator, generator
        if discriminator_head is None:
            discriminator_head = ReplacedTokenHead(discriminator.config)
            discriminator_head.apply(discriminator._init_weights)      # BERT's initialization, as the encoders'
        if generator_head is None:
            generator_head = MaskedLMHead(generator.config, activation="gelu")
            generator_head.apply(generator._init_weights)
        self.discriminator_head, self.generator_head = discriminator_head, generator_head

    def heads(self) -> dict[str, dict[str, nn.Module]]:
        """What each of the two folders saves besides its encoder."""
        return {"discriminator": {"discriminator": self.discriminator_head}, "generator": {"mlm": self.generator_head}}

    def forward(self, masked_ids: torch.Tensor, original_ids: torch.Tensor, masked: torch.Tensor,
                attention_mask: Optional[torch.Tensor] = None, token_type_ids: Optional[torch.Tensor] = None,
                rng: Optional[torch.Generator] = None) -> ElectraOutput:
        """masked_ids (B, T): the input with the chosen positions masked; original_ids (B, T); masked (B, T) bool."""
        hidden = self.generator(masked_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids).last_hidden_state             # (B, T, C_gen)
        word_embeddings = self.discriminator.embeddings.token.weight                          # (V, E), shared
        generator_logits = self.generator_head(hidden[masked], word_embeddings)              # (N, V)
        corrupted = replace_masked(original_ids, masked, generator_logits, rng)
        out = self.discriminator(corrupted.input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        logits = self.discriminator_head(out.last_hidden_state)                               # (B, T)
        return ElectraOutput(generator_logits, logits, corrupted.replaced, corrupted.input_ids)
