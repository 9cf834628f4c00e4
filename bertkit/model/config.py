"""EncoderConfig: every member of the BERT family is a setting of these fields, not a class of its own."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal, Optional

ShareLayers = Literal["none", "all", "attention", "ffn"]
# Which published model the weights are laid out as. The encoder computes the same thing for both; the family
# decides the folder format (checkpoints/hf.py or checkpoints/electra.py) and the sequence-classification head
# (BERT: linear over the tanh pooler; ELECTRA: dense -> gelu -> linear over [CLS], model/heads.py).
Family = Literal["bert", "electra"]


@dataclass(frozen=True)
class EncoderConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    activation: Literal["gelu", "gelu_tanh", "relu"] = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2          # segments (sentence A / B); RoBERTa uses 1
    layer_norm_eps: float = 1e-12
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    initializer_range: float = 0.02
    pad_token_id: Optional[int] = 0   # None: no padding row (GPT-2, where id 0 is a real token)
    # RoBERTa numbers positions from pad_token_id + 1 (HF's padding_idx convention): offset 2 there.
    position_offset: int = 0
    # ALBERT: factorized embeddings (size E, projected to H by a Linear; set means projected, even when E == H)
    # and cross-layer parameter sharing.
    embedding_size: Optional[int] = None
    share_layers: ShareLayers = "none"
    # "post" is BERT (LayerNorm after each residual add); "pre" normalizes block inputs and adds a final norm.
    norm_position: Literal["post", "pre"] = "post"
    use_pooler: bool = True
    # GPT-style decoders reuse the same blocks: a causal mask, no LayerNorm right after the embeddings
    # (GPT-2 normalizes inside each pre-LN block), and residual projections initialized with
    # std / sqrt(2 * num_layers) (GPT-2 paper, section 2.3).
    causal: bool = False
    embedding_norm: bool = True
    scaled_residual_init: bool = False
    family: Family = "bert"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                     "max_position_embeddings"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if not self.layer_norm_eps > 0 or self.layer_norm_eps == float("inf"):   # NaN fails the first test
            raise ValueError(f"layer_norm_eps must be a positive finite number, got {self.layer_norm_eps}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def token_embedding_size(self) -> int:
        return self.embedding_size or self.hidden_size

    @property
    def max_length(self) -> int:
        """Longest sequence (special tokens included) the position table can hold."""
        return self.max_position_embeddings - self.position_offset

    def replace(self, **changes) -> "EncoderConfig":
        return dataclasses.replace(self, **changes)


# Presets as data. Sizes follow Turc et al. 2019 ("Well-Read Students Learn Better") for the small BERTs.
PRESETS: dict[str, EncoderConfig] = {
    "bert-tiny": EncoderConfig(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512),
    "bert-mini": EncoderConfig(hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024),
    "bert-small": EncoderConfig(hidden_size=512, num_layers=4, num_heads=8, intermediate_size=2048),
    "bert-medium": EncoderConfig(hidden_size=512, num_layers=8, num_heads=8, intermediate_size=2048),
    "bert-base": EncoderConfig(),
    "bert-large": EncoderConfig(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
    "roberta-base": EncoderConfig(vocab_size=50265, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1,
                                  position_offset=2, max_position_embeddings=514),
    "gpt2-small": EncoderConfig(vocab_size=50257, pad_token_id=None, type_vocab_size=0, max_position_embeddings=1024,
                                activation="gelu_tanh", layer_norm_eps=1e-5, norm_position="pre",
                                use_pooler=False, causal=True, embedding_norm=False, scaled_residual_init=True),
    "albert-base": EncoderConfig(vocab_size=30000, embedding_size=128, share_layers="all", activation="gelu_tanh",
                                 hidden_dropout=0.0, attention_dropout=0.0),
}


def preset(name: str, **changes) -> EncoderConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name].replace(**changes)


@dataclass
class GPTEncoderConfig:
    """The one GPT shape: what differs between GPT-2 sizes. Everything else (pre-LN, learned positions, no segments,
    tied head, no padding) is the gpt2-small preset of EncoderConfig. `bertkit pretrain --arch gpt`'s [encoder]."""
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    max_position_embeddings: int = 1024
    intermediate_size: Optional[int] = None   # None: 4 x hidden_size, as GPT-2
    dropout: float = 0.1                      # GPT-2's resid/embd/attn dropout

    def encoder_config(self, vocab_size: int, **changes) -> EncoderConfig:
        """The EncoderConfig of this shape; `changes` set any other EncoderConfig field (a GPT-2 folder's)."""
        shape = dict(vocab_size=vocab_size, hidden_size=self.hidden_size, num_layers=self.num_layers,
                     num_heads=self.num_heads, max_position_embeddings=self.max_position_embeddings,
                     intermediate_size=self.intermediate_size or 4 * self.hidden_size,
                     hidden_dropout=self.dropout, attention_dropout=self.dropout)
        return preset("gpt2-small", **{**shape, **changes})


def gpt_config(vocab_size: int, **changes) -> EncoderConfig:
    """A GPT-2-shaped EncoderConfig of any size: GPTEncoderConfig's shape fields (hidden_size, num_layers, ...)
    and any other EncoderConfig field as keywords."""
    shape = {name: changes.pop(name) for name in GPT_SHAPE_FIELDS if name in changes}
    return GPTEncoderConfig(**shape).encoder_config(vocab_size, **changes)


GPT_SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(GPTEncoderConfig))
