"""The one sentence-embedding path: encoder -> layer strategy -> pooling -> dense -> whitening -> normalize.

Every sentence vector bertkit makes comes out of `SentenceEncoder`: `Model.encode` (API and CLI), the search
index, every server route (/encode, /v1/embeddings, /search), the contrastive losses and the ONNX export. The
steps are those of sentence-transformers (Transformer -> Pooling -> Dense -> Normalize) with BERT-whitening
(Su et al. 2021) between the dense layers and the normalization; a model folder saves each step's settings
(see checkpoints/sentence.py), so every route makes the same vector from the same folder.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

import numpy as np
import torch
from torch import nn

from bertkit.errors import BertkitWarning
from bertkit.model.encoder import Encoder, EncoderOutput
from bertkit.model.pooling import ROW_POOLINGS, check_options, layer_indices, needs_all_layers, normalize, parse_layers, \
    pool, pool_rows, select_layers

DENSE_ACTIVATIONS = {"tanh": torch.tanh, "identity": lambda x: x, "relu": torch.relu,
                     "gelu": nn.functional.gelu, "sigmoid": torch.sigmoid}


def can_pack(encoder: nn.Module) -> bool:
    """Whether the encoder runs packed (Encoder's packed forward): the BERT family's bidirectional Encoder, not
    XLNet's (relative positions and its own padding rules keep the padded form) nor a causal one."""
    return isinstance(encoder, Encoder) and encoder.can_pack


@dataclass(frozen=True)
class SentenceConfig:
    """How a folder turns token vectors into one vector per text (bertkit.json "encode")."""
    pooling: str = "mean"
    layers: str = "last"
    normalize: bool = False
    max_length: Optional[int] = None      # tokens per text, special tokens included; None: the position limit

    def replace(self, **changes) -> "SentenceConfig":
        return replace(self, **changes)


class Dense(nn.Module):
    """sentence-transformers' Dense module: activation(x W^T + b), applied to the pooled vector."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str = "tanh"):
        super().__init__()
        if activation not in DENSE_ACTIVATIONS:
            raise ValueError(f"dense activation {activation!r} is not one of {', '.join(DENSE_ACTIVATIONS)}")
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return DENSE_ACTIVATIONS[self.activation](self.linear(x))          # (B, out_features)


class Whitening(nn.Module):
    """x -> (x - mean) @ kernel, fitted on vectors of one pooling and layer strategy (embed/whitening.py)."""

    def __init__(self, mean: np.ndarray | torch.Tensor, kernel: np.ndarray | torch.Tensor, count: int = 0,
                 pooling: str = "mean", layers: str = "last"):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean, dtype=np.float32)))       # (C,)
        self.register_buffer("kernel", torch.as_tensor(np.asarray(kernel, dtype=np.float32)))   # (C, K)
        self.count, self.pooling, self.layers = int(count), pooling, layers

    @property
    def dim_in(self) -> int:
        return int(self.kernel.shape[0])

    @property
    def dim_out(self) -> int:
        return int(self.kernel.shape[1])

    def fits(self, pooling: str, layers: str) -> bool:
        """Whether it was fitted on vectors made this way (it means nothing for other vectors)."""
        return (pooling, layers) == (self.pooling, self.layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() - self.mean) @ self.kernel                        # (B, K)

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """numpy (N, dim_in) -> (N, dim_out) float32, the same arithmetic as forward."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim_in:
            raise ValueError(f"whitening fitted on {self.dim_in}-dim vectors cannot apply to shape {vectors.shape}")
        with torch.no_grad():
            return self(torch.from_numpy(vectors)).numpy()


@dataclass
class SentencePipeline:
    """What a model folder says about its sentence vectors: the settings, dense layers and whitening."""
    config: SentenceConfig = field(default_factory=SentenceConfig)
    dense: list[Dense] = field(default_factory=list)
    whitening: Optional[Whitening] = None

    def after_training(self) -> "SentencePipeline":
        """For a folder whose encoder was trained further: a whitening fitted on the old encoder's vectors
        no longer whitens the new ones, so it is dropped; settings and dense layers stay."""
        return SentencePipeline(self.config, self.dense, None)

    def build(self, encoder: Encoder, pooling: Optional[str] = None, layers: Optional[str] = None,
              normalize: Optional[bool] = None, whiten: Optional[bool] = None) -> "SentenceEncoder":
        """The SentenceEncoder of these steps over `encoder`, any setting overridden. whiten: None applies the
        whitening when it was fitted on this pooling and layers; True insists (ValueError otherwise); False
        leaves it out."""
        config = self.config.replace(pooling=pooling or self.config.pooling,
                                     layers=self.config.layers if layers is None else parse_layers(layers),
                                     normalize=self.config.normalize if normalize is None else normalize)
        whitening = self.whitening
        if whitening is not None and whiten and not whitening.fits(config.pooling, config.layers):
            raise ValueError(f"the saved whitening was fitted on pooling={whitening.pooling} "
                             f"layers={whitening.layers}; encode with those, or pass whiten=False")
        if whitening is not None and whiten is None and not whitening.fits(config.pooling, config.layers):
            # the vectors come out unwhitened and wider than the folder's own: say so once per encoder
            warnings.warn(f"pooling={config.pooling} layers={config.layers}: the folder's whitening was fitted on "
                          f"pooling={whitening.pooling} layers={whitening.layers}, so these vectors are not whitened "
                          f"({whitening.dim_in} dims, not {whitening.dim_out}); leave --pooling/--layers out for "
                          "the whitened ones", BertkitWarning, stacklevel=3)
        return SentenceEncoder(encoder, config, self.dense, None if whiten is False else whitening)


class SentenceEncoder(nn.Module):
    """(B, T) token ids -> (B, D) float32 sentence vectors, through every step the folder saved.

    `whitening` is applied only when it was fitted on this pooling and layer strategy; callers that must not
    whiten pass None.
    """

    def __init__(self, encoder: Encoder, config: SentenceConfig = SentenceConfig(),
                 dense: Sequence[Dense] = (), whitening: Optional[Whitening] = None):
        super().__init__()
        check_options(config.pooling, config.layers)
        layer_indices(config.layers, encoder.config.num_layers)        # an index past this model: one line now
        if config.pooling == "none":
            raise ValueError("pooling 'none' gives token vectors, not sentence vectors")
        if config.pooling == "pooler" and encoder.pooler is None:
            raise ValueError("pooling 'pooler': this model has no pooler; use 'cls' or 'mean'")
        if config.pooling == "cls" and encoder.config.family == "xlnet":
            raise ValueError("pooling 'cls': XLNet's <cls> is its last token, not its first; use 'last-token' or "
                             "'mean'")
        self.encoder, self.config = encoder, config
        self.dense = nn.ModuleList(dense)
        self.whitening = whitening if whitening is not None and whitening.fits(config.pooling, config.layers) \
            else None

    @property
    def all_layers(self) -> bool:
        return needs_all_layers(self.config.pooling, self.config.layers)

    @property
    def dim(self) -> int:
        """Width of the vectors it makes."""
        if self.whitening is not None:
            return self.whitening.dim_out
        if len(self.dense):
            return self.dense[-1].linear.out_features
        config = self.encoder.config
        return config.hidden_size * (min(4, config.num_layers) if self.config.layers == "concat-last-4" else 1)

    @property
    def can_pack(self) -> bool:
        """Whether forward(packed=True) skips the padding (see can_pack)."""
        return can_pack(self.encoder)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: Optional[torch.Tensor] = None, packed: bool = False) -> torch.Tensor:
        """packed: run the encoder on the real tokens only where it can (Encoder's packed forward); the same
        vectors. The ONNX export traces the padded form (packed False)."""
        if packed and self.can_pack and not self.all_layers and self.config.pooling in ROW_POOLINGS:
            rows, packing = self.encoder.forward_packed(input_ids, attention_mask, token_type_ids)   # (N, C)
            return self.after_pooling(pool_rows(rows, packing.texts(), packing.batch, self.config.pooling))
        if packed and self.can_pack:
            out = self.encoder(input_ids, attention_mask, token_type_ids, output_hidden_states=self.all_layers,
                               packed=True)
        else:
            out = self.encoder(input_ids, attention_mask, token_type_ids, output_hidden_states=self.all_layers)
        return self.vectors(out, attention_mask)

    def vectors(self, out: EncoderOutput, attention_mask: torch.Tensor) -> torch.Tensor:
        """The steps after the encoder, for callers that ran it themselves (the ONNX graph)."""
        config = self.config
        tokens = select_layers(out.hidden_states, config.layers) if self.all_layers else out.last_hidden_state
        first = out.hidden_states[1] if config.pooling == "first-last-avg" else None
        x = pool(tokens, attention_mask, config.pooling, pooled_output=out.pooled_output, first_layer=first)  # (B, C)
        return self.after_pooling(x)

    def after_pooling(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C) pooled vectors -> (B, D): dense layers, whitening, normalization."""
        for dense in self.dense:
            x = dense(x)                                                     # (B, C')
        x = x.float()           # whitening and normalization in fp32 whatever the encoder computes in
        if self.whitening is not None:
            x = self.whitening(x)                                            # (B, K)
        return normalize(x) if self.config.normalize else x
